"""A folder ``leap demo`` made, opened to score purchase plans against its simulator's truth:
shared by ``purchase_plan.py`` and ``plan_selection_bias.py``."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any


def window_arguments(parser: argparse.ArgumentParser, skip: int) -> None:
    """``--data``, ``--days``, ``--types`` and ``--skip`` (by default ``skip``)."""
    parser.add_argument("--data", default="data", help="a folder leap demo made")
    parser.add_argument("--days", type=int, default=7, help="the plan's window, in days")
    parser.add_argument("--types", type=int, default=4, help="the most frequent types held out")
    parser.add_argument(
        "--skip", type=int, default=skip, help="hold out the types after the SKIP most frequent"
    )


def open_demo_folder(data: Path, error: Callable[[str], Any]) -> tuple[Any, Any, Any, str]:
    """The folder's settings, its source's truth (``oracle``), its production model and that
    model's version; ``error`` (the parser's) is called when the source has no truth."""
    from leap_pipeline.app.registry_choice import registry_uri
    from leap_pipeline.data.sources import source_from_uri
    from leap_pipeline.orchestration.calendar import Calendar
    from leap_pipeline.settings import DATA_ENV, environment, set_environment
    from leap_serving.registry.registered import load_registered

    where = environment({DATA_ENV: str(data)})
    oracle = source_from_uri(Calendar.load(data).source).oracle()
    if oracle is None:
        error(f"--data {data}: its source has no truth to score a plan against")
    set_environment(overwrite=True, MLFLOW_TRACKING_URI=registry_uri(where))
    published, version = load_registered("models:/leap-throughput@production")
    return where, oracle, published, version


def plan_window(wh: Any, days: int, types: int, skip: int) -> tuple[dt.date, dt.date, list[str]]:
    """The ``days`` that end on the last landed day, and the types held out in them
    (``most_frequent_types``)."""
    from leap_pipeline.studies.purchase_holdouts import most_frequent_types

    last = wh.read("job_attempts", columns=["ds"])["ds"].max()
    first = last - dt.timedelta(days=days - 1)
    return first, last, most_frequent_types(wh.read("job_attempts", first, last), types, skip)
