"""Where a day's three sources come from: the simulated fleet (the default) or a user's files.

Both adapters answer ``read_day(day)`` with the raw frames; validation against the contract happens
downstream, the same way for both. A source is named by one string, so the Dagster resource, the CLI
and the environment (``LEAP_SOURCE``) configure it the same way:

- ``simulator`` or ``simulator:seed=0,scale=0.05``: the embedded simulated fleet;
- ``files:/path/to/folder`` (or a bare folder path): files laid out as ``<source>/ds=YYYY-MM-DD/*``
  (Hive style, any number of files) or ``<source>/YYYY-MM-DD.<ext>`` (one file per day), in Parquet
  or CSV, for ``<source>`` in ``job_attempts`` and ``allocations``. Hardware specs may be per day
  the same way, or one ``hardware_specs.parquet`` / ``hardware_specs.csv`` for every day.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import polars as pl

from leap_pipeline.settings import environment
from leap_pipeline.simulation import SPAN_START, SimulatedFleet
from leap_serving.launch.contract import schema
from leap_serving.launch.validation import ContractError, convert, with_contract_columns

FILE_SUFFIXES = (".parquet", ".csv")


@dataclass(frozen=True)
class SourceDay:
    attempts: pl.DataFrame
    allocations: pl.DataFrame
    hardware_specs: pl.DataFrame


class Oracle(Protocol):
    """The hidden truth of a simulated fleet: what evaluation scores predictions against."""

    def true_medians(
        self, attempt_ids: list[str], hardware_types: Sequence[str] | None = None
    ) -> pl.DataFrame:
        """Each attempt's true median throughput, on the type it ran on, or with
        ``hardware_types`` on each of them (its duration, devices and cost there too)."""
        ...


class Source(Protocol):
    description: str

    def read_day(self, day: dt.date) -> SourceDay: ...

    def first_day(self) -> dt.date | None:
        """The first day the source holds, when it can tell."""
        ...

    def has_day(self, day: dt.date) -> bool:
        """Whether the day's sources can be read now (a day with no launches included)."""
        ...

    def oracle(self) -> Oracle | None:
        """The true medians behind the measurements: a simulated source has them, logs do not."""
        ...


@functools.lru_cache(maxsize=4)
def _fleet(seed: int, scale: float) -> SimulatedFleet:
    return SimulatedFleet(seed=seed, scale=scale)


@dataclass(frozen=True)
class SimulatorSource:
    seed: int = 0
    scale: float = 0.05

    @property
    def description(self) -> str:
        return f"simulator:seed={self.seed},scale={self.scale}"

    def fleet(self) -> SimulatedFleet:
        return _fleet(self.seed, self.scale)

    def read_day(self, day: dt.date) -> SourceDay:
        fleet = self.fleet()
        simulated = fleet.day(day)
        return SourceDay(simulated.attempts, simulated.allocations, fleet.hardware_specs())

    def first_day(self) -> dt.date:
        return SPAN_START

    def has_day(self, day: dt.date) -> bool:
        """Every day from the fleet's first on (the calibrated span, then the blocks that carry it
        on); the calendar keeps to the days that have closed."""
        return day >= SPAN_START

    def oracle(self) -> Oracle:
        return self.fleet().oracle()


