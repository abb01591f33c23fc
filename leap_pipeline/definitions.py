"""Dagster definitions: the entry point `workspace.yaml` loads."""

import datetime as dt

import dagster as dg

from .assets import DATA_ASSETS
from .model_assets import cascade_model, model_evaluation, paper_report, production_model
from .partitions import daily_partitions, nightly_tick
from .resources import (
    MlflowResource,
    NightRecords,
    SourceResource,
    TrainingResource,
    WarehouseResource,
)
from .runs import run_days
from .warehouse import WarehouseError

MODEL_ASSETS = [cascade_model, model_evaluation, production_model]

daily_pipeline = dg.define_asset_job(
    "daily_pipeline",
    selection=dg.AssetSelection.assets(*DATA_ASSETS),
    description="Land the day's sources, build its history snapshot and feature table.",
)
nightly = dg.define_asset_job(
    "nightly",
    selection=dg.AssetSelection.assets(*DATA_ASSETS, *MODEL_ASSETS),
    description="Everything for day D: land, build features, train on D-30..D-1, evaluate on D, "
    "register, and move the production alias if the gate passes.",
)
training = dg.define_asset_job(
    "training",
    selection=dg.AssetSelection.assets(*MODEL_ASSETS),
    description="Train, evaluate and register for days whose feature tables already exist.",
)


@dg.schedule(
    job=nightly, cron_schedule="0 2 * * *", default_status=dg.DefaultScheduleStatus.RUNNING
)
def nightly_schedule(
    context: dg.ScheduleEvaluationContext, warehouse: WarehouseResource, training: TrainingResource
) -> dg.RunRequest | dg.SkipReason:
    """02:00 each night runs yesterday's partition, once its day is complete; a window with days
    not landed gets them landed first, and a day outside the partitions is skipped with why."""
    day = context.scheduled_execution_time.date() - dt.timedelta(days=1)
    try:
        landed = warehouse.landed_days("feature_table")
    except WarehouseError as exc:  # a run holds it longer than the wait: the next tick will do
        return dg.SkipReason(f"the warehouse cannot be read now: {exc}")
    landing = [key for asset in DATA_ASSETS for key in asset.keys]
    return nightly_tick(day, landed, daily_partitions, training.window_days, landing)


defs = dg.Definitions(
    assets=[*DATA_ASSETS, *MODEL_ASSETS, paper_report],
    jobs=[daily_pipeline, nightly, training],
    schedules=[nightly_schedule],
    resources={
        "source": SourceResource(),
        "warehouse": WarehouseResource(),
        "training": TrainingResource(),
        "mlflow_tracking": MlflowResource(),
        "night_records": NightRecords(),
    },
    # one DuckDB writer: every asset of a run executes in the run's own process, one at a time
    executor=dg.in_process_executor,
)


def materialize_days(
    first: dt.date, last: dt.date, *, job_name: str = "daily_pipeline", **options
) -> dg.ExecuteInProcessResult:
    """Materialize the job ``job_name`` for days ``first`` .. ``last`` in one run, in this
    process (``runs.run_days`` takes the options: source, warehouse, training, ...)."""
    return run_days(defs.resolve_job_def(job_name), first, last, **options)
