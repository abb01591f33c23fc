"""Validate job attempts against the data contract: keep, drop (no label) or quarantine (bad row).

Nothing disappears silently. A missing required column is an error for the whole file; a row that
breaks the contract goes to quarantine with its reason; a row without a usable label (missing or
zero throughput, the target being ln q) is dropped and counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from .contract import required_columns, schema


class ContractError(ValueError):
    """A source cannot be read under the contract; the message names the column."""


@dataclass(frozen=True)
class ValidatedAttempts:
    kept: pl.DataFrame  # contract schema, throughput > 0
    dropped: int  # rows without a usable label
    quarantined: pl.DataFrame  # the offending rows as text, plus ``reason``

    def counts(self, rows_in: int) -> dict[str, int]:
        return {
            "rows_in": rows_in,
            "kept": self.kept.height,
            "dropped": self.dropped,
            "quarantined": self.quarantined.height,
        }


_POSITIVE = ("num_trainers", "batch_size")
_NON_NEGATIVE = (
    "num_readers",
    "tensor_parallel",
    "pipeline_parallel",
    "num_sparse_features",
    "num_dense_features",
    "hash_size",
    "seq_len",
    "training_days",
)


def validate_attempts(frame: pl.DataFrame, hardware_types: Iterable[str]) -> ValidatedAttempts:
    """Check one batch of job attempts; ``hardware_types`` are the types the spec table knows."""
    contract = schema("job_attempts")
    missing = [c for c in required_columns("job_attempts") if c not in frame.columns]
    if missing:
        raise ContractError(f"job_attempts lacks required column(s) {missing}")
    frame = frame.with_columns(
        pl.lit(None, dtype=dtype).alias(name)
        for name, dtype in contract.items()
        if name not in frame.columns
    ).select(contract.names())

    reasons = []
    cast = {}
    for name, dtype in contract.items():
        converted = frame[name].cast(dtype, strict=False)
        bad = converted.is_null() & frame[name].is_not_null()
        reasons.append(pl.when(bad).then(pl.lit(f"{name}: not a valid {dtype}")))
        cast[name] = converted
    typed = pl.DataFrame(cast)
    reasons += [
        pl.when(pl.col(name).is_null()).then(pl.lit(f"{name}: missing"))
        for name in required_columns("job_attempts")
    ]
    reasons += [
        pl.when(pl.col(c) <= 0).then(pl.format(f"{c}: {{}} is not positive", pl.col(c)))
        for c in _POSITIVE
    ]
    reasons += [
        pl.when(pl.col(c) < 0).then(pl.format(f"{c}: {{}} is negative", pl.col(c)))
        for c in _NON_NEGATIVE
    ]
    known = pl.Series(sorted(set(hardware_types)), dtype=pl.String).implode()
    reasons.append(
        pl.when(~pl.col("hardware_type").is_in(known)).then(
            pl.format("hardware_type: {} is not in the spec table", pl.col("hardware_type"))
        )
    )
    reasons.append(
        pl.when(pl.col("attempt_id").is_duplicated()).then(
            pl.format("attempt_id: {} appears more than once", pl.col("attempt_id"))
        )
    )
    checked = typed.with_columns(
        # the first broken rule of a row is its reason
        _reason=pl.coalesce(reasons)
    )
    bad = checked["_reason"].is_not_null()
    quarantined = (
        frame.filter(bad)
        .with_columns(_as_text(name, dtype) for name, dtype in frame.schema.items())
        .with_columns(reason=checked["_reason"].filter(bad))
    )
    good = checked.filter(~bad).drop("_reason")
    labelled = good.filter(pl.col("throughput") > 0)
    return ValidatedAttempts(
        kept=labelled, dropped=good.height - labelled.height, quarantined=quarantined
    )


def _as_text(name: str, dtype: pl.DataType) -> pl.Expr:
    """A column as text, lists joined by ';' as in the contract's CSV form."""
    if isinstance(dtype, pl.List):
        return pl.col(name).cast(pl.List(pl.String)).list.join(";")
    return pl.col(name).cast(pl.String)
