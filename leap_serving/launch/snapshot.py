"""The history snapshot: what a model ships of the fleet's past, as of the day before a launch.

Per family the snapshot holds the previous log throughput, the running mean and standard
deviation of earlier log throughputs, the number of earlier observations and the day of the last
one; per family and hardware type the same; and the level of the legacy lookup key (model type,
trainers, batch size, type) where at least ``KEY_MIN_SUPPORT`` attempts back it (rows without a
family). Training and serving share it: a snapshot as of day D-1 plus the launch date gives the
features of a launch on day D (``history``).
"""

from __future__ import annotations

import datetime as dt

import polars as pl

from .families import with_family

MAX_SNAPSHOT_FAMILIES = 250_000


# The attempt columns a snapshot is computed from.
SNAPSHOT_INPUT_COLUMNS: tuple[str, ...] = (
    "attempt_id",
    "family",
    "model_type",
    "hardware_type",
    "ds",
    "launch_ts",
    "num_trainers",
    "batch_size",
    "throughput",
)
# the legacy lookup table's key (paper section 1): its level is a feature where it has support
KEY_COLUMNS: tuple[str, ...] = ("model_type", "num_trainers", "batch_size", "hardware_type")
KEY_MIN_SUPPORT = 2

SNAPSHOT_SCHEMA = pl.Schema(
    {
        "family": pl.String,  # null on a lookup-key row
        "hardware_type": pl.String,  # null on the family-level row
        "model_type": pl.String,
        "num_trainers": pl.Int64,  # set on lookup-key rows only
        "batch_size": pl.Int64,  # set on lookup-key rows only
        "count": pl.Int64,
        "mean_log_q": pl.Float64,
        "std_log_q": pl.Float64,
        "prev_log_q": pl.Float64,
        "last_ds": pl.Date,
    }
)


def _valid(rows: pl.DataFrame) -> pl.DataFrame:
    return with_family(rows.filter(pl.col("throughput") > 0)).with_columns(
        log_q=pl.col("throughput").log()
    )


def _statistics(valid: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return valid.group_by(keys).agg(
        pl.col("model_type").last(),
        pl.len().cast(pl.Int64).alias("count"),
        pl.col("log_q").mean().alias("mean_log_q"),
        pl.col("log_q").std(ddof=0).alias("std_log_q"),
        pl.col("log_q").last().alias("prev_log_q"),
        pl.col("ds").max().alias("last_ds"),
    )


def history_snapshot(
    rows: pl.DataFrame, as_of: dt.date, max_families: int = MAX_SNAPSHOT_FAMILIES
) -> pl.DataFrame:
    """Per-family and per-family-and-type statistics over all rows up to and including ``as_of``.

    Keeps the ``max_families`` most recently seen families (ties broken by name), with all their
    per-type rows, so the snapshot a model ships has a bounded size.
    """
    if max_families < 1:
        raise ValueError(f"max_families={max_families!r} must be at least 1")
    valid = _valid(rows.filter(pl.col("ds") <= as_of)).sort("launch_ts", "attempt_id")
    families = (
        _statistics(valid, ["family"])
        .sort(["last_ds", "family"], descending=[True, False])
        .head(max_families)
        .with_columns(hardware_type=pl.lit(None, dtype=pl.String))
    )
    per_type = _statistics(
        valid.join(families.select("family"), on="family", how="semi"), ["family", "hardware_type"]
    ).sort(["family", "hardware_type"])
    with_keys = (
        valid
        if set(KEY_COLUMNS) <= set(valid.columns)
        else valid.clear().with_columns(
            pl.lit(None, dtype=pl.Int64).alias(c) for c in ("num_trainers", "batch_size")
        )
    )  # rows without the key's columns (a caller's own frame) give no key rows
    keys = (
        with_keys.group_by(list(KEY_COLUMNS))
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("log_q").mean().alias("mean_log_q"),
            pl.col("log_q").std(ddof=0).alias("std_log_q"),
            pl.col("log_q").last().alias("prev_log_q"),
            pl.col("ds").max().alias("last_ds"),
        )
        .filter(pl.col("count") >= KEY_MIN_SUPPORT)
        .with_columns(family=pl.lit(None, dtype=pl.String))
        .sort(list(KEY_COLUMNS))
    )
    parts = [
        frame.with_columns(
            pl.lit(None, dtype=pl.Int64).alias(c)
            for c in ("num_trainers", "batch_size")
            if c not in frame.columns
        ).select(SNAPSHOT_SCHEMA.names())
        for frame in (families, per_type, keys)
    ]
    return pl.concat([part.cast(dict(SNAPSHOT_SCHEMA)) for part in parts])
