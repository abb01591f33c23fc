"""The report's monitoring summary: does the offline metric track the decision's value?"""

import pytest

from leap_pipeline.studies.monitoring import MIN_CORRELATION_NIGHTS, proxy_correlation


def _nights(w20: list[float], capture: list[float]) -> list[dict]:
    return [{"published_w20": w, "routing_capture": c} for w, c in zip(w20, capture, strict=True)]


def test_the_rank_correlation_follows_the_nights_order_not_their_values():
    w20 = [0.50, 0.52, 0.55, 0.49, 0.60, 0.58]
    together = proxy_correlation(_nights(w20, [0.80, 0.85, 0.90, 0.70, 1.00, 0.95]))
    assert together["spearman"] == pytest.approx(1.0) and together["nights"] == len(w20)
    opposed = proxy_correlation(_nights(w20, [0.95, 0.90, 0.85, 1.00, 0.70, 0.80]))
    assert opposed["spearman"] == pytest.approx(-1.0) and opposed["p_value"] < 0.05


def test_too_few_nights_or_a_flat_series_gives_no_correlation():
    few = MIN_CORRELATION_NIGHTS - 1
    assert proxy_correlation(_nights([0.5 + i / 100 for i in range(few)], [0.9] * few)) is None
    n = MIN_CORRELATION_NIGHTS + 1
    assert proxy_correlation(_nights([0.5] * n, [0.8 + i / 100 for i in range(n)])) is None
    # a night without a routing replay (a non-simulated source) is left out, not read as zero
    nights = _nights([0.5 + i / 100 for i in range(n)], [0.8 + i / 100 for i in range(n)])
    nights[0]["routing_capture"] = None
    assert proxy_correlation(nights)["nights"] == n - 1
