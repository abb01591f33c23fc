"""Dagster definitions: the entry point `workspace.yaml` loads."""

import dagster as dg
import polars as pl

from .partitions import daily_partitions
from .simulation import SimulatedFleet


@dg.asset(partitions_def=daily_partitions, group_name="sources")
def simulated_fleet_day(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """One day of the simulated fleet (seed 0, scale 1.0): row counts as metadata.

    The feature table that stores these rows comes with the pipeline issue; this asset checks
    that every partition of the span generates.
    """
    day = SimulatedFleet(seed=0, scale=1.0).day(context.partition_key)
    measured = day.attempts.filter(pl.col("throughput") > 0).height
    return dg.MaterializeResult(
        metadata={
            "attempts": day.attempts.height,
            "with_throughput": measured,
            "allocations": day.allocations.height,
            "model_types": day.attempts["model_type"].n_unique(),
        }
    )


defs = dg.Definitions(assets=[simulated_fleet_day])
