"""The daily partitions every asset shares, and what the nightly schedule does with them.

The span comes from ``$LEAP_PARTITIONS``: ``FIRST..LAST`` for a fixed set of days (``leap ui``
sets the days landed in the warehouse, so the UI shows missing only what is), or ``FIRST..``
for a set that grows by one partition a day. Unset, it is the configured source's first day
onwards (``$LEAP_SOURCE``; the simulated fleet's by default).
"""

from __future__ import annotations

import datetime as dt
import os
import warnings
from collections.abc import Iterable, Sequence

import dagster as dg

from .sources import SimulatorSource, source_from_uri

PARTITIONS_ENV = "LEAP_PARTITIONS"


def partition_span(text: str | None = None) -> tuple[dt.date, dt.date | None]:
    """(first day, last day or None for open-ended) from ``FIRST..LAST`` or ``FIRST..``."""
    text = os.environ.get(PARTITIONS_ENV, "") if text is None else text
    if not text.strip():
        return default_first_day(), None
    first_text, dots, last_text = text.strip().partition("..")
    try:
        if not dots:
            raise ValueError("no '..'")
        first = dt.date.fromisoformat(first_text)
        last = dt.date.fromisoformat(last_text) if last_text else None
    except ValueError:
        raise ValueError(
            f"{PARTITIONS_ENV}={text!r}: expected FIRST..LAST or FIRST.. with ISO dates, "
            "e.g. 2026-01-01..2026-02-14"
        ) from None
    if last is not None and last < first:
        raise ValueError(f"{PARTITIONS_ENV}={text!r}: the last day is before the first")
    return first, last


def default_first_day() -> dt.date:
    """The configured source's first day (``$LEAP_SOURCE``), or the simulated fleet's when the
    source cannot tell."""
    try:
        first = source_from_uri().first_day()
    except ValueError:  # a malformed $LEAP_SOURCE: the resource reports it when a run reads it
        first = None
    return first or SimulatorSource().first_day()


def daily_partitions_for(first: dt.date, last: dt.date | None) -> dg.DailyPartitionsDefinition:
    end = None if last is None else (last + dt.timedelta(days=1)).isoformat()  # end is exclusive
    return dg.DailyPartitionsDefinition(start_date=first.isoformat(), end_date=end)


daily_partitions = daily_partitions_for(*partition_span())


def span_text(first: dt.date, last: dt.date | None) -> str:
    return f"{first.isoformat()}..{'' if last is None else last.isoformat()}"


def nightly_tick(
    day: dt.date,
    landed: Iterable[dt.date],
    partitions: dg.DailyPartitionsDefinition,
    window_days: int,
    landing_assets: Sequence[dg.AssetKey],
) -> dg.RunRequest | dg.SkipReason:
    """What the 02:00 tick does for ``day`` (yesterday): the whole night on a complete window;
    when days of the window are not landed, a run of ``landing_assets`` that lands them first
    (through ``day``, so the next tick trains); a day the partitions do not hold is skipped,
    saying why."""
    first = partitions.start.date()
    last = partitions.end.date() - dt.timedelta(days=1) if partitions.end else None
    if day < first or (last is not None and day > last):
        return dg.SkipReason(
            f"no partition for {day}: the partitions run {span_text(first, last)} "
            f"(${PARTITIONS_ENV}); set {PARTITIONS_ENV}={first.isoformat()}.. to run every night"
        )
    window_first = max(first, day - dt.timedelta(days=window_days))
    window = [window_first + dt.timedelta(days=i) for i in range((day - window_first).days)]
    missing = sorted(set(window) - set(landed))
    if not missing:
        return dg.RunRequest(run_key=f"nightly-{day.isoformat()}", partition_key=day.isoformat())
    start = missing[0]
    return dg.RunRequest(
        run_key=f"land-{start.isoformat()}-{day.isoformat()}",
        asset_selection=list(landing_assets),
        tags={
            "dagster/asset_partition_range_start": start.isoformat(),
            "dagster/asset_partition_range_end": day.isoformat(),
            "leap/reason": f"{len(missing)} day(s) of {day}'s training window "
            f"{window_first}..{day - dt.timedelta(days=1)} not landed: landing {start}..{day} "
            f"first; the next tick trains",
        },
    )


# Every asset relies on two Dagster 1.13 beta parameters, on purpose: single-run backfills and
# windows that reach before the first partition. Silence exactly those two warnings.
warnings.filterwarnings(
    "ignore",
    message=r".*(backfill_policy|allow_nonexistent_upstream_partitions).*",
    category=dg.BetaWarning,
)
