"""Would the nightly selection publish a cascade design on its own merit?

``cascade_settings.py --group designs`` scores each design on day D. What ships is decided
before D: the night's models train on D-30 .. D-2 (early-stopped on D-2) and the selection
(``selection.select_model``) publishes a challenger only if its w20 on D-1 beats the single
GBDT's by more than the bar (``selection.challenger_bar``: ``SELECTION_Z`` standard errors of
the paired difference for one challenger, more for several). This benchmark
trains the single GBDT g and a design exactly so, on the window a night has, and applies that
rule on D-1; day D's w20 of both is printed beside it, for the nights of the designs table.

Run: python benchmarks/design_selection.py [--design gbdt_corrections] [--scale 1.0]
     [--profile paper] [--nights 3] [--spread 2] [--n-jobs -1] [--json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.selection import (
    challenger_bar,
    split_window,
    training_window,
    validation_rows,
)
from leap_pipeline.settings import WINDOW_DAYS
from leap_pipeline.simulation import SPAN_START
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.profiles import profile_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cascade_designs import DESIGNS


def night(design: str, day: dt.date, warehouse: Path, profile: str, n_jobs: int | None) -> dict:
    with open_warehouse(warehouse, read_only=True) as wh:
        window = wh.read("feature_table", *training_window(day))
        rows = wh.read("feature_table", day, day)
    training, selection = split_window(window)
    X, y = training.select(FEATURE_COLUMNS).to_numpy(), training["log_q"].to_numpy()
    held_out = validation_rows(training)
    params = profile_params(profile)
    start = time.perf_counter()
    g = BinnedCascade(**(params | {"n_bins": 1}), n_jobs=n_jobs).fit(X, y, validation=held_out)
    X_both = np.vstack([selection.select(FEATURE_COLUMNS).to_numpy(),
                        rows.select(FEATURE_COLUMNS).to_numpy()])  # fmt: skip
    g_both = g.predict(X_both)
    (designed,) = DESIGNS[design](
        params, X, y, held_out, g.predict(X), X_both, g_both, n_jobs
    ).values()
    seconds = time.perf_counter() - start
    cut = selection.height
    measured_sel, measured_day = selection["throughput"].to_numpy(), rows["throughput"].to_numpy()
    hit_g = metrics.within_mask(np.exp(g_both[:cut]), measured_sel, 20)
    hit_d = metrics.within_mask(np.exp(designed[:cut]), measured_sel, 20)
    # one challenger, as the night would weigh this design alone against the single GBDT
    margin, bar = challenger_bar(hit_d, hit_g, challengers=1)
    return {
        "ds": day.isoformat(),
        "selection_day": str(selection["ds"].max()),
        "selection_rows": cut,
        "margin": margin,
        "required_margin": bar,
        "published": design if margin > bar else "single_gbdt",
        "day_w20": {
            "single_gbdt": metrics.within(np.exp(g_both[cut:]), measured_day, 20),
            design: metrics.within(np.exp(designed[cut:]), measured_day, 20),
        },
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", default="gbdt_corrections",
                        choices=sorted(set(DESIGNS) - {"single_gbdt"}))  # fmt: skip
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default="paper", choices=("paper", "fast", "quick"))
    parser.add_argument("--nights", type=int, default=3)
    parser.add_argument("--spread", type=int, default=2)
    parser.add_argument("--n-jobs", type=int, default=-1)
    parser.add_argument("--data", default="data")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    warehouse = Path(args.data) / f"report-{args.scale}-{args.seed}.duckdb"
    if not warehouse.exists():
        parser.error(f"{warehouse} is missing: run cascade_settings.py or leap report first")
    first = SPAN_START + dt.timedelta(days=WINDOW_DAYS)
    days = [first + dt.timedelta(days=int(i))
            for i in np.linspace(0, args.spread, args.nights).round().astype(int)]  # fmt: skip
    results = []
    for day in days:
        results.append(night(args.design, day, warehouse, args.profile, args.n_jobs))
        print(json.dumps(results[-1]), file=sys.stderr)
    summary = {
        "design": args.design,
        "scale": args.scale,
        "profile": args.profile,
        "nights": results,
        "published_on": sum(r["published"] == args.design for r in results),
    }
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
