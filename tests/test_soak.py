"""The soak at small scale: the schedule, driven through Dagster's own API over twelve nights with
every event of benchmarks/soak.py, loses no night, no row and no move of the alias."""

import importlib.util
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


def _soak_module():
    spec = importlib.util.spec_from_file_location("soak", PROJECT / "benchmarks" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.long
def test_twelve_nights_unattended_lose_nothing(tmp_path, monkeypatch):
    for name in ("LEAP_DATA", "DAGSTER_HOME", "LEAP_WAREHOUSE", "MLFLOW_TRACKING_URI"):
        monkeypatch.setenv(name, "")  # the soak sets its own; the test's end puts them back
        monkeypatch.delenv(name)
    soak = _soak_module()
    figures = soak.soak(12, 0.02, 0, "quick", 6, tmp_path, log=lambda line: None)
    assert figures["nights_expected"] == 11  # twelve nights, one of them a day with no launches
    assert figures["nights_missed"] == 0 and figures["nights_trained_twice"] == 0
    assert figures["rows_lost"] == 0 and figures["rows_quarantined"] > 0
    sent = figures["rows_sent"]
    assert figures["rows_landed"] + figures["rows_quarantined"] + figures["rows_dropped"] == sent
    assert figures["alias_moves_without_gate"] == 0
    assert figures["alias_moves_backwards_by_pipeline"] == 0
    assert figures["history_complete"] and figures["alias_moves"] >= 2
