"""Landing a day's sources and building its feature table: pure functions the assets call.

The feature table has one row per measured attempt: identifying columns (for grouping, baselines
and cost accounting, never fed to a model), the label, and ``FEATURE_COLUMNS`` computed by the
shared extraction module from the observable tables alone.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from leap_pipeline.data.sources import SourceDay, typed_frame
from leap_pipeline.data.warehouse import open_warehouse, remove_warehouse
from leap_serving.launch.contract import schema
from leap_serving.launch.families import with_family
from leap_serving.launch.features import FEATURE_COLUMNS, build_features
from leap_serving.launch.history import history_features
from leap_serving.launch.snapshot import SNAPSHOT_SCHEMA
from leap_serving.launch.validation import validate_attempts

ID_COLUMNS: tuple[str, ...] = (
    "attempt_id",
    "ds",
    "family",
    "model_type",
    "hardware_type",
    "num_trainers",
    "batch_size",
    "device_hours",
)
LABEL_COLUMNS: tuple[str, ...] = ("throughput", "log_q")
FEATURE_TABLE_COLUMNS: tuple[str, ...] = ID_COLUMNS + LABEL_COLUMNS + FEATURE_COLUMNS

# Days of attempts a history snapshot summarizes; a family unseen for longer is a cold start again.
HISTORY_LOOKBACK_DAYS = 90

# what a day's landing records (``assets.source_log_row``), before its ``ds``
SOURCE_LOG_COLUMNS: tuple[str, ...] = (
    "source",
    "landed_at",
    "rows_in",
    "kept",
    "dropped",
    "quarantined",
    "content_sha256",
)

QUARANTINE_SCHEMA = pl.Schema(
    {
        "ds": pl.Date,
        "source": pl.String,
        "attempt_id": pl.String,
        "reason": pl.String,
        "record": pl.String,
    }
)


@dataclass(frozen=True)
class LandedDay:
    attempts: pl.DataFrame  # contract schema plus ``family``; labelled rows only
    allocations: pl.DataFrame
    hardware_specs: pl.DataFrame
    quarantine: pl.DataFrame  # QUARANTINE_SCHEMA
    counts: dict[str, int]


def land_day(raw: SourceDay, day: dt.date) -> LandedDay:
    """Validate one day of sources against the contract; nothing is dropped without a count."""
    specs = typed_frame(raw.hardware_specs, "hardware_specs")
    duplicated = specs.filter(pl.col("hardware_type").is_duplicated())["hardware_type"]
    if duplicated.len():
        raise ValueError(f"hardware_specs.hardware_type: {duplicated[0]!r} appears twice")
    validated = validate_attempts(raw.attempts, specs["hardware_type"], day=day)
    allocations = typed_frame(raw.allocations, "allocations")
    quarantine = validated.quarantined.select(
        ds=pl.lit(day, dtype=pl.Date),
        source=pl.lit("job_attempts"),
        attempt_id=pl.col("attempt_id"),
        reason=pl.col("reason"),
        record=pl.struct(pl.exclude("reason")).struct.json_encode(),
    )
    counts = validated.counts(raw.attempts.height)
    counts["allocations"] = allocations.height
    counts["hardware_types"] = specs.height
    return LandedDay(
        attempts=with_family(validated.kept),
        allocations=allocations,
        hardware_specs=specs,
        quarantine=quarantine.cast(dict(QUARANTINE_SCHEMA)),
        counts=counts,
    )


def empty_snapshot() -> pl.DataFrame:
    return pl.DataFrame(schema=SNAPSHOT_SCHEMA)


def build_feature_table(
    attempts: pl.DataFrame,
    allocations: pl.DataFrame,
    hardware_specs: pl.DataFrame,
    snapshot: pl.DataFrame,
) -> pl.DataFrame:
    """The feature table of one day's attempts, history from the snapshot of the day before."""
    attempts = with_family(attempts)
    provisioned = allocations.select(
        "attempt_id",
        devices=pl.col("num_hosts") * pl.col("devices_per_host"),
    ).unique("attempt_id", keep="first")
    ids = attempts.join(provisioned, on="attempt_id", how="left", maintain_order="left").select(
        *ID_COLUMNS[:-1],
        device_hours=pl.col("devices") * pl.col("duration_s") / 3600.0,
        throughput=pl.col("throughput"),
        log_q=pl.col("throughput").log(),
    )
    history = history_features(attempts, snapshot, hardware_specs)
    features = build_features(attempts, hardware_specs, history)
    return pl.concat([ids, features], how="horizontal").select(FEATURE_TABLE_COLUMNS)


def discard_stale_warehouse(path: Path) -> bool:
    """Delete a warehouse whose feature table, attempts or history snapshots were written with
    other columns than today's code writes.

    Only for a warehouse a command owns and re-lands whole from the simulator (the report's, the
    benchmarks'), so an upgrade re-runs instead of failing; a user's warehouse is never passed.
    """
    if not path.exists():
        return False
    expected = {
        "feature_table": list(FEATURE_TABLE_COLUMNS),
        "job_attempts": [*schema("job_attempts"), "family"],
        "history_snapshot": [*SNAPSHOT_SCHEMA, "ds"],
        "source_log": [*SOURCE_LOG_COLUMNS, "ds"],
    }
    with open_warehouse(path, read_only=True) as wh:
        stale = any(wh.has(t) and wh.columns(t) != columns for t, columns in expected.items())
    if stale:
        remove_warehouse(path)
    return stale
