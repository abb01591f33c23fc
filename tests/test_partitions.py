"""Partitions from configuration, and the nightly schedule's tick on a window that is not landed."""

import datetime as dt
import subprocess
import sys

import dagster as dg
import pytest

from leap_pipeline.definitions import defs, materialize_days, nightly_schedule
from leap_pipeline.partitions import (
    PARTITIONS_ENV,
    daily_partitions_for,
    nightly_tick,
    partition_span,
)
from leap_pipeline.resources import TrainingResource, WarehouseResource
from leap_pipeline.simulation import SPAN_START

SOURCE = "simulator:seed=3,scale=0.02"
LANDING = [dg.AssetKey("feature_table")]


def _day(n: int) -> dt.date:
    return SPAN_START + dt.timedelta(days=n - 1)


def test_the_span_reads_first_and_last_or_an_open_end():
    assert partition_span("2026-01-01..2026-02-14") == (dt.date(2026, 1, 1), dt.date(2026, 2, 14))
    assert partition_span("2026-03-01..") == (dt.date(2026, 3, 1), None)
    assert partition_span("") == (SPAN_START, None)


@pytest.mark.parametrize("text", ["2026-01-01", "yesterday..", "2026-02-14..2026-01-01"])
def test_a_bad_span_is_an_error_naming_the_variable_and_value(text):
    with pytest.raises(ValueError, match=f"{PARTITIONS_ENV}={text!r}"):
        partition_span(text)


def test_a_closed_span_holds_its_last_day_and_nothing_after():
    partitions = daily_partitions_for(_day(1), _day(45))
    keys = partitions.get_partition_keys()
    assert keys[0] == "2026-01-01" and keys[-1] == "2026-02-14" and len(keys) == 45


def test_the_variable_sets_the_partitions_a_new_process_loads():
    script = "from leap_pipeline.partitions import daily_partitions as p; print(len(p.get_partition_keys()))"  # noqa: E501
    env = {"PATH": "", PARTITIONS_ENV: "2026-01-01..2026-02-14"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "45"


def test_a_tick_outside_the_partitions_is_skipped_saying_why():
    partitions = daily_partitions_for(_day(1), _day(45))
    tick = nightly_tick(_day(300), [_day(n) for n in range(1, 46)], partitions, 30, LANDING)
    assert isinstance(tick, dg.SkipReason)
    assert PARTITIONS_ENV in tick.skip_message and "2026-01-01..2026-02-14" in tick.skip_message


def test_a_complete_window_runs_the_night():
    partitions = daily_partitions_for(_day(1), None)
    tick = nightly_tick(_day(40), [_day(n) for n in range(1, 40)], partitions, 30, LANDING)
    assert isinstance(tick, dg.RunRequest)
    assert tick.partition_key == _day(40).isoformat() and tick.asset_selection is None


def test_a_window_with_a_gap_lands_from_the_gap_through_the_day():
    partitions = daily_partitions_for(_day(1), None)
    landed = [_day(n) for n in range(1, 40) if n != 25]
    tick = nightly_tick(_day(40), landed, partitions, 30, LANDING)
    assert isinstance(tick, dg.RunRequest) and tick.asset_selection == LANDING
    assert tick.tags["dagster/asset_partition_range_start"] == _day(25).isoformat()
    assert tick.tags["dagster/asset_partition_range_end"] == _day(40).isoformat()
    assert "1 day(s)" in tick.tags["leap/reason"]


def test_the_schedule_lands_an_incomplete_window_then_trains(tmp_path):
    """The tick for day 9 of a warehouse holding days 1-5 asks for a run that lands days 6-9;
    that run succeeds, and the next tick asks for the night itself."""
    warehouse = tmp_path / "leap.duckdb"
    materialize_days(_day(1), _day(5), source=SOURCE, warehouse=str(warehouse), log_level="ERROR")
    repository = defs.get_repository_def()
    resources = {
        "warehouse": WarehouseResource(path=str(warehouse)),
        "training": TrainingResource(),
    }

    def tick(day: dt.date):
        at = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(2), tzinfo=dt.UTC)
        context = dg.build_schedule_context(
            scheduled_execution_time=at, resources=resources, repository_def=repository
        )
        return nightly_schedule.evaluate_tick(context).run_requests

    (landing,) = tick(_day(9))
    assert landing.tags["dagster/asset_partition_range_start"] == _day(6).isoformat()
    assert landing.tags["dagster/asset_partition_range_end"] == _day(9).isoformat()
    assert "3 day(s)" in landing.tags["leap/reason"]
    result = defs.resolve_job_def("nightly").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(),
        asset_selection=landing.asset_selection,
        tags=landing.tags,
        run_config={
            "resources": {
                "source": {"config": {"uri": SOURCE}},
                "warehouse": {"config": {"path": str(warehouse)}},
            }
        },
    )
    assert result.success
    assert WarehouseResource(path=str(warehouse)).landed_days("feature_table") == [
        _day(n) for n in range(1, 10)
    ]
    (night,) = tick(_day(10))
    assert night.partition_key == _day(10).isoformat() and night.asset_selection is None
