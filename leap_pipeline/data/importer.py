"""``leap import``: bring a fleet's own logs in, as daily partitions like the simulator's.

The files (CSV or Parquet; a file or a folder of them) are checked for the contract's required
columns, split by day into a staging folder in the file source's layout, and the daily pipeline
then lands them exactly as it lands any source: validation, quarantine with reasons, counts.
Staging is published whole (a new version replaces the old atomically, so a crash mid-import
leaves the previous staging intact) and partitions are replaced whole, so importing the same files
twice changes nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from leap_pipeline.data.sources import FILE_SUFFIXES, read_file
from leap_serving.launch.contract import required_columns
from leap_serving.launch.validation import ContractError, convert
from leap_serving.model.publish import publish_folder


@dataclass(frozen=True)
class StagedImport:
    folder: Path
    days: list[dt.date]
    rows: dict[str, int]


def read_source_files(path: Path, source: str) -> pl.DataFrame:
    """Every CSV or Parquet file of ``source`` at ``path`` (a file, or a folder searched
    recursively), stacked, with every column as text: validation types them later, so files that
    disagree on types still stack. Raises ``ContractError`` when there is no such file."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in FILE_SUFFIXES)
    else:
        files = [path]
    if not files or not all(p.is_file() for p in files):
        raise ContractError(f"{source}: no CSV or Parquet file at {path}")
    # text everywhere until validation types it, so files that disagree on types still stack
    frames = [read_file(p, source) for p in files]
    frames = [f.select(_as_text(name, dtype) for name, dtype in f.schema.items()) for f in frames]
    return pl.concat(frames, how="diagonal_relaxed")


def _as_text(name: str, dtype: pl.DataType) -> pl.Expr:
    if isinstance(dtype, pl.List):
        return pl.col(name).cast(pl.List(pl.String)).list.join(";")
    return pl.col(name).cast(pl.String)


def _check_columns(frame: pl.DataFrame, source: str, path: Path) -> None:
    missing = [c for c in required_columns(source) if c not in frame.columns]
    if source == "job_attempts":
        missing = [c for c in missing if c != "ds"]  # the day may come from --days-from
    if missing:
        raise ContractError(f"{source} at {path} lacks required column(s) {missing}")


def stage_import(
    attempts: Path,
    allocations: Path,
    hardware: Path,
    staging: Path,
    days_from: str = "ds",
) -> StagedImport:
    """Split the files by day into ``staging`` in the file source's layout."""
    frames = {
        "job_attempts": (read_source_files(attempts, "job_attempts"), attempts),
        "allocations": (read_source_files(allocations, "allocations"), allocations),
        "hardware_specs": (read_source_files(hardware, "hardware_specs"), hardware),
    }
    for source, (frame, path) in frames.items():
        _check_columns(frame, source, path)
    job_attempts = frames["job_attempts"][0]
    if days_from not in job_attempts.columns:
        raise ContractError(f"job_attempts has no column {days_from!r} to take the day from")
    day = convert(job_attempts[days_from], pl.Datetime("us")).dt.date()
    if days_from == "ds" or day.null_count() == day.len():
        day = convert(job_attempts[days_from], pl.Date())
    if day.null_count() == day.len():
        bad = job_attempts[days_from].drop_nulls().head(1).to_list()
        raise ContractError(
            f"job_attempts.{days_from}: no row holds a date or timestamp (first value {bad!r})"
        )
    days = sorted(set(day.drop_nulls().to_list()))
    # a row without a day is staged on the first day with its raw value as ``ds``: landing then
    # quarantines it with the reason, so no row is lost without a count
    job_attempts = job_attempts.with_columns(
        ds=pl.when(day.is_not_null())
        .then(day.cast(pl.String))
        .otherwise(job_attempts[days_from].cast(pl.String)),
        _staged_on=day.fill_null(days[0]).cast(pl.String),
    )
    allocations = frames["allocations"][0].join(
        job_attempts.select("attempt_id", "_staged_on").unique("attempt_id"),
        on="attempt_id",
        how="left",
    )
    orphans = allocations["_staged_on"].null_count()  # allocations of no imported attempt
    everyday = [days[0] + dt.timedelta(days=i) for i in range((days[-1] - days[0]).days + 1)]

    def write(version: Path) -> None:
        for source, frame in (("job_attempts", job_attempts), ("allocations", allocations)):
            for d in everyday:  # a day without jobs lands empty, so history runs on unbroken
                part = frame.filter(pl.col("_staged_on") == d.isoformat()).drop("_staged_on")
                folder = version / source / f"ds={d.isoformat()}"
                folder.mkdir(parents=True)
                part.write_parquet(folder / "part-0.parquet")
        frames["hardware_specs"][0].write_parquet(version / "hardware_specs.parquet")

    publish_folder(staging, write)
    return StagedImport(
        folder=staging,
        days=everyday,
        rows={
            **{source: frame.height for source, (frame, _) in frames.items()},
            "allocations_without_attempt": orphans,
        },
    )
