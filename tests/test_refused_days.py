"""A day refused by its checks fails its run, named with the check, is never reported
materialized, and is never half-written; the days of the run that passed are reported."""

import datetime as dt

import dagster as dg
import polars as pl
import pytest

from leap_pipeline.data.sources import SimulatorSource
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.orchestration import data_assets
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.orchestration.resources import WarehouseResource
from leap_pipeline.simulation import SPAN_START

SOURCE = "simulator:seed=3,scale=0.02"
DAYS = [SPAN_START + dt.timedelta(days=n) for n in range(3)]
REFUSED = DAYS[1]


def _materialized(result: dg.ExecuteInProcessResult) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for event in result.get_asset_materialization_events():
        found.setdefault(event.asset_key.to_user_string(), set()).add(event.partition)
    return found


def _failure(result: dg.ExecuteInProcessResult, node: str) -> str:
    return result.failure_data_for_node(node).error.message


def test_a_day_whose_landing_is_refused_fails_the_run_and_is_not_reported(tmp_path):
    """Day 2's files arrive with every row broken: the run fails naming the day and the check,
    days 1 and 3 are reported materialized (and landed), day 2 is neither."""
    root = tmp_path / "logs"
    for name in ("job_attempts", "allocations"):
        (root / name).mkdir(parents=True)
    source = SimulatorSource(seed=3, scale=0.02)
    for day in DAYS:
        raw = source.read_day(day)
        attempts = raw.attempts.with_columns(pl.col(pl.List(pl.String)).list.join(";"))
        if day == REFUSED:
            attempts = attempts.with_columns(batch_size=pl.lit("-5"))
        attempts.write_csv(root / "job_attempts" / f"{day}.csv")
        raw.allocations.write_csv(root / "allocations" / f"{day}.csv")
        raw.hardware_specs.write_parquet(root / "hardware_specs.parquet")
    warehouse = str(tmp_path / "leap.duckdb")
    result = materialize_days(DAYS[0], DAYS[-1], source=f"files:{root}", warehouse=warehouse,
                              log_level="CRITICAL", raise_on_error=False)  # fmt: skip
    assert not result.success
    message = _failure(result, "source_tables")
    assert f"{REFUSED} refused by attempts_landed: all" in message and "rows rejected" in message
    published = {DAYS[0].isoformat(), DAYS[2].isoformat()}
    assert _materialized(result) == dict.fromkeys(data_assets.SOURCE_ASSETS, published)
    (check,) = [e for e in result.get_asset_check_evaluations()
                if e.check_name == "attempts_landed"]  # fmt: skip
    assert not check.passed and str(REFUSED) in check.metadata["days_refused"].value
    with open_warehouse(warehouse, read_only=True) as wh:
        for table in ("job_attempts", "allocations", "hardware_specs", "source_log"):
            assert wh.partitions(table) == [DAYS[0], DAYS[2]], table  # nothing of day 2
    assert WarehouseResource(path=warehouse).refused_days() == [REFUSED]


@pytest.mark.parametrize(
    ("asset", "audit", "check"),
    [
        ("history_snapshot", "snapshot_audit", "snapshot_as_of_its_day"),
        ("feature_table", "feature_audit", "one_row_per_kept_attempt"),
    ],
)
def test_a_day_a_later_check_refuses_fails_the_run_and_is_not_reported(
    tmp_path, monkeypatch, asset, audit, check
):
    """The snapshot's and the feature table's checks refuse day 2 alike: the run fails naming
    it, the days that passed are reported and written, day 2 is neither."""
    audited = getattr(data_assets, audit)

    def refuse_day_two(rows, other):
        day = other if isinstance(other, dt.date) else rows["ds"][0]
        return {check: "a planted problem"} if day == REFUSED else audited(rows, other)

    monkeypatch.setattr(data_assets, audit, refuse_day_two)
    warehouse = str(tmp_path / "leap.duckdb")
    result = materialize_days(DAYS[0], DAYS[-1], source=SOURCE, warehouse=warehouse,
                              log_level="CRITICAL", raise_on_error=False)  # fmt: skip
    assert not result.success
    assert f"{REFUSED} refused by {check}: a planted problem" in _failure(result, asset)
    materialized = _materialized(result)
    assert materialized[asset] == {DAYS[0].isoformat(), DAYS[2].isoformat()}
    assert materialized["job_attempts"] == {d.isoformat() for d in DAYS}
    if asset == "history_snapshot":
        assert "feature_table" not in materialized  # its step never ran
    (evaluation,) = [e for e in result.get_asset_check_evaluations() if e.check_name == check]
    assert not evaluation.passed
    with open_warehouse(warehouse, read_only=True) as wh:
        assert wh.partitions(asset) == [DAYS[0], DAYS[2]]
