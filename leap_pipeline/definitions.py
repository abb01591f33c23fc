"""Dagster definitions: the entry point `workspace.yaml` loads."""

import dagster as dg

from .assets import feature_table, history_snapshot_asset, source_tables
from .resources import SourceResource, WarehouseResource

daily_pipeline = dg.define_asset_job(
    "daily_pipeline",
    selection=dg.AssetSelection.assets(source_tables, history_snapshot_asset, feature_table),
    description="Land the day's sources, build its history snapshot and feature table.",
)

defs = dg.Definitions(
    assets=[source_tables, history_snapshot_asset, feature_table],
    jobs=[daily_pipeline],
    resources={"source": SourceResource(), "warehouse": WarehouseResource()},
    # one DuckDB writer: every asset of a run executes in the run's own process, one at a time
    executor=dg.in_process_executor,
)
