"""A launch as the Ranker checks and types it before building its features.

Every field a launcher sends is typed as the data contract types it (plain Python: this runs on
every launch), checked for range, and refused by name (``JobError``) when it is not one; the
launch date must come after the model's history snapshot, and the candidates must be types the
model's spec table prices. The daily skew check types a day's launches the same way.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Container, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

from ..launch.contract import schema
from ..launch.features import LAUNCH_COLUMNS
from .results import JobError, shown

if TYPE_CHECKING:
    from .loaded import Loaded

REQUIRED_JOB_FIELDS = ("job_name", "model_type", "num_trainers", "batch_size")
_POSITIVE_FIELDS = ("num_trainers", "batch_size", "requested_devices_per_host")
_NON_NEGATIVE_FIELDS = (
    "num_readers",
    "tensor_parallel",
    "pipeline_parallel",
    "num_sparse_features",
    "num_dense_features",
    "hash_size",
    "seq_len",
    "training_days",
)
# fields a launcher may send that describe the attempt, not the launch: accepted, not used
_CONTRACT = schema("job_attempts")  # read-only; built once, not per launch
_CONTRACT_FIELDS = set(_CONTRACT)


def check_job(
    job: Any, candidates: Any, loaded: Loaded, launch_date: dt.date | None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The launch as contract-typed values, the candidate list, and the fields ignored."""
    return typed_launch(
        job, candidates, loaded.model.history_index.last_ds, loaded.specs, launch_date
    )


def typed_launch(
    job: Any,
    candidates: Any,
    snapshot_day: dt.date | None,
    known_types: Container[str],
    launch_date: dt.date | None,
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The launch as the Ranker checks and types it before building its features: contract-typed
    values, the candidate list (each once), and the fields ignored; a ``JobError`` naming the
    field otherwise. ``snapshot_day`` is the model's history snapshot's, ``known_types`` its
    spec table's (the daily skew check types a day's launches the same way)."""
    if not isinstance(job, Mapping):
        raise JobError(f"job must be a mapping of launch fields, not {type(job).__name__}")
    launch: dict[str, Any] = {}
    for name in REQUIRED_JOB_FIELDS:
        if job.get(name) is None:
            raise JobError(f"job.{name} is missing")
    for name in LAUNCH_COLUMNS:
        if name in ("hardware_type", "ds") or job.get(name) is None:
            continue
        value = job[name]
        if isinstance(value, float) and not math.isfinite(value):
            raise JobError(f"job.{name}={shown(value)} is not a finite number")
        typed = _typed(value, _CONTRACT[name])
        if typed is None:
            raise JobError(f"job.{name}={shown(value)} is not a valid {_CONTRACT[name]}")
        if name in _POSITIVE_FIELDS and typed <= 0:
            raise JobError(f"job.{name}={shown(value)} must be positive")
        if name in _NON_NEGATIVE_FIELDS and typed < 0:
            raise JobError(f"job.{name}={shown(value)} must not be negative")
        launch[name] = typed
    launch["ds"] = _launch_day(job, launch_date)
    if snapshot_day is not None and launch["ds"] <= snapshot_day:
        raise JobError(
            f"launch date {launch['ds']} is not after the model's history snapshot "
            f"({snapshot_day}): the model cannot know that day's history",
            "launch_date",
        )
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Iterable):
        raise JobError("candidates must be a list of hardware type names", "invalid_candidates")
    types = list(candidates)
    if not types:
        raise JobError("no candidate hardware types", "invalid_candidates")
    bad = [t for t in types if not isinstance(t, str)]
    if bad:
        raise JobError(
            f"candidate {shown(bad[0])} is not a hardware type name", "invalid_candidates"
        )
    unknown = [t for t in types if t not in known_types]
    if unknown:
        raise JobError(
            f"unknown hardware type(s) {unknown}: not in the model's spec table",
            "invalid_candidates",
        )
    types = list(dict.fromkeys(types))  # a repeated candidate is ranked once
    ignored = sorted(str(k) for k in job if k not in _CONTRACT_FIELDS)
    return launch, types, ignored


_INT64 = (-(2**63), 2**63 - 1)
# at most 19 digits: int64's range, so int() never meets Python's 4,300-digit limit
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,19}")


def _typed(value: Any, dtype: pl.DataType) -> Any:
    """A launch field as the contract types it (plain Python: this runs on every launch), or
    None when it is not one."""
    if dtype == pl.String:
        return value if isinstance(value, str) else None
    if dtype == pl.Boolean:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, str)):  # 1 / 0 and "true" / "false", as CSV exports carry
            return {"true": True, "false": False, "1": True, "0": False}.get(str(value).lower())
        return None
    if dtype == pl.Int64:
        if isinstance(value, bool):
            return None
        integral = isinstance(value, float) and value.is_integer()
        # ASCII digits only: str.isdigit() also takes "²" and lets "--5" through, and int()
        # then raises on them
        if integral or (isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip())):
            value = int(value)
        if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
            return value
        return None
    return None


def _launch_day(job: Mapping[str, Any], launch_date: dt.date | None) -> dt.date:
    if launch_date is not None:
        if not isinstance(launch_date, dt.date):
            raise JobError(f"launch_date={shown(launch_date)} is not a date")
        return launch_date if not isinstance(launch_date, dt.datetime) else launch_date.date()
    value = job.get("ds")
    if value is None:
        return dt.datetime.now(dt.UTC).date()
    if isinstance(value, dt.date):
        return value if not isinstance(value, dt.datetime) else value.date()
    try:
        if not isinstance(value, str):
            raise ValueError
        return dt.date.fromisoformat(value)
    except ValueError:
        raise JobError(f"job.ds={shown(value)} is not a date YYYY-MM-DD") from None
