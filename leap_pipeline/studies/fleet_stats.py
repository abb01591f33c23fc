"""Fleet statistics: does a fleet (simulated or real) look like the paper's? (sections 1, 2.1, 2.2)

Pure functions over an attempts frame spanning several days: the last day is the held-out day,
the earlier ones the window. Throughput statistics use the attempts with a measured throughput
above zero, the rows a model trains on; attempt and model-type counts use every attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from leap_pipeline.modeling.lookup_table import LOOKUP_KEY, build_lookup_table
from leap_serving.decide import metrics

MIN_ROWS_PER_TYPE = 1_000
# The attempt columns the statistics read (the feature table carries them all).
LOOKUP_KEY_COLUMNS: tuple[str, ...] = ("attempt_id", "ds", *LOOKUP_KEY, "throughput")


@dataclass(frozen=True)
class StatRange:
    paper: str
    low: float
    high: float
    description: str


# The accepted ranges of docs/simulated-fleet.md, defined once.
STAT_RANGES: dict[str, StatRange] = {
    "attempts_per_day": StatRange("~25,000", 22_000, 28_000, "job attempts per day (scale 1.0)"),
    "model_types_per_day": StatRange("~660", 560, 760, "model types active per day"),
    "hardware_types": StatRange("> 20", 20, float("inf"), "hardware types"),
    "top19_share": StatRange("37%", 0.32, 0.42, "share of a day's attempts, top 19 model types"),
    "top100_share": StatRange("78%", 0.73, 0.83, "share of a day's attempts, top 100 model types"),
    "min_throughput": StatRange("single digits", 0.0, 10.0, "smallest throughput (samples/s)"),
    "max_throughput": StatRange("just over 1e6", 5e5, float("inf"), "largest throughput"),
    "two_decade_share": StatRange("91%", 0.87, 0.95, "rows in the densest two-decade window"),
    "per_hw_p95_p5_min": StatRange("42x", 25.0, 1000.0, "smallest per-type p95/p5"),
    "per_hw_p95_p5_max": StatRange("701x", 25.0, 1000.0, "largest per-type p95/p5"),
    "p95_p5_all": StatRange("133x", 90.0, 190.0, "p95/p5 over all rows"),
    "median_ratio_slowest_fastest": StatRange("~3x", 2.0, 5.0, "fastest / slowest type median"),
    "key_spread_share": StatRange("56%", 0.48, 0.64, "attempts in keys with p90/p10 > 1.5"),
    "lookup_coverage": StatRange("13%", 0.09, 0.17, "held-out attempts the lookup table covers"),
    "lookup_w20": StatRange("53%", 0.40, 0.65, "lookup table's w20 on what it covers"),
    "oracle_w20": StatRange("(noise ceiling)", 0.86, 0.94, "true medians' w20, held-out day"),
}


def two_decade_share(throughput: np.ndarray) -> float:
    """Largest share of rows inside any window two decades wide, sliding in log10."""
    x = np.sort(np.log10(throughput))
    ends = np.searchsorted(x, x + 2.0, side="right")
    return float(np.max(ends - np.arange(len(x))) / len(x))


def _ratio(values: np.ndarray) -> float:
    return float(np.percentile(values, 95) / np.percentile(values, 5))


def key_spread_share(window: pl.DataFrame, threshold: float = 1.5) -> float:
    """Share of all window attempts whose lookup key has >= 2 attempts and p90/p10 > threshold."""
    keys = window.group_by(LOOKUP_KEY).agg(
        pl.len().alias("n"),
        (
            pl.col("throughput").quantile(0.9, interpolation="linear")
            / pl.col("throughput").quantile(0.1, interpolation="linear")
        ).alias("spread"),
    )
    spread = keys.filter((pl.col("n") >= 2) & (pl.col("spread") > threshold))["n"].sum()
    return float(spread / window.height)


def fleet_statistics(
    attempts: pl.DataFrame,
    n_hardware_types: int,
    oracle_medians: pl.DataFrame | None = None,
    scale: float = 1.0,
) -> dict[str, float | bool | None]:
    """Every statistic of STAT_RANGES for a multi-day attempts frame.

    ``oracle_medians`` (attempt_id, true_median) for the held-out day adds ``oracle_w20``; without
    it (a real fleet) the noise ceiling is unknown and reported as None. ``scale`` scales the
    accepted range of attempts per day; the other ranges hold at scale 1.0 only.
    """
    days = attempts["ds"].unique().sort()
    if len(days) < 2:
        raise ValueError(f"days={len(days)}: statistics need a window and a held-out day")
    held_out_day = days[-1]
    per_day = (
        attempts.group_by("ds", "model_type")
        .len()
        .sort(["ds", "len"], descending=[False, True])
        .group_by("ds", maintain_order=True)
        .agg(
            pl.col("len").sum().alias("attempts"),
            pl.len().alias("model_types"),
            (pl.col("len").head(19).sum() / pl.col("len").sum()).alias("top19"),
            (pl.col("len").head(100).sum() / pl.col("len").sum()).alias("top100"),
        )
    )
    valid = attempts.filter(pl.col("throughput") > 0)
    q = valid["throughput"].to_numpy()
    by_hw = valid.group_by("hardware_type").agg(
        pl.len().alias("n"),
        pl.col("throughput").quantile(0.95).alias("p95"),
        pl.col("throughput").quantile(0.05).alias("p5"),
        pl.col("throughput").median().alias("median"),
    )
    big = by_hw.filter(pl.col("n") >= MIN_ROWS_PER_TYPE)
    hw_ratio = (big["p95"] / big["p5"]).to_numpy()

    window = valid.filter(pl.col("ds") < held_out_day)
    held_out = valid.filter(pl.col("ds") == held_out_day)
    table = build_lookup_table(window)
    lookup = table.predict(held_out).to_numpy().astype(float)
    covered = ~np.isnan(lookup)
    measured = held_out["throughput"].to_numpy()

    stats: dict[str, float | bool | None] = {
        "attempts_per_day": float(per_day["attempts"].mean()),
        "model_types_per_day": float(per_day["model_types"].mean()),
        "hardware_types": float(n_hardware_types),
        "top19_share": float(per_day["top19"].mean()),
        "top100_share": float(per_day["top100"].mean()),
        "min_throughput": float(q.min()),
        "max_throughput": float(q.max()),
        "two_decade_share": two_decade_share(q),
        "per_hw_p95_p5_min": float(hw_ratio.min()) if len(hw_ratio) else None,
        "per_hw_p95_p5_max": float(hw_ratio.max()) if len(hw_ratio) else None,
        "p95_p5_all": _ratio(q),
        "median_ratio_slowest_fastest": (
            float(big["median"].max() / big["median"].min()) if big.height >= 2 else None
        ),
        "key_spread_share": key_spread_share(window),
        "lookup_coverage": float(covered.mean()),
        "lookup_w20": (
            metrics.within(lookup[covered], measured[covered], 20) if covered.any() else None
        ),
        "oracle_w20": None,
    }
    if oracle_medians is not None:
        scored = held_out.select("attempt_id", "throughput").join(
            oracle_medians.select("attempt_id", "true_median"), on="attempt_id", how="left"
        )
        stats["oracle_w20"] = metrics.within(scored["true_median"], scored["throughput"], 20)
    stats["within_range"] = all(
        in_range(key, stats[key], scale)
        for key in STAT_RANGES
        if not (key == "oracle_w20" and oracle_medians is None)
    )
    return stats


def in_range(key: str, value: float | None, scale: float = 1.0) -> bool:
    """Whether one statistic lies inside its accepted range (attempts scale with ``scale``)."""
    if value is None:
        return False
    accepted = STAT_RANGES[key]
    factor = scale if key == "attempts_per_day" else 1.0
    return accepted.low * factor <= value <= accepted.high * factor


def simulated_fleet_statistics(
    seed: int = 0,
    scale: float = 1.0,
    days: int = 31,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, float | bool | None]:
    """Generate ``days`` days of a simulated fleet from the span start and compute its statistics.

    The last day is the held-out day; the oracle scores its true medians (the noise ceiling).
    """
    from leap_pipeline.simulation import (
        SimulatedFleet,  # the simulator is only needed for this entry point
    )

    fleet = SimulatedFleet(seed=seed, scale=scale)
    if isinstance(days, bool) or not isinstance(days, int) or days < 2:
        raise ValueError(f"days={days!r} must be an integer of at least 2 (window + held-out day)")
    frames = []
    for i, (_, day) in enumerate(fleet.days(0, days)):
        frames.append(day.attempts.select(LOOKUP_KEY_COLUMNS))
        if progress is not None:
            progress(i + 1, days)
    attempts = pl.concat(frames)
    held_out = attempts.filter(pl.col("ds") == attempts["ds"].max())
    medians = fleet.oracle().true_medians(held_out["attempt_id"].to_list())
    return fleet_statistics(attempts, fleet.hardware_specs().height, medians, scale=scale)


def warehouse_fleet_statistics(
    path: str | Path | None = None, days: int = 31
) -> tuple[dict[str, float | bool | None], str, float]:
    """Statistics of the last ``days`` days in the warehouse's feature table, what was read, and
    the fleet scale the accepted ranges use.

    The feature table holds measured attempts only, so attempts per day count those. When the
    warehouse was filled from the simulator, its oracle scores the held-out day and its scale
    applies; otherwise the scale is 1.0.
    """
    from leap_pipeline.data.sources import logged_simulator
    from leap_pipeline.data.warehouse import open_warehouse

    with open_warehouse(path, read_only=True) as wh:
        stored = wh.partitions("feature_table")
        if len(stored) < 2:
            raise ValueError(f"the feature table in {wh.path} has {len(stored)} day(s); need 2")
        first, last = stored[max(0, len(stored) - days)], stored[-1]
        attempts = wh.read("feature_table", first, last, columns=LOOKUP_KEY_COLUMNS)
        n_hardware = wh.read("hardware_specs", last, last).height
        sources = wh.read("source_log", first, last)["source"].to_list()
        where = f"feature table {wh.path}, {first} .. {last} ({len(stored)} days stored)"
    source = logged_simulator(sources)
    if source is not None:
        fleet = source.fleet()
        held_out = attempts.filter(pl.col("ds") == last)["attempt_id"].to_list()
        medians = fleet.oracle().true_medians(held_out)
        stats = fleet_statistics(attempts, n_hardware, medians, scale=source.scale)
        return stats, where, source.scale
    return fleet_statistics(attempts, n_hardware), where, 1.0
