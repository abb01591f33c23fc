"""The checks a day's rows pass before they are published: pure functions over one day, each
returning what it found as check name -> problem (empty: the day may be published).

The data assets (``orchestration/data_assets.py``) run them on rows built in memory, write a
day only when nothing was found, and fail their run naming every refused day and its check, so
a refused day is never reported materialized and keeps the rows it had before.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl

from leap_pipeline.data.feature_table import FEATURE_TABLE_COLUMNS
from leap_serving.launch.features import ALWAYS_PRESENT_FEATURES
from leap_serving.launch.snapshot import MAX_SNAPSHOT_FAMILIES


@dataclass(frozen=True)
class Refusal:
    """A day a check refused, and why."""

    day: dt.date
    check: str
    problem: str

    def __str__(self) -> str:
        return f"{self.day} refused by {self.check}: {self.problem}"


def refusals(day: dt.date, found: dict[str, str]) -> list[Refusal]:
    return [Refusal(day, check, problem) for check, problem in found.items()]


def refusal_row(reason: str | None) -> pl.DataFrame:
    """The day's refusal record (table ``landing_refusals``): one row saying why, or none (the
    day landed)."""
    rows = [] if reason is None else [reason]
    at = [] if reason is None else [dt.datetime.now(dt.UTC).replace(tzinfo=None)]
    return pl.DataFrame(
        {"reason": rows, "refused_at": at},
        schema={"reason": pl.String, "refused_at": pl.Datetime("us")},
    )


def landing_audit(counts: dict[str, int]) -> dict[str, str]:
    """A landed day must not be published when it had rows and kept none, or quarantined more
    than half of them (check ``attempts_landed``). A day with no launches is fine."""
    if counts["rows_in"] and counts["kept"] == 0:
        return {"attempts_landed": f"all {counts['rows_in']} rows rejected"}
    if counts["quarantined"] * 2 > counts["rows_in"]:
        return {
            "attempts_landed": f"{counts['quarantined']} of {counts['rows_in']} rows quarantined"
        }
    return {}


def snapshot_audit(snapshot: pl.DataFrame, day: dt.date, max_families: int | None = None) -> dict:
    """A history snapshot as of ``day`` holds no statistic from a later day, and no more families
    than the cap (check ``snapshot_as_of_its_day``)."""
    cap = MAX_SNAPSHOT_FAMILIES if max_families is None else max_families
    found = []
    if snapshot.height and snapshot["last_ds"].max() > day:
        found.append(f"a statistic from {snapshot['last_ds'].max()}")
    families = snapshot.filter(pl.col("hardware_type").is_null()).height
    if families > cap:
        found.append(f"{families} families (at most {cap})")
    return {"snapshot_as_of_its_day": "; ".join(found)} if found else {}


def feature_audit(table: pl.DataFrame, attempts: int) -> dict[str, str]:
    """The feature table checks on one day's rows before they are written: check -> problem."""
    failed = {}
    if table.columns != list(FEATURE_TABLE_COLUMNS):
        failed["columns_are_the_feature_list"] = "columns differ from the feature list"
    if table.height != attempts:
        failed["one_row_per_kept_attempt"] = f"{table.height} rows for {attempts} attempts"
    nulls = [
        c
        for c in (*ALWAYS_PRESENT_FEATURES, "log_q")
        if c in table.columns and table[c].null_count()
    ]
    if nulls:
        failed["required_features_present"] = f"nulls in {nulls}"
    if "hist_days_since_last" in table.columns and (table["hist_days_since_last"] < 1).any():
        failed["history_from_earlier_days"] = "a history statistic from the day itself"
    return failed
