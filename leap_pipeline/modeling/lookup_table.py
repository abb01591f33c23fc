"""The legacy lookup table (paper sections 1 and 3.2.2): the zero-ML baseline LEAP replaced.

Keyed on (model type, trainers, batch size, hardware type), built from a training window for the
model types with the most attempts, valued at the key's median throughput, and answering only on an
exact key match. The fleet statistics and the evaluation both use this one implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from leap_pipeline.settings import MIN_SUPPORT

HEAD_MODEL_TYPES = 19  # the model types the table answers for: the window's most frequent

LOOKUP_KEY: tuple[str, ...] = ("model_type", "num_trainers", "batch_size", "hardware_type")
TOP_MODEL_TYPES = 19


@dataclass(frozen=True)
class LookupTable:
    """Entries: the key columns, ``lookup_throughput`` (median) and ``support`` (rows)."""

    entries: pl.DataFrame
    model_types: tuple[str, ...]

    def predict(self, rows: pl.DataFrame) -> pl.Series:
        """The table's estimate per row, null where no entry matches the key exactly."""
        missing = [c for c in LOOKUP_KEY if c not in rows.columns]
        if missing:
            raise ValueError(f"rows lack the lookup key column(s) {missing}")
        keyed = rows.select(LOOKUP_KEY).with_row_index("_row")
        joined = keyed.join(self.entries, on=list(LOOKUP_KEY), how="left").sort("_row")
        return joined["lookup_throughput"]


def build_lookup_table(
    window: pl.DataFrame,
    *,
    top_model_types: int = TOP_MODEL_TYPES,
    min_support: int = MIN_SUPPORT,
) -> LookupTable:
    """Build the table from a window of attempts with measured throughput > 0."""
    if top_model_types < 1:
        raise ValueError(f"top_model_types={top_model_types!r} must be at least 1")
    if min_support < 1:
        raise ValueError(f"min_support={min_support!r} must be at least 1")
    valid = window.filter(pl.col("throughput") > 0)
    top = (
        valid.group_by("model_type")
        .len()
        .sort(["len", "model_type"], descending=[True, False])
        .head(top_model_types)["model_type"]
    )
    entries = (
        valid.filter(pl.col("model_type").is_in(top.implode()))
        .group_by(LOOKUP_KEY)
        .agg(
            pl.col("throughput").median().alias("lookup_throughput"),
            pl.len().alias("support"),
        )
        .filter(pl.col("support") >= min_support)
        .sort(LOOKUP_KEY)
    )
    return LookupTable(entries=entries, model_types=tuple(top.to_list()))
