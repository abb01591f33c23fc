"""Validate job attempts against the data contract: keep, drop (no label) or quarantine (bad row).

Nothing disappears silently. A missing required column is an error for the whole file; a row that
breaks the contract goes to quarantine with its reason; a row without a usable label (missing or
zero throughput, the target being ln q) is dropped and counted.
"""

from __future__ import annotations

import datetime as dt
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


_POSITIVE = ("num_trainers", "batch_size", "requested_devices_per_host")
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


def with_contract_columns(frame: pl.DataFrame, source: str) -> pl.DataFrame:
    """The source's columns in contract order: a missing required one is an error naming it,
    a missing optional one arrives as nulls, extra ones are left out."""
    missing = [c for c in required_columns(source) if c not in frame.columns]
    if missing:
        raise ContractError(f"{source} lacks required column(s) {missing}")
    contract = schema(source)
    return frame.with_columns(
        pl.lit(None, dtype=dtype).alias(name)
        for name, dtype in contract.items()
        if name not in frame.columns
    ).select(contract.names())


def validate_attempts(
    frame: pl.DataFrame, hardware_types: Iterable[str], day: dt.date | None = None
) -> ValidatedAttempts:
    """Check one batch of job attempts; ``hardware_types`` are the types the spec table knows.

    With ``day``, rows dated another day are quarantined: a partition holds its own day only.
    """
    contract = schema("job_attempts")
    frame = with_contract_columns(frame, "job_attempts")

    reasons = []
    cast = {}
    for name, dtype in contract.items():
        converted = convert(frame[name], dtype)
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
    # NaN sorts above every number in polars, so a NaN throughput would pass "> 0" and become
    # a label: a float must be a finite number (null, not NaN, is how a file says "none")
    reasons += [
        pl.when(pl.col(name).is_nan() | pl.col(name).is_infinite()).then(
            pl.format(f"{name}: {{}} is not a finite number", pl.col(name))
        )
        for name, dtype in contract.items()
        if dtype == pl.Float64
    ]
    known = pl.Series(sorted(set(hardware_types)), dtype=pl.String).implode()
    reasons.append(
        pl.when(~pl.col("hardware_type").is_in(known)).then(
            pl.format("hardware_type: {} is not in the spec table", pl.col("hardware_type"))
        )
    )
    if day is not None:
        reasons.append(
            pl.when(pl.col("ds") != day).then(
                pl.format(f"ds: {{}} is not the partition day {day}", pl.col("ds"))
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


_BOOLEAN_TEXT = {"true": True, "false": False, "1": True, "0": False}


def convert(values: pl.Series, dtype: pl.DataType) -> pl.Series:
    """``values`` as ``dtype``; what does not convert becomes null (the caller names it).

    Text (as read from CSV) converts by the contract's CSV rules: ISO dates and timestamps,
    true/false or 1/0, and lists joined by ';'.
    """
    if values.dtype != pl.String or dtype == pl.String():
        return values.cast(dtype, strict=False)
    text = values.str.strip_chars()
    if dtype == pl.Date():
        return text.str.to_date(strict=False)
    if isinstance(dtype, pl.Datetime):
        return text.str.to_datetime(time_unit=dtype.time_unit, strict=False).cast(dtype)
    if dtype == pl.Boolean():
        return text.str.to_lowercase().replace_strict(
            _BOOLEAN_TEXT, default=None, return_dtype=pl.Boolean
        )
    if isinstance(dtype, pl.List):
        return text.str.split(";").cast(dtype, strict=False)
    return text.cast(dtype, strict=False)


def _as_text(name: str, dtype: pl.DataType) -> pl.Expr:
    """A column as text, lists joined by ';' as in the contract's CSV form."""
    if isinstance(dtype, pl.List):
        return pl.col(name).cast(pl.List(pl.String)).list.join(";")
    return pl.col(name).cast(pl.String)
