"""The daily partitions every asset shares: they start on the simulated span's first day."""

import dagster as dg

from .simulation import SPAN_START

daily_partitions = dg.DailyPartitionsDefinition(start_date=SPAN_START.isoformat())
