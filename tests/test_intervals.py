"""Conformal intervals: coverage on fresh draws, Mondrian classes, thin classes, round trips."""

import json

import numpy as np
import pytest

from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.intervals import (
    HISTORY_CLASSES,
    MIN_CLASS_ROWS,
    ConformalIntervals,
    conformal_quantile,
    history_class,
    interval_coverage,
)

COLD, HW_COUNT = FEATURE_COLUMNS.index("hist_cold_start"), FEATURE_COLUMNS.index("hist_hw_count")


def _rows(n: int, runs: float, cold: float = 0.0) -> np.ndarray:
    X = np.zeros((n, len(FEATURE_COLUMNS)))
    X[:, COLD], X[:, HW_COUNT] = cold, runs
    return X


def _draw(rng, n, noise_by_type: dict[str, float], runs: float = 50.0):
    types = rng.choice(list(noise_by_type), n)
    truth = rng.normal(5.0, 1.0, n)
    scale = np.array([noise_by_type[t] for t in types])
    measured = truth + rng.laplace(0.0, scale)
    return truth, measured, types, _rows(n, runs)


def test_history_classes_follow_the_family_and_its_runs_on_the_type():
    X = np.vstack([_rows(1, 0, cold=1), _rows(1, 0), _rows(1, 3), _rows(1, 10), _rows(1, np.nan)])
    names = [HISTORY_CLASSES[c] for c in history_class(X)]
    assert names == ["cold", "new type", "1-9 runs", "10+ runs", "new type"]


def test_the_quantile_is_the_finite_sample_conformal_one():
    scores = np.arange(1, 10, dtype=float)  # n = 9: ceil(10 x 0.8) = 8th smallest
    assert conformal_quantile(scores, 0.8) == 8.0
    assert conformal_quantile(scores[:3], 0.8) == np.inf  # too few for the level
    assert conformal_quantile(np.empty(0), 0.8) == np.inf


def test_intervals_cover_the_level_on_fresh_draws_and_widen_where_errors_are_larger():
    rng = np.random.default_rng(0)
    noise = {"T4": 0.05, "H100": 0.4}
    intervals = ConformalIntervals.calibrate(*_draw(rng, 4000, noise), level=0.8)
    predicted, measured, types, X = _draw(rng, 40000, noise)
    low, high = intervals.bounds(predicted, types, X)
    got = interval_coverage(low, high, np.exp(measured), types)
    assert 0.78 <= got["overall"] <= 0.82
    for hardware_type in noise:  # each class covers its level, not just the pool
        assert 0.77 <= got["groups"][hardware_type]["coverage"] <= 0.83
    width = intervals.half_width(np.array(["T4", "H100"]), _rows(2, 50.0))
    assert width[1] > 4 * width[0]
    # one interval for both would cover the noisy type far less than 80%
    pooled = ConformalIntervals(0.8, intervals.overall)
    low, high = pooled.bounds(predicted, types, X)
    assert interval_coverage(low, high, np.exp(measured), types)["groups"]["H100"]["coverage"] < 0.7


def test_a_thin_class_borrows_its_history_class_then_the_overall_quantile():
    rng = np.random.default_rng(1)
    truth, measured, types, X = _draw(rng, 600, {"T4": 0.1})
    X[:300, HW_COUNT] = 0.0  # a new type for the family: its own class on T4
    thin = MIN_CLASS_ROWS - 1
    types[:thin] = "MI300X"  # fewer rows than a class needs
    intervals = ConformalIntervals.calibrate(truth, measured, types, X, level=0.8)
    assert "MI300X" not in intervals.by_cell
    width = intervals.half_width(np.array(["MI300X", "MI300X"]), np.vstack(
        [_rows(1, 0.0), _rows(1, 0.0, cold=1)]))  # fmt: skip
    assert width[0] == intervals.by_history["new type"]
    assert "cold" not in intervals.by_history and width[1] == intervals.overall


def test_intervals_survive_the_models_json_metadata():
    rng = np.random.default_rng(2)
    intervals = ConformalIntervals.calibrate(*_draw(rng, 500, {"T4": 0.1, "A100": 0.2}))
    again = ConformalIntervals.from_dict(json.loads(json.dumps(intervals.to_dict())))
    assert again == intervals
    assert ConformalIntervals.from_dict(None) is None  # a model saved before intervals
    with pytest.raises(ValueError, match=r"level=1\.5"):
        ConformalIntervals.calibrate(np.zeros(40), np.zeros(40), np.array(["T4"] * 40),
                                     _rows(40, 1.0), level=1.5)  # fmt: skip


def test_the_coverage_check_warns_outside_its_band_and_shows_each_class():
    import datetime as dt

    from leap_pipeline.orchestration.night_checks import interval_check

    day = dt.date(2026, 1, 5)
    scores = {"level": 0.8, "coverage": 0.79, "width_median": 0.4,
              "by_hardware_type": {"T4": {"coverage": 0.8, "rows": 40}},
              "by_history": {"cold": {"coverage": 0.7, "rows": 10}}}  # fmt: skip
    passed = interval_check(day, scores)
    assert passed.passed and passed.check_name == "interval_coverage"
    assert {"by_hardware_type", "by_history", "coverage"} <= set(passed.metadata)
    for share in (0.74, 0.86):
        failed = interval_check(day, scores | {"coverage": share})
        assert not failed.passed and failed.severity.value == "WARN"
    assert interval_check(day, None).passed  # a model published before intervals
