"""The embedded default works on any date (issue 47, point 5): the simulated fleet goes on past its
calibrated span (2026-01-01 .. 2027-12-31) as the same live fleet, and `leap demo`, the model it
publishes and the nightly schedule work with the clock at 2031-06-01. The span itself stays what
it was (``test_frozen_fleet.py`` pins its days)."""

import datetime as dt
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from leap_pipeline.data.sources import SimulatorSource
from leap_pipeline.simulation import SPAN_START, FleetArgumentError, SimulatedFleet, parse_day
from leap_pipeline.simulation.catalog import Catalog
from leap_serving.launch.contract import schema

SPAN_END = dt.date(2027, 12, 31)
NOW = "2031-06-01T12:00:00+00:00"


def _alive(catalog: Catalog, day: int) -> np.ndarray:
    return np.flatnonzero((catalog.fam_birth <= day) & (day < catalog.fam_death))


def test_the_fleet_lives_on_past_its_span_with_the_same_model_types_and_families():
    fleet = SimulatedFleet(seed=0, scale=0.02)
    span, after = fleet.catalog_of(SPAN_END), fleet.catalog_of(SPAN_END + dt.timedelta(days=1))
    last, first_after = (SPAN_END - SPAN_START).days, (SPAN_END - SPAN_START).days + 1
    # every family alive on the span's last day and the next is the same family, with the same
    # habits, hidden draws and model type
    before = {span.fam_name[i]: i for i in _alive(span, first_after)}
    carried = {after.fam_name[i]: i for i in _alive(after, first_after)}
    assert set(before) <= set(carried) and len(before) > 30_000
    rows_before = np.array(list(before.values()))
    rows_after = np.array([carried[name] for name in before])
    types_before = span.fam_model_type[rows_before]
    types_after = after.fam_model_type[rows_after]
    changed = [
        field
        for field in Catalog.__dataclass_fields__
        if field != "fam_model_type"
        and not (
            np.array_equal(getattr(span, field)[rows_before], getattr(after, field)[rows_after])
            if field.startswith("fam_")
            else np.array_equal(
                getattr(span, field)[types_before], getattr(after, field)[types_after]
            )
        )
    ]
    # but for the span's cap on lifetimes, which the most popular model types outlive
    assert changed == ["mt_death"]
    capped = span.mt_death[types_before] >= 10 * 730
    assert np.array_equal(
        np.where(capped, np.inf, span.mt_death[types_before]), after.mt_death[types_after]
    )

    # still a live fleet: model types retire and new ones are born at the span's rate, families
    # are born every day and as many are alive at once
    def turnover(catalog: Catalog, first: int) -> tuple[int, int]:
        born = ((catalog.mt_birth >= first) & (catalog.mt_birth < first + 730)).sum()
        retired = ((catalog.mt_death >= first) & (catalog.mt_death < first + 730)).sum()
        return int(born), int(retired)

    span_born, span_retired = turnover(span, 0)
    born, retired = turnover(after, first_after)
    assert abs(born - span_born) < 0.2 * span_born and abs(retired - span_retired) < 0.2 * span_born
    alive = [len(_alive(after, d)) for d in range(first_after, first_after + 730, 73)]
    assert all(abs(n - len(_alive(span, last))) < 0.05 * n for n in alive)
    new_families = np.unique(after.fam_birth[after.fam_birth >= first_after])
    assert len(new_families) == 730
    # no model type or family takes a name the span gave
    assert len(set(after.fam_name)) == len(after.fam_name)
    born_after = after.fam_name[after.fam_birth >= first_after]
    assert not set(born_after) & set(span.fam_name)
    new_types = after.mt_name[after.mt_birth >= first_after]
    assert len(new_types) == born and not set(new_types) & set(span.mt_name)


def test_a_day_years_after_the_span_is_a_day_of_the_same_fleet():
    fleet = SimulatedFleet(seed=0, scale=0.02)
    day = dt.date(2031, 5, 31)
    sources = fleet.day(day)
    attempts = sources.attempts
    assert attempts.schema == schema("job_attempts")  # nothing hidden joins the sources
    assert sources.allocations.schema == schema("allocations")
    assert 0.02 * 20_000 < attempts.height < 0.02 * 30_000
    assert attempts["attempt_id"].is_unique().all() and (attempts["ds"] == day).all()
    assert attempts["model_type"].n_unique() > 150
    medians = fleet.oracle().true_medians(attempts["attempt_id"].head(20).to_list())
    assert medians.height == 20 and (medians["true_median"] > 0).all()
    # the day is the same whichever day was generated before it
    assert SimulatedFleet(seed=0, scale=0.02).day("2031-05-31").attempts.equals(attempts)
    assert SimulatorSource(seed=0, scale=0.02).has_day(day)
    assert parse_day(dt.date.max) == (dt.date.max - SPAN_START).days
    with pytest.raises(FleetArgumentError, match="2026-01-01"):
        fleet.day(SPAN_START - dt.timedelta(days=1))


