"""Dagster definitions: the entry point `workspace.yaml` loads."""

import dagster as dg

from .assets import feature_table, history_snapshot_asset, source_tables
from .model_assets import cascade_model, model_evaluation, paper_report, production_model
from .resources import MlflowResource, SourceResource, TrainingResource, WarehouseResource

DATA_ASSETS = [source_tables, history_snapshot_asset, feature_table]
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
# 02:00 each night runs yesterday's partition, once its day is complete.
nightly_schedule = dg.build_schedule_from_partitioned_job(
    nightly, hour_of_day=2, default_status=dg.DefaultScheduleStatus.RUNNING
)

defs = dg.Definitions(
    assets=[*DATA_ASSETS, *MODEL_ASSETS, paper_report],
    jobs=[daily_pipeline, nightly, training],
    schedules=[nightly_schedule],
    resources={
        "source": SourceResource(),
        "warehouse": WarehouseResource(),
        "training": TrainingResource(),
        "mlflow_tracking": MlflowResource(),
    },
    # one DuckDB writer: every asset of a run executes in the run's own process, one at a time
    executor=dg.in_process_executor,
)