@dataclass(frozen=True)
class FileSource:
    root: Path

    @property
    def description(self) -> str:
        return f"files:{self.root}"

    def read_day(self, day: dt.date) -> SourceDay:
        if not self.root.is_dir():
            raise ContractError(f"source folder {self.root} does not exist")
        attempts = self._read("job_attempts", day)
        allocations = self._read("allocations", day)
        specs_files = self._day_files("hardware_specs", day) or [
            p for p in (self.root / f"hardware_specs{s}" for s in FILE_SUFFIXES) if p.is_file()
        ]
        if not specs_files:
            raise ContractError(f"no hardware_specs file under {self.root} for {day}")
        specs = pl.concat(
            [read_file(p, "hardware_specs") for p in specs_files], how="diagonal_relaxed"
        )
        return SourceDay(attempts, allocations, specs)

    def first_day(self) -> dt.date | None:
        """The earliest day with a job_attempts file (``ds=DAY/`` or ``DAY.<ext>``)."""
        folder = self.root / "job_attempts"
        days = []
        for path in folder.iterdir() if folder.is_dir() else ():
            text = path.name.removeprefix("ds=") if path.is_dir() else path.stem
            try:
                days.append(dt.date.fromisoformat(text))
            except ValueError:
                continue
        return min(days, default=None)

    def has_day(self, day: dt.date) -> bool:
        """A day has arrived when its job_attempts and allocations files are there (an empty
        file for a day with no launches)."""
        return bool(self._day_files("job_attempts", day) and self._day_files("allocations", day))

    def oracle(self) -> None:
        return None

    def _day_files(self, source: str, day: dt.date) -> list[Path]:
        folder = self.root / source / f"ds={day.isoformat()}"
        if folder.is_dir():
            return sorted(p for p in folder.iterdir() if p.suffix in FILE_SUFFIXES)
        return [
            p
            for p in (self.root / source / f"{day.isoformat()}{s}" for s in FILE_SUFFIXES)
            if p.is_file()
        ]

    def _read(self, source: str, day: dt.date) -> pl.DataFrame:
        files = self._day_files(source, day)
        if not files:
            raise ContractError(
                f"no {source} file for {day} under {self.root / source} "
                f"(expected ds={day.isoformat()}/ or {day.isoformat()}.parquet|.csv)"
            )
        frames = [read_file(p, source) for p in files]
        return pl.concat(frames, how="diagonal_relaxed")


def read_file(path: Path, source: str) -> pl.DataFrame:
    """Read one file of ``source``; CSV columns arrive as text and are typed by validation."""
    if path.suffix == ".parquet":
        return pl.read_parquet(path)
    return pl.read_csv(path, infer_schema=False)


def typed_frame(frame: pl.DataFrame, source: str = "hardware_specs") -> pl.DataFrame:
    """Cast a source other than job attempts to the contract; a bad value is an error naming it."""
    contract = schema(source)
    frame = with_contract_columns(frame, source)
    columns = []
    for name, dtype in contract.items():
        converted = convert(frame[name], dtype)
        bad = converted.is_null() & frame[name].is_not_null()
        if bad.any():
            value = frame[name].filter(bad)[0]
            raise ContractError(f"{source}.{name}: {value!r} is not a valid {dtype}")
        columns.append(converted)
    return pl.DataFrame(columns)


def source_from_uri(uri: str | None = None) -> Source:
    """The source a URI names; empty means ``$LEAP_SOURCE``, then the default simulator."""
    uri = uri or environment().source
    if uri == "simulator" or uri.startswith("simulator:"):
        settings = {}
        for item in filter(None, uri.partition(":")[2].split(",")):
            key, _, value = item.partition("=")
            settings[key.strip()] = value.strip()
        unknown = set(settings) - {"seed", "scale"}
        if unknown:
            raise ValueError(f"source={uri!r}: unknown setting(s) {sorted(unknown)}")
        try:
            seed = int(settings.get("seed", 0))
            scale = float(settings.get("scale", 0.05))
        except ValueError:
            raise ValueError(f"source={uri!r}: seed must be an integer, scale a number") from None
        SimulatedFleet(seed=seed, scale=scale)  # validates the values with a clear error
        return SimulatorSource(seed=seed, scale=scale)
    path = uri.removeprefix("files:")
    return FileSource(Path(path))


def logged_source(logged_sources: list[str]) -> Source | None:
    """The source that produced days whose ``source_log`` holds ``logged_sources``, or None when
    they came from more than one."""
    distinct = set(logged_sources)
    return source_from_uri(distinct.pop()) if len(distinct) == 1 else None


def logged_simulator(logged_sources: list[str]) -> SimulatorSource | None:
    """``logged_source`` when it is the simulator (its scale sets the fleet's accepted ranges)."""
    source = logged_source(logged_sources)
    return source if isinstance(source, SimulatorSource) else None
