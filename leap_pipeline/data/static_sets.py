"""A set without days, read as ``leap crossval`` reads it: a public set by name, or a folder in
the data contract.

``leap crossval`` and the benchmarks that study the public sets (``benchmarks/transfer.py``,
``benchmarks/selection_study.py``) read the same rows, so they read them here. What a reader
should hear of (rows quarantined, a folder that holds several days, which cross-validation
treats as one) comes back as notes; the command prints them on stderr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from leap_pipeline.data.importer import read_source_files
from leap_pipeline.data.public_data import PUBLIC_SOURCES, public_sources
from leap_pipeline.data.sources import typed_frame
from leap_serving.launch.validation import validate_attempts


@dataclass(frozen=True)
class StaticSet:
    """A set's kept attempts, its hardware spec table, and what reading it noted."""

    attempts: pl.DataFrame
    specs: pl.DataFrame
    notes: list[str] = field(default_factory=list)


def read_static_set(source: str, path: str | Path, hardware: str | Path | None = None) -> StaticSet:
    """``source`` (a public set's name, or ``contract``) read from the folder ``path``;
    ``hardware`` is the spec file (the Epoch ``ml_hardware.csv`` a public set needs, or a
    contract folder's own ``hardware_specs`` file by default). A bad argument is a
    ``ValueError`` naming the flag it comes from."""
    path = Path(path)
    if source in PUBLIC_SOURCES:
        if not hardware:
            raise ValueError(f"--hardware: the Epoch ml_hardware.csv is needed for {source}")
        attempts, _, specs = public_sources(source, path, Path(hardware))
        return StaticSet(attempts, specs)
    candidates = (path / "hardware_specs.parquet", path / "hardware_specs.csv")
    default = next((p for p in candidates if p.exists()), path / "hardware_specs.csv")
    specs_path = Path(hardware) if hardware else default
    specs = typed_frame(read_source_files(specs_path, "hardware_specs"), "hardware_specs")
    files = (path / "job_attempts", *(path / f"job_attempts{s}" for s in (".parquet", ".csv")))
    found = [p for p in files if p.exists()]
    if not found:
        raise ValueError(f"--path {path}: no job_attempts folder, .parquet or .csv in it")
    validated = validate_attempts(
        read_source_files(found[0], "job_attempts"), specs["hardware_type"]
    )
    notes = []
    if validated.quarantined.height:
        notes.append(
            f"quarantined {validated.quarantined.height} rows, e.g. "
            f"{validated.quarantined['reason'][0]}"
        )
    days = validated.kept["ds"].n_unique() if "ds" in validated.kept.columns else 0
    if days > 1:  # the folds cut by model and type, not by time
        notes.append(
            f"note: --path {path} holds {days} days; crossval treats them as one, so a test "
            "row's history may come from a later day: for dated logs, `leap import` and the "
            "nightly backtest score each day on the days before it"
        )
    return StaticSet(validated.kept, specs, notes)
