import math

import pytest

from leap_serving.decide import metrics


def test_within_k_pools_attempts_and_counts_missing_as_misses():
    measured = [100.0, 100.0, 100.0, 100.0, 100.0]
    predicted = [100.0, 119.0, 79.0, 121.0, float("nan")]
    assert metrics.within(predicted, measured, 20) == pytest.approx(2 / 5)
    assert metrics.within(predicted, measured, 25) == pytest.approx(4 / 5)
    assert metrics.within([120.0], [100.0], 20) == 1.0  # the boundary counts as within


def test_weighted_within_weights_attempts():
    assert metrics.within([100.0, 200.0], [100.0, 100.0], 20, weights=[3.0, 1.0]) == 0.75


def test_mdape_median_ratio_and_coverage():
    predicted = [110.0, 90.0, 150.0, float("nan")]
    measured = [100.0, 100.0, 100.0, 100.0]
    assert metrics.mdape(predicted, measured) == pytest.approx(10.0)
    assert metrics.median_ratio(predicted, measured) == pytest.approx(1.1)
    assert metrics.predicted_share(predicted) == 0.75


def test_metrics_reject_non_positive_measurements_and_shape_mismatch():
    with pytest.raises(ValueError, match="positive"):
        metrics.within([1.0], [0.0], 20)
    with pytest.raises(ValueError, match="shape"):
        metrics.within([1.0, 2.0], [1.0], 20)
    assert math.isnan(metrics.within([], [], 20))
