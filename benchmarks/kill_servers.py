"""Kill each of ``leap up``'s servers by its main process, in turn, and time its return.

``python benchmarks/kill_servers.py [--json]`` starts ``leap up --dask`` on a fresh folder
(scale 0.1 calendar, nothing landed), then sends SIGKILL to the main process alone, never its
group, of each server in turn: the MLflow server, the Dagster webserver, the daemon, the Postgres
postmaster and the Dask scheduler. For each it prints how long until the server answers again
from a new main process (MLflow's ``/health``, the webserver's ``/server_info``, a new daemon
process alive for 5 s, Postgres's ``SELECT 1``, the scheduler's TLS port) and whether
``leap up`` is still running.
A SIGKILL of MLflow's main process used to leave its uvicorn child holding the port: every
restart failed to bind, and six of them stopped the whole service.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

PROJECT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 300
ANSWER_TIMEOUT_S = 120


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from leap_pipeline.app.postgres import EmbeddedPostgres
    from leap_pipeline.app.process_groups import answers, free_port
    from leap_pipeline.app.supervision import listens
    from leap_pipeline.orchestration.calendar import Calendar

    root = Path(tempfile.mkdtemp(prefix="leap-kill-servers-"))
    root.chmod(0o755)  # under root, Postgres's own user must reach the folder
    data = root / "data"
    Calendar(source="simulator:seed=0,scale=0.1").save(data)
    ports = {"dagster": free_port(), "mlflow": free_port(), "dask": free_port()}
    drop = ("DAGSTER_HOME", "MLFLOW_TRACKING_URI", "LEAP_DATABASE_URL", "LEAP_DATA")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    log = root / "up.log"
    with log.open("w") as out:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "leap_pipeline.app.cli",
                "up",
                "--data",
                str(data),
                "--dagster-port",
                str(ports["dagster"]),
                "--mlflow-port",
                str(ports["mlflow"]),
                "--dask",
                "--dask-port",
                str(ports["dask"]),
                "--dask-workers",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=PROJECT,
        )
    started = time.monotonic()
    while "leap up: ready in" not in log.read_text(errors="replace"):
        if up.poll() is not None or time.monotonic() - started > READY_TIMEOUT_S:
            print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
            return 1
        time.sleep(1)
    ready_s = time.monotonic() - started
    postgres = EmbeddedPostgres(data / "postgres")

    def child(word: str) -> psutil.Process | None:
        for process in psutil.Process(up.pid).children():
            if word in " ".join(process.cmdline()):
                return process
        return None

    def daemon_back(old: int) -> bool:
        new = child("dagster-daemon")
        return new is not None and new.pid != old and time.time() - new.create_time() >= 5

    def postgres_back(old: int) -> bool:
        from leap_pipeline.app.backup_postgres import PostgresBackupError, running_url

        try:
            postgres.uri = running_url(data / "postgres") or ""
        except PostgresBackupError:  # starting
            return False
        return bool(postgres.uri) and postgres.ready()

    def postmaster() -> int:
        return int((data / "postgres" / "postmaster.pid").read_text().split()[0])

    servers = {
        "mlflow": (
            lambda: child("mlflow").pid,
            lambda old: answers(f"http://127.0.0.1:{ports['mlflow']}/health"),
        ),
        "dagster-webserver": (
            lambda: child("leap_pipeline.app.dagster_login").pid,
            lambda old: answers(f"http://127.0.0.1:{ports['dagster']}/server_info"),
        ),
        "dagster-daemon": (lambda: child("dagster-daemon").pid, daemon_back),
        "postgres": (postmaster, postgres_back),
        "dask-scheduler": (lambda: child("scheduler").pid, lambda old: listens(ports["dask"])),
    }

    def restarted(main_pid, old: int) -> bool:  # a new main process: not the old one's child
        try:
            return main_pid() != old
        except (AttributeError, OSError, ValueError):  # none yet
            return False

    results = {}
    try:
        for name, (main_pid, answers_now) in servers.items():
            pid = main_pid()
            os.kill(pid, signal.SIGKILL)  # the main process alone: its children stay

            def back(old: int, main_pid=main_pid, answers_now=answers_now) -> bool:
                return restarted(main_pid, old) and answers_now(old)

            killed = time.monotonic()
            time.sleep(0.5)
            while not back(pid):
                if time.monotonic() - killed > ANSWER_TIMEOUT_S or up.poll() is not None:
                    break
                time.sleep(0.2)
            seconds = time.monotonic() - killed
            results[name] = {
                "answers_again_s": round(seconds, 1) if back(pid) else None,
                "leap_up_running": up.poll() is None,
            }
            print(
                f"{name}: killed pid {pid}, answers again after "
                f"{results[name]['answers_again_s']} s",
                file=sys.stderr,
            )
            time.sleep(5)  # let the service settle before the next kill
    finally:
        text = log.read_text(errors="replace")
        running_to_the_end = up.poll() is None  # never stopped itself
        folder_mode = oct(data.stat().st_mode & 0o777)  # after Postgres's restart too
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=180)
        except subprocess.TimeoutExpired:
            up.kill()
    summary = {
        "ready_s": round(ready_s, 1),
        "servers": results,
        "leap_up_stopped_itself": not running_to_the_end,
        "data_folder_mode": folder_mode,
        "bind_failures": text.count("address already in use"),
        "restarts_logged": text.count("started again"),
        "log": str(log),
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        for name, row in results.items():
            print(f"{name:18s} answers again after {row['answers_again_s']} s")
        print(f"leap up stopped itself: {summary['leap_up_stopped_itself']}")
    ok = all(r["answers_again_s"] is not None and r["leap_up_running"] for r in results.values())
    return 0 if ok and not summary["leap_up_stopped_itself"] else 1


if __name__ == "__main__":
    sys.exit(main())
