"""Run a Dagster job for a range of days from Python or the CLI, in this process.

One run covers the whole range (the assets' single-run backfill policy), so it costs one process
start, and it is recorded in ``$DAGSTER_HOME`` when that is set, visible in the UI like any other.
"""

from __future__ import annotations

import datetime as dt
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import dagster as dg

from leap_pipeline.orchestration.dagster_private import without_definitions_state
from leap_pipeline.orchestration.instance import dagster_instance


@contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Put SIGINT's and SIGTERM's handlers back after an in-process Dagster run.

    Dagster maps SIGTERM to whatever handles SIGINT and leaves it so. A process started in the
    background (a script's ``&``, nohup, cron) ignores SIGINT, so it would then ignore SIGTERM
    too: ``kill`` could no longer stop a report or a demo after its first run."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can set handlers
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def run_days(
    job: dg.JobDefinition,
    first: dt.date,
    last: dt.date,
    *,
    source: str = "",
    warehouse: str = "",
    mlflow_store: str = "",
    training: dict | None = None,
    log_level: str = "INFO",
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """Run ``job`` for days ``first`` .. ``last`` in one run; raises if it fails (unless
    ``raise_on_error`` is False: then the result says what ran).

    ``training`` sets fields of the training resource (profile, promote, gate_floor, ...).
    ``definitions.materialize_days`` runs the project's jobs by name through it.
    """
    run = partial(
        job.execute_in_process,
        instance=dagster_instance(),
        tags={
            "dagster/asset_partition_range_start": first.isoformat(),
            "dagster/asset_partition_range_end": last.isoformat(),
        },
        run_config={
            # only what the caller set: an empty field in run config would replace the
            # value the definitions gave the resource (the calendar's source, say)
            "resources": {
                name: {"config": config}
                for name, config in (
                    ("source", {"uri": source} if source else {}),
                    ("warehouse", {"path": warehouse} if warehouse else {}),
                    ("mlflow_tracking", {"store": mlflow_store} if mlflow_store else {}),
                    ("training", dict(training or {})),
                )
                if config
            },
            "loggers": {"console": {"config": {"log_level": log_level}}},
        },
        raise_on_error=raise_on_error,
    )
    with signal_handlers_kept():
        return without_definitions_state(run)


def land_days(first: dt.date, last: dt.date, source: str, warehouse: str) -> None:
    """Run the data assets for days ``first`` .. ``last`` of ``source`` into the warehouse file
    ``warehouse``, in one run: the report's ``LandDays``, for the CLI and the report's asset
    alike (an asset cannot reach the definitions it belongs to)."""
    from leap_pipeline.orchestration.calendar import Calendar
    from leap_pipeline.orchestration.data_assets import data_assets
    from leap_pipeline.orchestration.resources import SourceResource, WarehouseResource

    calendar = Calendar(first_day=first)  # the caller's own days, whatever the installation's
    calendar.check_days(first, last)
    # no definitions-state storage inherited from an instance since collected
    # (``dagster_private``): a report's second landing in one process failed on it in a test
    land = partial(
        dg.materialize,
        data_assets(calendar.partitions()),
        instance=dagster_instance(),
        resources={
            "source": SourceResource(uri=source),
            "warehouse": WarehouseResource(path=warehouse),
        },
        tags={
            "dagster/asset_partition_range_start": first.isoformat(),
            "dagster/asset_partition_range_end": last.isoformat(),
        },
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    with signal_handlers_kept():
        without_definitions_state(land)


def night_record(result: dg.ExecuteInProcessResult, asset: str, day: dt.date) -> dict:
    """What a model asset recorded for ``day`` in a finished run (``night_records``)."""
    from leap_pipeline.orchestration.night_records import stored_record

    return stored_record(asset, day.isoformat(), result.run_id)
