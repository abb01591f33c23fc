"""The soak at small scale: the schedule, driven through Dagster's own API over twelve nights with
every event of benchmarks/soak.py, a day materialized beside each ordinary night included, loses
no night, no row and no move of the alias."""

import polars as pl
import pytest
from benchmark_scripts import load_benchmark

from leap_pipeline.data.warehouse import open_warehouse


def _soak_module():
    return load_benchmark("soak")


@pytest.mark.long
def test_twelve_nights_unattended_lose_nothing(tmp_path, monkeypatch):
    for name in ("LEAP_DATA", "DAGSTER_HOME", "LEAP_WAREHOUSE", "MLFLOW_TRACKING_URI"):
        monkeypatch.setenv(name, "")  # the soak sets its own; the test's end puts them back
        monkeypatch.delenv(name)
    soak = _soak_module()
    figures = soak.soak(
        12, 0.02, 0, "quick", 6, tmp_path, log=lambda line: None, ui_every_night=True
    )
    assert figures["nights_expected"] == 11  # twelve nights, one of them a day with no launches
    assert figures["nights_missed"] == 0 and figures["nights_trained_twice"] == 0
    assert figures["rows_lost"] == 0  # rows_sent = landed + quarantined + dropped
    # each of those counted here from what the soak delivered and what landed, not from the
    # soak's own figures: the broken day's rows (batch size -5) are quarantined, the other rows
    # without a positive throughput dropped, the rest landed in the warehouse
    files = sorted((tmp_path / "logs" / "job_attempts").glob("*.csv"))
    sent = pl.concat([pl.read_csv(f, infer_schema=False) for f in files])
    broken = sent["batch_size"] == "-5"
    unlabelled = ~broken & (sent["throughput"].cast(pl.Float64, strict=False).fill_null(0) <= 0)
    with open_warehouse(tmp_path / "data" / "leap.duckdb", read_only=True) as wh:
        landed = wh.read("job_attempts", columns=["attempt_id"])
    assert figures["rows_sent"] == sent.height
    assert figures["rows_quarantined"] == broken.sum() > 0
    assert figures["rows_dropped"] == unlabelled.sum() > 0
    assert figures["rows_landed"] == landed.height == sent.height - broken.sum() - unlabelled.sum()
    assert landed["attempt_id"].is_unique().all()
    # each ordinary night ran in its own process while an earlier day was landed again in this
    # one: no landing and no night failed, and at least one landing ended while a night trained
    ui = figures["ui_materializations"]
    assert ui["materialized"] >= 5 and ui["failed"] == 0 and ui["night_runs_failed"] == 0
    assert ui["while_training"] >= 1, ui
    assert figures["alias_moves_without_gate"] == 0
    assert figures["alias_moves_backwards_by_pipeline"] == 0
    assert figures["history_complete"] and figures["alias_moves"] >= 2
