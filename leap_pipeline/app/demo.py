"""``leap demo``: the whole product on the embedded default, end to end, in one command.

Simulates a small fleet, materializes its days, trains and evaluates the last few nights,
registers each night's model and promotes the last one, then summarizes what came out.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path

from leap_pipeline.data.sources import source_from_uri
from leap_pipeline.modeling.evaluation import MODELS
from leap_pipeline.modeling.registry import configure_tracking, model_uri, production_version
from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.orchestration.instance import ensure_dagster_home
from leap_pipeline.orchestration.runs import night_record
from leap_pipeline.settings import DATA_ENV, MIN_SUPPORT, set_environment


@dataclass(frozen=True)
class DemoSettings:
    scale: float = 0.1
    days: int = 45
    nights: int = 3
    seed: int = 0
    profile: str = "fast"
    data: Path = Path("data")
    last_day: dt.date | None = None  # None: the day before yesterday (UTC) on a new data folder

    def check(self) -> None:
        if self.nights < 1 or self.days < self.nights + 8:
            raise ValueError(
                f"days={self.days}, nights={self.nights}: need nights >= 1 and at least 8 days "
                "of features before the first night"
            )


def run_demo(settings: DemoSettings, log=print) -> dict:
    settings.check()
    # the demo's folder is the install's: its night records and locks go there, as `leap ui
    # --data` will look for them
    set_environment(**{DATA_ENV: str(settings.data.resolve())})
    dagster_home = ensure_dagster_home(settings.data / "dagster")  # runs show up in the UI
    warehouse = settings.data / "leap.duckdb"
    store = settings.data / "mlflow"
    source = f"simulator:seed={settings.seed},scale={settings.scale}"
    calendar = demo_calendar(settings, source)
    first = calendar.first_day
    last = first + dt.timedelta(days=settings.days - 1)
    first_night = last - dt.timedelta(days=settings.nights - 1)
    start = time.perf_counter()
    log(f"[1/2] landing {settings.days} days of {source} and building features ({first}..{last})")
    landed = [d for d in _landed_days(warehouse) if first <= d <= last]
    if landed:
        log(
            f"      {len(landed)} of them were landed before: each is replaced whole (the same "
            "source gives the same rows)"
        )
    materialize_days(
        first, last, source=source, warehouse=str(warehouse), log_level="INFO", calendar=calendar
    )
    log(f"      done in {time.perf_counter() - start:.0f} s")
    log(f"[2/2] training, evaluating and registering {settings.nights} nights")
    trained = materialize_days(
        first_night,
        last,
        job_name="training",
        warehouse=str(warehouse),
        mlflow_store=str(store),
        training={
            "profile": settings.profile,
            "promote": True,
            # the table's support threshold shrinks with the fleet, as its keys' counts do
            "lookup_min_support": max(2, round(MIN_SUPPORT * settings.scale)),
        },
        log_level="WARNING",  # the progress line says what runs; the run's log keeps the rest
        calendar=calendar,
    )
    nights = [
        night_record(trained, "model_evaluation", first_night + dt.timedelta(days=i))
        for i in range(settings.nights)
    ]
    reused = [str(n["version"]) for n in nights if n.get("reused_version") and n["version"]]
    if reused:
        log(
            f"      {len(reused)} night(s) unchanged since they were registered: reused "
            f"version(s) {', '.join(reused)} instead of registering again"
        )
    tracking_uri = configure_tracking(store)
    registered = night_record(trained, "model_evaluation", last)
    evaluation = registered["evaluation"]
    # the selection travels with the published model, as the registry version shows it
    metadata = Path(registered["folder"]) / "cascade" / "metadata.json"
    selection = json.loads(metadata.read_text())["selection"]
    current = production_version()
    overall, table1 = evaluation["overall"], evaluation["table1"]
    return {
        "evaluation_day": evaluation["day"],
        "training_window": evaluation["window"],
        "metrics": overall,
        "w20": {m: overall[m]["w20"] for m in MODELS},
        "coverage": {m: overall[m]["coverage"] for m in MODELS},
        "oracle_w20": overall.get("oracle", {}).get("w20"),
        "intervals": evaluation.get("intervals"),
        "published_model": selection["published"],
        "selection": selection,
        "table1": {
            "covered_jobs": table1["covered_attempts"],
            "lookup_w20": table1["lookup_w20"],
            "cascade_w20": table1["cascade_w20"],
            "published_w20": table1["published_w20"],
        },
        "registered_version": registered["version"],
        "reused_versions": reused,
        "calendar": {"first_day": first.isoformat(), "last_day": last.isoformat()},
        "gate": registered["gate_reason"],
        "production_version": str(current.version) if current else None,
        "model_uri": model_uri(),
        "tracking_uri": tracking_uri,
        "warehouse": str(warehouse),
        "dagster_home": str(dagster_home),
        "seconds": round(time.perf_counter() - start, 1),
    }


def _landed_days(warehouse: Path) -> list[dt.date]:
    from leap_pipeline.orchestration.resources import WarehouseResource

    return WarehouseResource(path=str(warehouse)).landed_days("source_log")


def demo_calendar(settings: DemoSettings, source: str) -> Calendar:
    """The demo's days meet the calendar: on a new data folder, the ``days`` that end on
    ``last_day`` (by default the day before yesterday, so the UI shows the demo's days landed and
    yesterday ready to materialize, and the schedule carries on tonight), written to the data
    folder's calendar file. On a data folder that has one, its first day again, so a second run
    lands and trains the same days."""
    if Calendar.exists(settings.data):
        calendar = Calendar.load(settings.data)
        if calendar.source and calendar.source != source:
            raise ValueError(
                f"source={source!r}: {settings.data / 'leap.toml'} was written for "
                f"{calendar.source!r}; use another --data folder"
            )
        if settings.last_day is not None and settings.last_day != calendar.first_day + dt.timedelta(
            days=settings.days - 1
        ):
            raise ValueError(
                f"last_day={settings.last_day}: {settings.data / 'leap.toml'} starts on "
                f"{calendar.first_day}; use another --data folder"
            )
        return calendar
    last = settings.last_day or Calendar().last_closed_day() - dt.timedelta(days=1)
    calendar = Calendar(first_day=last - dt.timedelta(days=settings.days - 1), source=source)
    calendar.check_days(calendar.first_day, last)
    source_from_uri(source)  # a bad source is an error before anything is written
    calendar.save(settings.data)
    return calendar


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:5.1f}%"


def interval_lines(intervals: dict | None) -> list[str]:
    """The published model's intervals on the evaluation day: coverage overall and per history
    class, and the median width."""
    if intervals is None:
        return []
    by_history = ", ".join(
        f"{name} {_pct(v['coverage']).strip()} of {v['rows']}"
        for name, v in intervals["by_history"].items()
    )
    return [
        f"{intervals['level']:.0%} intervals: cover {_pct(intervals['coverage']).strip()} of the "
        f"day's throughputs ({by_history}); median width {intervals['width_median']:.2f} x the "
        "prediction"
    ]


def summary_lines(result: dict, settings: DemoSettings) -> list[str]:
    m, t1 = result["metrics"], result["table1"]
    window = result["training_window"]
    lines = [
        f"LEAP demo: evaluated on {result['evaluation_day']}, trained on {window[0]}..{window[1]}",
        f"{'model':14} {'w10':>7} {'w20':>7} {'MdAPE':>7} {'coverage':>9}",
    ]
    for name in (*MODELS, "oracle"):
        if name in m:
            row = m[name]
            mdape = "n/a" if row["mdape"] != row["mdape"] else f"{row['mdape']:5.1f}%"
            lines.append(
                f"{name:14} {_pct(row['w10']):>7} {_pct(row['w20']):>7} {mdape:>7} "
                f"{_pct(row['coverage']):>9}"
            )
    data = settings.data.resolve()
    chosen = result["selection"]
    lines += [
        "",
        f"published: {chosen['published']} (best challenger {100 * chosen['margin']:+.1f} points "
        f"against the single GBDT on {chosen['selection_day']}, which no model trained on; "
        f"the bar was {100 * chosen['required_margin']:+.1f})",
        f"Table 1, on the {t1['covered_jobs']} attempts the lookup table covers: "
        f"lookup w20 {_pct(t1['lookup_w20'])}, published w20 {_pct(t1['published_w20'])}, "
        f"cascade w20 {_pct(t1['cascade_w20'])}",
        f"oracle ceiling (true medians) w20: {_pct(result['oracle_w20'])}",
        *interval_lines(result.get("intervals")),
        f"registered version {result['registered_version']} ({result['gate']}); "
        f"production is version {result['production_version']}",
        f"model: {result['model_uri']}  (tracking {result['tracking_uri']})",
        f"browse it in the Dagster and MLflow UIs (Ctrl-C stops both): .venv/bin/leap ui "
        f"--data {data}",
        f"finished in {result['seconds']:.0f} s",
    ]
    return lines
