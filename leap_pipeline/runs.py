"""Run the Dagster job for a range of days from Python or the CLI, in this process.

One run covers the whole range (the assets' single-run backfill policy), so it costs one process
start, and it is recorded in ``$DAGSTER_HOME`` when that is set, visible in the UI like any other.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import dagster as dg

from .partitions import PARTITIONS_ENV, daily_partitions

# The instance settings of data/dagster/dagster.yaml (a test keeps the committed file equal).
DAGSTER_YAML = """\
# The Dagster instance of the embedded default (DAGSTER_HOME=$PWD/data/dagster).
# Runs that write the DuckDB warehouse must not overlap: DuckDB allows one process per file.
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
"""


def ensure_dagster_home(folder: Path) -> Path:
    """Use ``folder`` as ``DAGSTER_HOME`` unless one is set; create it with its dagster.yaml."""
    if not os.environ.get("DAGSTER_HOME"):
        folder = folder.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "dagster.yaml"
        if not config.exists():
            config.write_text(DAGSTER_YAML)
        os.environ["DAGSTER_HOME"] = str(folder)
    return Path(os.environ["DAGSTER_HOME"])


def dagster_instance() -> dg.DagsterInstance:
    """The persistent instance when ``DAGSTER_HOME`` is set, else a throwaway one."""
    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()


def discard_stale_warehouse(path: Path) -> bool:
    """Delete a warehouse whose feature table, attempts or history snapshots were written with
    other columns than today's code writes.

    Only for a warehouse a command owns and re-lands whole from the simulator (the report's, the
    benchmarks'), so an upgrade re-runs instead of failing; a user's warehouse is never passed.
    """
    from leap_serving.contract import schema
    from leap_serving.history import SNAPSHOT_SCHEMA

    from .feature_table import FEATURE_TABLE_COLUMNS
    from .warehouse import open_warehouse, remove_warehouse

    if not path.exists():
        return False
    expected = {
        "feature_table": list(FEATURE_TABLE_COLUMNS),
        "job_attempts": [*schema("job_attempts"), "family"],
        "history_snapshot": [*SNAPSHOT_SCHEMA, "ds"],
    }
    with open_warehouse(path, read_only=True) as wh:
        stale = any(wh.has(t) and wh.columns(t) != columns for t, columns in expected.items())
    if stale:
        remove_warehouse(path)
    return stale


def check_range(first: dt.date, last: dt.date) -> None:
    start = daily_partitions.start.date()
    if first > last:
        raise ValueError(f"start={first} is after end={last}")
    if first < start:
        raise ValueError(f"start={first} is before the first partition {start}")
    if daily_partitions.end is not None:
        end = daily_partitions.end.date() - dt.timedelta(days=1)
        if last > end:
            raise ValueError(
                f"end={last} is after the last partition {end} (${PARTITIONS_ENV} sets them)"
            )


def materialize_days(
    first: dt.date,
    last: dt.date,
    *,
    job_name: str = "daily_pipeline",
    source: str = "",
    warehouse: str = "",
    mlflow_store: str = "",
    training: dict | None = None,
    log_level: str = "INFO",
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """Materialize ``job_name`` for days ``first`` .. ``last`` in one run; raises if it fails
    (unless ``raise_on_error`` is False: then the result says what ran).

    ``training`` sets fields of the training resource (profile, promote, gate_floor, ...).
    """
    from .definitions import defs

    check_range(first, last)
    job = defs.resolve_job_def(job_name)
    result = job.execute_in_process(
        instance=dagster_instance(),
        tags={
            "dagster/asset_partition_range_start": first.isoformat(),
            "dagster/asset_partition_range_end": last.isoformat(),
        },
        run_config={
            "resources": {
                "source": {"config": {"uri": source}},
                "warehouse": {"config": {"path": warehouse}},
                "mlflow_tracking": {"config": {"store": mlflow_store}},
                "training": {"config": dict(training or {})},
            },
            "loggers": {"console": {"config": {"log_level": log_level}}},
        },
        raise_on_error=raise_on_error,
    )
    return result
