"""Is job-family history more informative keyed by family, or by family and hardware type?

Scores each history level directly as a predictor of a known family's log throughput on days
30-35 of the simulated fleet (history from all earlier days): the share of attempts within 20%.
Run: python benchmarks/history_keying.py [--scale 0.5]
"""

import argparse
import datetime as dt

import polars as pl

from leap_pipeline.simulation import SimulatedFleet
from leap_serving.decide import metrics
from leap_serving.launch.families import with_family


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    fleet = SimulatedFleet(args.seed, args.scale)
    rows = with_family(pl.concat([d.attempts for _, d in fleet.days(0, 36)]))
    rows = rows.filter(pl.col("throughput") > 0).with_columns(log_q=pl.col("throughput").log())
    print("day  has_type_history  w20_family_mean  w20_type_mean(fallback family)")
    for d in range(30, 36):
        day = rows["ds"].min() + dt.timedelta(days=d)
        past, today = rows.filter(pl.col("ds") < day), rows.filter(pl.col("ds") == day)
        family = past.group_by("family").agg(family_mean=pl.col("log_q").mean())
        per_type = past.group_by("family", "hardware_type").agg(type_mean=pl.col("log_q").mean())
        known = (
            today.join(family, on="family")
            .join(per_type, on=["family", "hardware_type"], how="left")
            .with_columns(type_or_family=pl.coalesce("type_mean", "family_mean"))
        )
        measured = known["throughput"]
        print(
            f"{d:3d}  {known['type_mean'].is_not_null().mean():16.3f}"
            f"  {metrics.within(known['family_mean'].exp(), measured, 20):15.3f}"
            f"  {metrics.within(known['type_or_family'].exp(), measured, 20):30.3f}"
        )


if __name__ == "__main__":
    main()
