"""The Ranker watches its own latency (ML Test Score Mo6): percentiles in ``stats()`` and a
warning when the p99 of a window of calls passes the budget. A fake clock drives it: no test
here times anything."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from leap_serving.decide.latency import LatencyMonitor

PROJECT = Path(__file__).resolve().parents[1]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _calls(monitor: LatencyMonitor, clock: FakeClock, milliseconds: list[float]) -> None:
    for ms in milliseconds:
        started = monitor.start()
        clock.now += ms / 1e3
        monitor.record(started)


def test_percentiles_over_the_window_and_a_warning_once_a_window_past_the_budget(caplog):
    clock = FakeClock()
    monitor = LatencyMonitor(budget_ms=10.0, window=100, clock=clock)
    assert monitor.summary()["calls"] == 0 and monitor.summary()["p99_ms"] is None
    with caplog.at_level(logging.WARNING, logger="leap_serving"):
        _calls(monitor, clock, [2.0] * 100)  # a full window within budget: no warning
        assert not caplog.records
        summary = monitor.summary()
        assert summary["p50_ms"] == pytest.approx(2.0) and not summary["over_budget"]
        _calls(monitor, clock, [40.0] * 99)  # the window turns slow, a call short of a window
        assert not caplog.records
        _calls(monitor, clock, [40.0])
        assert len(caplog.records) == 1 and "past the budget" in caplog.text
        _calls(monitor, clock, [40.0] * 99)  # the next warning waits for the next window
        assert len(caplog.records) == 1
        _calls(monitor, clock, [40.0])
        assert len(caplog.records) == 2
    summary = monitor.summary()
    assert summary["calls"] == 100 and summary["p99_ms"] == pytest.approx(40.0)
    assert summary["over_budget"] and summary["warnings"] == 2


def test_no_budget_never_warns_and_a_bad_setting_is_refused_by_name(caplog):
    clock = FakeClock()
    monitor = LatencyMonitor(budget_ms=None, window=10, clock=clock)
    with caplog.at_level(logging.WARNING, logger="leap_serving"):
        _calls(monitor, clock, [1000.0] * 30)
    assert not caplog.records and monitor.summary()["max_ms"] == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="budget_ms=0"):
        LatencyMonitor(budget_ms=0)
    with pytest.raises(ValueError, match="window=0"):
        LatencyMonitor(window=0)


def test_the_ranker_times_every_call_and_reports_it_in_its_stats(tmp_path, caplog):
    """Every ``rank`` call, answered or refused, is one timed call; a budget no call can meet
    warns once the window is full."""
    import json

    import numpy as np
    import polars as pl

    from leap_pipeline.simulation import SimulatedFleet
    from leap_serving.decide.ranker import Ranker
    from leap_serving.launch.features import FEATURE_COLUMNS
    from leap_serving.launch.snapshot import SNAPSHOT_SCHEMA
    from leap_serving.model.cascade import BinnedCascade
    from leap_serving.model.profiles import profile_params
    from leap_serving.model.published import LeapModel

    rng = np.random.default_rng(0)
    X = rng.normal(size=(800, len(FEATURE_COLUMNS)))
    cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": 1}).fit(X, X[:, 0])
    specs = SimulatedFleet(seed=0, scale=0.01).hardware_specs()
    model = LeapModel(cascade, pl.DataFrame(schema=SNAPSHOT_SCHEMA), specs)
    ranker = Ranker(model=model, wait=True, latency_budget_ms=1e-6)
    assert ranker.latency.budget_ms == 1e-6
    ranker.latency = LatencyMonitor(budget_ms=1e-6, window=5)  # a window of 5 (1,000 by default)
    job = json.loads((PROJECT / "examples" / "job.json").read_text())
    candidates = job.pop("candidates")
    with caplog.at_level(logging.WARNING, logger="leap_serving"):
        for _ in range(4):
            assert ranker.rank(job, candidates).ranking
        assert "past the budget" not in caplog.text
        assert ranker.rank(job, "not a list").ranking == []  # a refusal is a call too
    assert "past the budget" in caplog.text
    latency = ranker.stats()["latency"]
    assert latency["calls"] == 5 and latency["warnings"] == 1 and latency["over_budget"]
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
