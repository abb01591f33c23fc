"""``leap ui``: the Dagster UI and the MLflow UI on the project's data, started and stopped as one.

Each server runs in its own process group, so Ctrl-C here stops both with everything they
started (Dagster's code server and daemon included), and a server that dies takes the other down.
MLflow's server ignores ``MLFLOW_TRACKING_URI``: its backend store and artifact root are named
on its command line, the same store the pipeline and the demo write. ``leap up`` (``up``) starts
and stops its servers with the same helpers (``start_group``, ``stop_groups``), and starts again
one that exits (``up.supervise``); both build the MLflow server's command with ``mlflow_server``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.settings import DATA_ENV, WAREHOUSE_ENV, child_environment, environment

PROJECT = Path(__file__).resolve().parents[2]
# Dagster's recommended command (``dagster dev`` warns that ``dg dev`` supersedes it); with
# ``-w`` it loads workspace.yaml in this environment
DG = shutil.which("dg", path=sysconfig.get_path("scripts")) or shutil.which("dg") or "dg"
STOP_TIMEOUT_S = 20.0

if TYPE_CHECKING:
    from leap_pipeline.app.credentials import MlflowAuth


def free_port() -> int:
    """A port no one listens on now, on the loopback address (tests, screenshots)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether ``url`` answers 200 within ``timeout`` seconds: a server is up."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def ui_environment(data: Path) -> dict[str, str]:
    """The environment every process of the installation at ``data`` runs in (the UI, the
    daemon, its run workers): its data folder, whose calendar file sets the partitions, the
    Dagster home, the warehouse and the MLflow store, each where the settings put it in that
    folder (named explicitly: a variable the caller's shell set for another folder loses)."""
    install = environment({DATA_ENV: str(data.resolve())})
    return child_environment(
        **{
            DATA_ENV: str(install.data),
            "DAGSTER_HOME": str(install.dagster_home_path),
            WAREHOUSE_ENV: str(install.warehouse_path),
            "MLFLOW_TRACKING_URI": install.tracking_uri,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
    )


def mlflow_server(
    store: str,
    artifacts: Path,
    port: int,
    env: dict[str, str],
    *,
    proxy_artifacts: bool = False,
    auth: MlflowAuth | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The MLflow server of ``leap ui`` and ``leap up``: (argv, environment). One worker and no
    job execution (about 500 MiB instead of 2.5 GiB), on the loopback address, its backend
    ``store`` named explicitly (the server ignores ``MLFLOW_TRACKING_URI``). ``leap ui``: its
    SQLite store, the artifacts written by the clients themselves (``--default-artifact-root``),
    no accounts. ``leap up``: its Postgres store, the artifacts served through the server
    (``proxy_artifacts``: ``--artifacts-destination``) and, with ``auth``, MLflow's basic-auth
    app, every request needing an account. Nothing secret goes on the command line, which
    ``ps`` shows to everyone: the store's URL names a password file, and the app's configuration,
    its admin password and its Flask key travel in the server's environment."""
    argv = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--workers",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        store,
        "--artifacts-destination" if proxy_artifacts else "--default-artifact-root",
        artifacts.as_uri(),
    ]
    # MLflow's own import of a deprecated Starlette module warns at every start, which tells an
    # operator nothing they can act on: left out of the server's log (PYTHONWARNINGS' module
    # field is the module the warning is attributed to)
    quiet = "ignore::UserWarning:mlflow.server.fastapi_app"
    warnings_env = ",".join(filter(None, [env.get("PYTHONWARNINGS", ""), quiet]))
    env = {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONWARNINGS": warnings_env}
    if auth is not None:
        argv += ["--app-name", "basic-auth"]
        env.update(auth.server_environment())
    return argv, env


# what Dagster's webserver, daemon and ``dg dev`` load: the checkout's workspace.yaml holds the
# same (a test keeps the two equal), and an installed wheel, which has no checkout, gets it
# written into the data folder
WORKSPACE_YAML = "load_from:\n  - python_module: leap_pipeline.orchestration.definitions\n"


def workspace_file(data: Path) -> Path:
    """``workspace.yaml`` in the data folder, written when it differs: the servers load the
    pipeline from the installed package, from a checkout or a wheel alike."""
    path = data / "workspace.yaml"
    if not path.exists() or path.read_text() != WORKSPACE_YAML:
        data.mkdir(parents=True, exist_ok=True)
        path.write_text(WORKSPACE_YAML)
    return path


def commands(data: Path, dagster_port: int, mlflow_port: int) -> dict[str, tuple[list, dict]]:
    """The two servers: name -> (argv, environment)."""
    data = data.resolve()
    env = ui_environment(data)
    tracking, store = env["MLFLOW_TRACKING_URI"], environment({DATA_ENV: str(data)}).mlflow_store
    return {
        "dagster": (
            [
                str(DG),
                "dev",
                "-w",
                str(workspace_file(data)),
                "-h",
                "127.0.0.1",
                "-p",
                str(dagster_port),
            ],
            env,
        ),
        "mlflow": mlflow_server(tracking, store / "artifacts", mlflow_port, env),
    }


def start_group(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start a server in a process group of its own (a new session: the terminal's Ctrl-C
    reaches this process only, which stops the groups in order)."""
    return subprocess.Popen(argv, env=env, cwd=PROJECT, start_new_session=True)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(process.pid, sig)


def stop_groups(processes: dict[str, subprocess.Popen]) -> None:
    """SIGTERM to each server's whole group (a server that exited may leave children), then
    SIGKILL to any that outlive ``STOP_TIMEOUT_S``."""
    for process in processes.values():
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGINT and SIGTERM stop the servers alike


@contextlib.contextmanager
def interrupted_by_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the block (both explicitly: a process
    started in the background of a script inherits SIGINT ignored); the handlers are restored."""
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored in the block, then restored: a second Ctrl-C while the servers
    stop must not cut the stop short, leaving servers (and ``leap up``'s Postgres) running. The
    stop is bounded anyway: each group gets SIGKILL after ``STOP_TIMEOUT_S``."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def watch(processes: dict[str, subprocess.Popen], log: Callable = print) -> int:
    """Wait until one of the servers exits (1, having said which); Ctrl-C raises
    ``KeyboardInterrupt`` out of the wait."""
    while True:
        for name, process in processes.items():
            if process.poll() is not None:
                log(f"the {name} server exited with code {process.returncode}: stopping")
                return 1
        time.sleep(0.5)


def up_lock(data: Path) -> Path:
    """``leap up``'s lock on ``data`` (an ``flock``: a killed holder frees it), which ``leap up``
    takes whole and ``leap ui`` and a backup of a stopped Postgres take shared."""
    return data / "locks" / "up.lock"


def up_lock_holder(text: str) -> dict:
    """The record a ``leap up`` keeps in its lock (its pid, since when, its servers), or ``{}``
    for an empty one (a clean stop cleared it) or one written by another release."""
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def live_up(holder: dict) -> int | None:
    """The pid of the ``leap up`` a lock's record names, if that process is alive."""
    pid = holder.get("pid")
    return pid if isinstance(pid, int) and psutil.pid_exists(pid) else None


@contextlib.contextmanager
def sharing_up_lock(data: Path, refused: Callable[[dict], Exception]) -> Iterator[None]:
    """Hold ``up_lock(data)`` shared while the block runs; held whole by another (a ``leap up``
    running, starting or stopping), raise ``refused(holder)``, given the lock's record."""
    path = up_lock(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise refused(up_lock_holder(handle.read())) from None
        yield


def sharing_folder(data: Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``leap up``'s lock on ``data`` shared while the UIs run: a ``leap up`` on the
    folder, which takes it whole, is refused meanwhile, and the UIs are refused on a folder
    ``leap up`` serves (naming its pid), whose webserver is that folder's UI: this one's daemon
    would be a second scheduler on another instance and registry."""

    def refused(holder: dict) -> ValueError:
        pid = live_up(holder)
        who = (
            f"leap up serves this folder (pid {pid}, since {holder.get('since', '?')}); "
            "open the Dagster and MLflow UIs it printed"
            if pid is not None
            else f"{up_lock(data)} is held: leap up is starting or stopping"
        )
        return ValueError(f"--data {data}: {who}")

    return sharing_up_lock(data, refused)


def serve(
    data: Path, dagster_port: int = 3000, mlflow_port: int = 5000, log: Callable = print
) -> int:
    """Run both UIs until Ctrl-C (or SIGTERM), or until one of them exits; never beside a
    ``leap up`` on the same folder (``sharing_folder``)."""
    (data / "dagster").mkdir(parents=True, exist_ok=True)
    (data / "mlflow").mkdir(parents=True, exist_ok=True)
    calendar = Calendar.load(data)  # a malformed file stops here, naming the field
    processes: dict[str, subprocess.Popen] = {}
    with sharing_folder(data), interrupted_by_signals():
        try:
            for name, (argv, env) in commands(data, dagster_port, mlflow_port).items():
                processes[name] = start_group(argv, env)
            log(f"Dagster UI: http://127.0.0.1:{dagster_port}  (assets, partitions, schedule)")
            log(f"MLflow UI:  http://127.0.0.1:{mlflow_port}  (runs, the registered model)")
            log(
                f"partitions: every day from {calendar.first_day} to the last closed day in "
                f"{calendar.timezone} ({data.resolve() / 'leap.toml'}); the nightly schedule "
                "runs at 02:00"
            )
            log("Ctrl-C stops both.")
            return watch(processes, log)
        except KeyboardInterrupt:
            log("stopping both servers")
            return 0
        finally:
            with signals_ignored():
                stop_groups(processes)
