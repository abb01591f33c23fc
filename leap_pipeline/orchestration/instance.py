"""The Dagster instance an install runs in: its home folder and the ``dagster.yaml`` it holds.

On the embedded default the instance keeps its runs, event logs and schedules in SQLite files in
its home, one run at a time. With ``$LEAP_DATABASE_URL`` they go to Postgres
(``dagster-postgres``), where the webserver, the daemon and run workers may write at once and
``$LEAP_MAX_CONCURRENT_RUNS`` may let more runs overlap.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from leap_pipeline.settings import (
    DATABASE_URL_ENV,
    MAX_CONCURRENT_RUNS_ENV,
    Environment,
    environment,
    set_environment,
)

# The instance settings of data/dagster/dagster.yaml (a test keeps the committed file equal).
DAGSTER_YAML = """\
# The Dagster instance of the embedded default (DAGSTER_HOME=$PWD/data/dagster).
# One run at a time: this instance keeps its runs and events in SQLite files, which fail with
# "database is locked" when runs overlap (leap up puts it on Postgres, where runs may overlap).
concurrency:
  runs:
    max_concurrent_runs: 1
telemetry:
  enabled: false
# training progress (phase, EM iteration, expert k of K, time left) in each run's log
python_logs:
  managed_python_loggers:
    - leap.progress
  python_log_level: INFO
# a run stuck starting (its worker never came up) or cancelling is marked failed, so the nightly
# tick stops waiting on it and asks for its nights again
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
"""
_EMBEDDED_HEADER, _, _SETTINGS = DAGSTER_YAML.partition("concurrency:\n")
_RUNS = "    max_concurrent_runs: 1\n"
# on the service, the daemon takes a queued run (one the UI or a sensor submitted) within a
# second, not Dagster's default five: a landing submitted from the UI started 2.5 s later on
# average, each run of a backfill too; the query is one indexed read of Postgres
_RUN_QUEUE = (
    "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: QueuedRunCoordinator\n"
    "  config:\n    dequeue_interval_seconds: 1\n"
)


def dagster_yaml(settings: Environment | None = None) -> str:
    """The ``dagster.yaml`` the settings (by default the environment's) ask for:
    ``DAGSTER_YAML`` on the embedded default; with ``$LEAP_DATABASE_URL``, storage on Postgres
    (``dagster-postgres``: run, event-log and schedule storage in that database); with
    ``$LEAP_MAX_CONCURRENT_RUNS``, that many runs at once. More than one run at once needs the
    database: SQLite's files, written by several runs at once, fail with "database is locked"."""
    settings = settings or environment()
    runs, url = settings.max_concurrent_runs, settings.database_sqlalchemy_url
    if runs == 1 and not url:
        return DAGSTER_YAML
    if not url:
        raise ValueError(
            f"{MAX_CONCURRENT_RUNS_ENV}={runs} needs {DATABASE_URL_ENV}: the embedded instance's "
            "SQLite files allow one run at a time"
        )
    header = (
        f"# The Dagster instance on Postgres (${DATABASE_URL_ENV}), written from leap's\n"
        f"# settings; runs at once: ${MAX_CONCURRENT_RUNS_ENV}. Runs share the DuckDB warehouse\n"
        "# one read or write at a time, each waiting up to $LEAP_WAREHOUSE_WAIT_S for another's.\n"
    )
    storage = f"storage:\n  postgres:\n    postgres_url: {json.dumps(url)}\n"
    body = _SETTINGS.replace(_RUNS, f"    max_concurrent_runs: {runs}\n", 1)
    return f"{header}{storage}{_RUN_QUEUE}concurrency:\n{body}"


def write_dagster_home(folder: Path, settings: Environment) -> Path:
    """Create ``folder`` with the ``dagster.yaml`` ``settings`` ask for, written whole each time
    (its database URL may have moved); readable by its owner only, as it may hold a password."""
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "dagster.yaml"
    partial = config.with_name(".dagster.yaml.tmp")
    partial.write_text(dagster_yaml(settings))
    partial.chmod(0o600)
    partial.replace(config)  # whole or not at all: a process starting meanwhile reads one
    return folder


def ensure_dagster_home(folder: Path) -> Path:
    """Use ``folder`` as ``DAGSTER_HOME`` unless one is set; create it with its dagster.yaml
    (the settings', ``DAGSTER_YAML`` on the embedded default) unless it has one."""
    if not environment().dagster_home:
        folder = folder.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "dagster.yaml"
        if not config.exists():
            config.write_text(dagster_yaml())
        set_environment(DAGSTER_HOME=str(folder))
    return Path(environment().dagster_home)


def dagster_instance() -> dg.DagsterInstance:
    """The persistent instance when ``DAGSTER_HOME`` is set, else a throwaway one."""
    if environment().dagster_home:
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()
