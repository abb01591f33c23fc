"""The daily drift check: each feature's population stability index against the window."""

import datetime as dt

import numpy as np
import polars as pl

from leap_pipeline.modeling.drift import PSI_WARN, feature_drift, population_stability
from leap_serving.launch.features import FEATURE_COLUMNS


def test_the_index_is_near_zero_for_the_same_distribution_and_large_for_a_shift():
    rng = np.random.default_rng(0)
    window = rng.normal(size=20_000)
    assert population_stability(window, rng.normal(size=4_000)) < 0.02
    assert population_stability(window, rng.normal(loc=1.0, size=4_000)) > PSI_WARN
    # a feature that goes missing on the day drifts too
    gone = np.where(rng.random(4_000) < 0.5, np.nan, rng.normal(size=4_000))
    assert population_stability(window, gone) > PSI_WARN
    # a discrete feature: its values are the bins
    flags = rng.integers(0, 2, size=20_000).astype(float)
    assert population_stability(flags, rng.integers(0, 2, size=4_000).astype(float)) < 0.02
    assert population_stability(flags, np.ones(4_000)) > PSI_WARN


def _rows(n: int, rng, shift: float = 0.0) -> pl.DataFrame:
    frame = pl.DataFrame({name: rng.normal(size=n) for name in FEATURE_COLUMNS})
    return frame.with_columns(pl.col("hw_memory_gb") + shift)


def test_feature_drift_lists_every_feature_largest_first_and_flags_the_shifted_one():
    rng = np.random.default_rng(1)
    drift = feature_drift(_rows(10_000, rng), _rows(2_000, rng, shift=2.0))
    assert drift[0]["feature"] == "hw_memory_gb"
    assert sorted(d["feature"] for d in drift) == sorted(FEATURE_COLUMNS)
    assert [d["feature"] for d in drift if d["drifted"]] == ["hw_memory_gb"]
    assert [d["psi"] for d in drift] == sorted((d["psi"] for d in drift), reverse=True)


def test_the_drift_check_warns_naming_the_features_with_the_table():
    from leap_pipeline.orchestration.night_checks import drift_check

    rng = np.random.default_rng(2)
    day = dt.date(2026, 1, 5)
    drifted = drift_check(day, feature_drift(_rows(5_000, rng), _rows(1_000, rng, shift=2.0)))
    assert not drifted.passed and drifted.severity.value == "WARN"
    assert "hw_memory_gb" in drifted.metadata["drifted"].value
    assert len(drifted.metadata["psi_by_feature"].value.records) == len(FEATURE_COLUMNS)
    assert drift_check(day, feature_drift(_rows(5_000, rng), _rows(1_000, rng))).passed
    assert drift_check(day, None).passed  # a night recorded before drift was measured
