"""The report's monitoring summary: does the offline metric track the decision's value?"""

import pytest
from scipy.stats import binom

from leap_pipeline.studies.monitoring import (
    MIN_CORRELATION_NIGHTS,
    monitoring_summary,
    proxy_correlation,
)
from leap_serving.model.intervals import COVERAGE_BAND


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


def _coverage_night(rows: dict[str, tuple[int, float]]) -> dict:
    return {
        "interval_level": 0.8,
        "coverage_80": 0.8,
        "by_hardware_type": {t: {"rows": n, "coverage": c} for t, (n, c) in rows.items()},
    }


def test_busy_types_are_pooled_over_their_busy_nights_and_judged_against_chance():
    nights = [
        _coverage_night({"H100": (400, 0.70), "T4": (100, 0.50)}),
        _coverage_night({"H100": (200, 0.85), "T4": (250, 0.80)}),
        _coverage_night({"H100": (400, 0.80)}),
    ]
    busy = monitoring_summary(nights)["coverage_80_by_busy_type"]
    assert busy["floor"] == COVERAGE_BAND[0]
    # the T4's quiet night (100 attempts) is left out of its figures
    t4 = busy["types"]["T4"]
    assert (t4["nights"], t4["nights_under_floor"]) == (1, 0)
    assert t4["pooled"] == pytest.approx(0.80) and t4["lowest"] == pytest.approx(0.80)
    h100 = busy["types"]["H100"]
    assert h100["nights"] == 3 and h100["nights_under_floor"] == 1
    assert h100["pooled"] == pytest.approx((400 * 0.70 + 200 * 0.85 + 400 * 0.80) / 1000)
    assert h100["lowest"] == 0.70
    # by chance: a night of n attempts is under the floor when fewer than 0.75 n were covered
    t4_by_chance = binom.cdf(187, 250, 0.8)
    assert busy["types"]["T4"]["nights_under_floor_by_chance"] == pytest.approx(t4_by_chance)
    h100_by_chance = 2 * binom.cdf(299, 400, 0.8) + binom.cdf(149, 200, 0.8)
    assert h100["nights_under_floor_by_chance"] == pytest.approx(h100_by_chance)
    assert binom.cdf(299, 400, 0.8) < binom.cdf(149, 200, 0.8)  # more attempts, less chance
    assert busy["all_nights_at_floor_by_chance"] == pytest.approx(
        (1 - t4_by_chance) * (1 - binom.cdf(299, 400, 0.8)) ** 2 * (1 - binom.cdf(149, 200, 0.8))
    )
