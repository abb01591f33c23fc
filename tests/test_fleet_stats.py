import datetime as dt

import numpy as np
import polars as pl
import pytest

from leap_pipeline.studies.fleet_stats import (
    STAT_RANGES,
    fleet_statistics,
    key_spread_share,
    simulated_fleet_statistics,
    two_decade_share,
)


def test_two_decade_share_finds_the_densest_window():
    # 8 rows inside [10, 1000], 2 far away
    q = np.array([10, 20, 50, 100, 200, 500, 900, 1000, 1e6, 1e7], dtype=float)
    assert two_decade_share(q) == pytest.approx(0.8)


def test_key_spread_counts_all_attempts_in_spread_keys():
    rows = {
        "model_type": ["a"] * 5 + ["b"] * 3 + ["c"],
        "num_trainers": [1] * 9,
        "batch_size": [64] * 9,
        "hardware_type": ["X"] * 9,
        # key a: p90/p10 of 1..5 (linear) = 4.6/1.4 > 1.5; key b: tight; key c alone
        "throughput": [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 10.5, 11.0, 7.0],
    }
    assert key_spread_share(pl.DataFrame(rows)) == pytest.approx(5 / 9)


def _tiny_fleet(days: int = 3) -> pl.DataFrame:
    start = dt.date(2026, 1, 1)
    rows = []
    for d in range(days):
        for i in range(30):
            rows.append(
                {
                    "attempt_id": f"{d}-{i}",
                    "ds": start + dt.timedelta(days=d),
                    "model_type": "m1" if i < 25 else f"tail{i}",
                    "num_trainers": 2,
                    "batch_size": 128,
                    "hardware_type": "X" if i % 2 else "Y",
                    "throughput": 100.0 + i,
                }
            )
    return pl.DataFrame(rows)


def test_statistics_of_a_hand_made_fleet():
    attempts = _tiny_fleet()
    medians = attempts.filter(pl.col("ds") == pl.col("ds").max()).select(
        "attempt_id", true_median=pl.col("throughput") * 1.1
    )
    stats = fleet_statistics(attempts, n_hardware_types=2, oracle_medians=medians)
    assert stats["attempts_per_day"] == 30
    assert stats["model_types_per_day"] == 6
    assert stats["top19_share"] == 1.0
    assert stats["min_throughput"] == 100.0 and stats["max_throughput"] == 129.0
    assert stats["oracle_w20"] == 1.0
    assert stats["per_hw_p95_p5_min"] is None  # no type reaches 1,000 rows
    assert stats["within_range"] is False


def test_statistics_need_a_held_out_day():
    with pytest.raises(ValueError, match="days"):
        fleet_statistics(_tiny_fleet(days=1), n_hardware_types=2)


@pytest.mark.long
def test_default_fleet_matches_the_paper():
    """The acceptance run: scale 1.0, 31 days, seed 0 (about 20 s on 2 cores). Long: the fleet
    is frozen, so one interpreter's run in CI checks it."""
    stats = simulated_fleet_statistics(seed=0, scale=1.0, days=31)
    outside = {
        k: stats[k]
        for k, r in STAT_RANGES.items()
        if stats[k] is None or not r.low <= stats[k] <= r.high
    }
    assert outside == {}
    assert stats["within_range"] is True
    assert 0.86 <= stats["oracle_w20"] <= 0.94
