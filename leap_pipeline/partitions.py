"""The daily partitions every asset shares: they start on the simulated span's first day."""

import warnings

import dagster as dg

from .simulation import SPAN_START

daily_partitions = dg.DailyPartitionsDefinition(start_date=SPAN_START.isoformat())

# Every asset relies on two Dagster 1.13 beta parameters, on purpose: single-run backfills and
# windows that reach before the first partition. Silence exactly those two warnings.
warnings.filterwarnings(
    "ignore",
    message=r".*(backfill_policy|allow_nonexistent_upstream_partitions).*",
    category=dg.BetaWarning,
)
