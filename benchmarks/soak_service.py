"""The soak's service topology: ``leap up`` on the soak's folder, and the faults a shared service
meets (``benchmarks/soak.py --topology service``).

``leap up`` runs as a person starts it, in a process of its own; the soak then uses the
variables it prints, so every run the soak makes writes Dagster's records to Postgres and
registers its model with the MLflow server over HTTP. The faults:

- ``restart_postgres``: ``pg_ctl stop -m fast`` then start, while a night trains (every open
  connection is cut; Dagster's storage, the MLflow server and the run must reconnect);
- ``kill_mlflow``: SIGKILL to the MLflow server's main process alone while a night trains
  (its uvicorn child, which held the port, goes with its group; ``leap up`` starts it again
  and the night's registration must ride the gap);
- ``kill_daemon``: SIGKILL to the Dagster daemon while a night trains (``leap up`` starts it
  again, ending nothing else);
- ``kill_postmaster``: SIGKILL to the Postgres postmaster while a night trains (the health
  probe finds it gone and starts it again);
- ``kill_webserver``: SIGKILL to the Dagster webserver's main process while a night trains.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

PROJECT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 300


def _free_port() -> int:
    from leap_pipeline.app.process_groups import free_port

    return free_port()


class ServiceTopology:
    """``leap up`` on ``data``, started at construction and stopped by ``stop``."""

    def __init__(self, data: Path, log=print) -> None:
        self.data, self.log = data, log
        self.output = data.parent / "up.log"
        ports = {"dagster": _free_port(), "mlflow": _free_port()}
        theirs = ("DAGSTER_HOME", "MLFLOW_TRACKING_URI", "LEAP_DATABASE_URL")
        env = {k: v for k, v in os.environ.items() if k not in theirs}
        env["LEAP_MAX_CONCURRENT_RUNS"] = "3"
        with self.output.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "leap_pipeline.app.cli", "up", "--data", str(data),
                 "--dagster-port", str(ports["dagster"]), "--mlflow-port", str(ports["mlflow"])],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=PROJECT,
            )  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "leap up: ready in" not in self.text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"leap up did not start:\n{self.text()[-3000:]}")
            time.sleep(1)
        from leap_pipeline.app.up import read_exports

        # as a shell runs them: the MLflow account's password read from the file they name
        self.env = read_exports(self.text().splitlines())
        self.faults = {
            "postgres_restarts": 0, "mlflow_kills": 0, "daemon_kills": 0,
            "postmaster_kills": 0, "webserver_kills": 0,
        }  # fmt: skip

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def restart_postgres(self) -> str:
        from leap_pipeline.app.postgres import EmbeddedPostgres

        postgres = EmbeddedPostgres(self.data / "postgres")
        started = time.monotonic()
        postgres.stop()
        postgres.start()
        self.faults["postgres_restarts"] += 1
        return f"Postgres restarted ({time.monotonic() - started:.1f} s down)"

    def _kill_main(self, word: str, fault: str, name: str) -> str:
        """SIGKILL to the main process alone of ``leap up``'s server whose command line holds
        ``word``, then wait until ``leap up`` says it started it again."""
        servers = [p for p in psutil.Process(self.process.pid).children()
                   if word in " ".join(p.cmdline())]  # fmt: skip
        if not servers:
            return f"no {name} server to kill"
        said = f"the {name} server exited"
        before = self.text().count(said)
        servers[0].send_signal(signal.SIGKILL)
        self.faults[fault] += 1
        deadline = time.monotonic() + 120
        while self.text().count(said) == before and time.monotonic() < deadline:
            time.sleep(0.2)
        return f"{name} server's main process killed (pid {servers[0].pid}); started again"

    def kill_mlflow(self) -> str:
        return self._kill_main("mlflow", "mlflow_kills", "mlflow")

    def kill_webserver(self) -> str:
        return self._kill_main("app.dagster_login", "webserver_kills", "dagster-webserver")

    def kill_postmaster(self) -> str:
        pid = int((self.data / "postgres" / "postmaster.pid").read_text().split()[0])
        said = "the postgres server started again"
        before = self.text().count(said)
        os.kill(pid, signal.SIGKILL)
        self.faults["postmaster_kills"] += 1
        deadline = time.monotonic() + 120
        while self.text().count(said) == before:
            if time.monotonic() > deadline:
                return f"postmaster killed (pid {pid}); not started again within 120 s"
            time.sleep(0.2)
        return f"postmaster killed (pid {pid}); its probe started it again"

    def kill_daemon(self) -> str:
        """SIGKILL to the Dagster daemon alone (not its group: its code server and the run
        workers it launched are meant to outlive it) while a night trains."""
        daemons = [p for p in psutil.Process(self.process.pid).children()
                   if "dagster-daemon" in " ".join(p.cmdline())]  # fmt: skip
        if not daemons:
            return "no daemon to kill"
        daemons[0].send_signal(signal.SIGKILL)
        self.faults["daemon_kills"] += 1
        deadline = time.monotonic() + 120
        while "the dagster-daemon server exited" not in self.text() and time.monotonic() < deadline:
            time.sleep(0.2)
        return f"daemon killed (pid {daemons[0].pid}); leap up started it again"

    def restarts_seen(self) -> int:
        return self.text().count("started again")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=180)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()