# Run in a process of its own, as `leap demo` runs: its clock is faked (time-machine) before
# anything reads the date, so the demo's days, the run's partitions, the registry's timestamps, the
# launch's date and the schedule's tick are all 2031's. The process prints one JSON line.
CLOCK_DEMO = """
import datetime as dt, json, os, sys
import time_machine

with time_machine.travel(dt.datetime.fromisoformat(sys.argv[1]), tick=True):
    from leap_pipeline.app.cli import main

    data = sys.argv[2]
    code = main(["demo", "--scale", "0.02", "--days", "10", "--nights", "1", "--data", data,
                 "--json"])
    assert code == 0, code
    import dagster as dg
    from leap_pipeline.app.ui import ui_environment
    from leap_pipeline.orchestration import definitions
    from leap_pipeline.orchestration.calendar import Calendar
    from leap_pipeline.orchestration.nightly_plan import NIGHTS_TAG
    from leap_pipeline.simulation import SimulatedFleet
    from leap_serving import Ranker
    from pathlib import Path

    # a launch of today, as a launcher sends it (no date: the ranker takes today's)
    calendar = Calendar.load(Path(data))
    today = dt.datetime.now(dt.UTC).date()
    job = SimulatedFleet(seed=0, scale=0.02).day(today).attempts.row(0, named=True)
    candidates = job.pop("candidate_hardware")
    job.pop("ds")
    ranker = Ranker(check_interval_s=float("inf"), wait=True)
    ranking = ranker.rank(job, candidates)
    # tonight's tick of the nightly schedule, in the environment `leap ui` gives its processes
    os.environ.update(ui_environment(Path(data)))
    defs = definitions.defs()
    at = dt.datetime.combine(today, dt.time(2), tzinfo=dt.UTC)
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=at, resources=defs.resources,
            repository_def=defs.get_repository_def())
        tick = defs.get_schedule_def("nightly_schedule").evaluate_tick(context)
    print(json.dumps({
        "today": today.isoformat(),
        "calendar": [calendar.first_day.isoformat(), calendar.source],
        "preference_list": ranking.preference_list,
        "removed": [c.hardware_type for c in ranking.removed],
        "candidates": candidates,
        "reason": ranking.reason,
        "model_version": ranking.model_version,
        "ranker_stats": {k: ranker.stats()[k] for k in ("model_age_days", "model_stale")},
        "tick": [r.tags.get(NIGHTS_TAG) for r in tick.run_requests or []],
        "skip": tick.skip_message,
    }))
"""


def test_the_demo_runs_years_after_the_span_and_its_model_ranks_a_launch(tmp_path):
    """`leap demo --scale 0.02` with the clock at 2031-06-01 lands the ten days that end the day
    before yesterday, publishes a model that ranks a launch of today, and tonight's tick of the
    nightly schedule asks for yesterday's night."""
    data = tmp_path / "data"
    drop = ("DAGSTER_HOME", "LEAP_DATA", "LEAP_WAREHOUSE", "LEAP_SOURCE", "MLFLOW_TRACKING_URI")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    done = subprocess.run(
        [sys.executable, "-c", CLOCK_DEMO, NOW, str(data)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    *lines, found = done.stdout.strip().splitlines()
    demo = json.loads(lines[-1])
    found = json.loads(found)
    assert found["today"] == "2031-06-01"
    # the demo's ten days end the day before yesterday; yesterday is left to tonight's tick
    assert found["calendar"] == ["2031-05-21", "simulator:seed=0,scale=0.02"]
    assert "evaluated on 2031-05-30" in done.stdout
    assert demo["model_uri"].endswith("@production") and 0 < demo["w20"]["published"] <= 1
    # the published model ranks the launch: its candidates best first (a premium type it does
    # not find worth its price is set aside, said so)
    assert found["reason"] is None and found["model_version"] == "1"
    assert len(found["preference_list"]) >= 1
    assert sorted(found["preference_list"] + found["removed"]) == sorted(found["candidates"])
    assert found["ranker_stats"]["model_stale"] is False
    assert found["tick"] == ["2031-05-31..2031-05-31"], found["skip"]
