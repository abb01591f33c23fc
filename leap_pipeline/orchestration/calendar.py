"""The project's calendar: the first day of the daily partitions, the timezone a day closes in,
and the source its days come from. One small file, ``<data>/leap.toml``, holds it.

Every process of one installation (the UI, the daemon, a run worker, the CLI) points at the same
data folder (``$LEAP_DATA``, set by ``leap ui``; ``data`` under the working directory otherwise)
and so builds the same partitions: nothing is scanned or guessed when the definitions load. The
file is written once, by whoever lands the first days (``leap demo``, ``leap import``,
``leap materialize``), and after that only by a person.

The partitions are open-ended: a day gets its partition when it has closed in the calendar's
timezone (yesterday is the last one), so the schedule and a person in the UI can always reach the
next day. The simulated fleet is a calendar too (every day from 2026-01-01 on, each generated
from its date alone), so its days meet the real calendar: ``leap demo`` lands the 45 days that end
the day before yesterday, and leaves yesterday for a person to materialize from the UI or for
tonight's tick.
"""

from __future__ import annotations

import datetime as dt
import tomllib
import zoneinfo
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
import tomli_w

from leap_pipeline.data.sources import SPAN_START
from leap_pipeline.settings import environment

CALENDAR_FILE = "leap.toml"


def data_folder() -> Path:
    """The installation's data folder: ``$LEAP_DATA``, else ``data`` under the working
    directory."""
    return environment().data


@dataclass(frozen=True)
class Calendar:
    """Where the daily partitions start and in which timezone a day closes.

    ``source`` is the source the installation's runs read when their run config names none
    (empty: ``$LEAP_SOURCE``, then the default simulated fleet)."""

    first_day: dt.date = SPAN_START
    timezone: str = "UTC"
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.first_day, dt.date) or isinstance(self.first_day, dt.datetime):
            raise ValueError(f"first_day={self.first_day!r} is not a date YYYY-MM-DD")
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"timezone={self.timezone!r} is not an IANA timezone such as 'UTC'"
            ) from None

    def partitions(self) -> dg.DailyPartitionsDefinition:
        """Open-ended daily partitions from ``first_day``; the last is the last closed day."""
        return dg.DailyPartitionsDefinition(
            start_date=self.first_day.isoformat(), timezone=self.timezone, end_offset=0
        )

    def today(self, now: dt.datetime | None = None) -> dt.date:
        """The calendar's current (open) day at ``now`` (default: the wall clock)."""
        now = now or dt.datetime.now(dt.UTC)
        if now.tzinfo is None:
            now = now.replace(tzinfo=dt.UTC)
        return now.astimezone(zoneinfo.ZoneInfo(self.timezone)).date()

    def last_closed_day(self, now: dt.datetime | None = None) -> dt.date:
        return self.today(now) - dt.timedelta(days=1)

    def check_days(self, first: dt.date, last: dt.date, now: dt.datetime | None = None) -> None:
        """A clear error when ``first`` .. ``last`` is not a range of partitions."""
        if first > last:
            raise ValueError(f"start={first} is after end={last}")
        if first < self.first_day:
            raise ValueError(
                f"start={first} is before the calendar's first day {self.first_day} "
                f"(first_day in {CALENDAR_FILE})"
            )
        closed = self.last_closed_day(now)
        if last > closed:
            raise ValueError(
                f"end={last} has not closed yet in {self.timezone}: the last closed day is {closed}"
            )

    def with_first_day(self, day: dt.date) -> Calendar:
        return replace(self, first_day=day)

    # -- the file -----------------------------------------------------------------------------

    def text(self) -> str:
        """The file's TOML, written by ``tomli_w`` (any Unicode, quoted as TOML wants it)."""
        values = {
            "first_day": self.first_day.isoformat(),
            "timezone": self.timezone,
            "source": self.source,
        }
        return (
            "# LEAP's calendar: the daily partitions start on first_day and a day closes at\n"
            "# midnight in timezone; source is what runs read when their config names none.\n"
            + tomli_w.dumps(values)
        )

    def save(self, folder: Path | None = None) -> Path:
        """Write ``<folder>/leap.toml`` atomically (write, then rename)."""
        folder = Path(folder or data_folder())
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / CALENDAR_FILE
        partial = path.with_name(path.name + ".partial")
        partial.write_text(self.text(), encoding="utf-8")
        partial.replace(path)
        return path

    @classmethod
    def load(cls, folder: Path | None = None) -> Calendar:
        """The calendar in ``<folder>/leap.toml``; the default one (the simulated fleet's first
        day, UTC) when the file does not exist. A malformed file is an error naming the field."""
        path = Path(folder or data_folder()) / CALENDAR_FILE
        if not path.is_file():
            return cls()
        try:
            values = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not valid TOML ({exc})") from None
        unknown = set(values) - {"first_day", "timezone", "source"}
        if unknown:
            raise ValueError(f"{path}: unknown field(s) {sorted(unknown)}")
        first = values.get("first_day", SPAN_START.isoformat())
        try:
            first_day = first if isinstance(first, dt.date) else dt.date.fromisoformat(str(first))
        except ValueError:
            raise ValueError(f"{path}: first_day={first!r} is not a date YYYY-MM-DD") from None
        try:
            return cls(first_day, str(values.get("timezone", "UTC")), str(values.get("source", "")))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    @classmethod
    def exists(cls, folder: Path | None = None) -> bool:
        return (Path(folder or data_folder()) / CALENDAR_FILE).is_file()
