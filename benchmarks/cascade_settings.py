"""Which cascade settings earn their place: a backtest of each against the single GBDT.

For each night D of the backtest (the report's fleet and nights), every setting below is trained
on the 30 days before D at one profile (early-stopped on the window's last day, as a night trains)
and scored on D under each gating; the single GBDT (a one-bin cascade) beside them. Gating is a
prediction-time choice, so the three gatings of a setting share one fit.

Settings: the paper's cascade (13 bins, EM scored on the rows each expert trained on, experts on
their own bin); out-of-fold EM; experts that also train on their neighbours' rows (weight 0.5);
both; and the number of bins K at 6 and 26.

Run: python benchmarks/cascade_settings.py [--scale 0.05] [--nights 10] [--profile fast]
     [--jobs 2] [--json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

from leap_pipeline.data.feature_table import discard_stale_warehouse
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.selection import training_window, validation_rows
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.settings import WINDOW_DAYS
from leap_pipeline.simulation import SPAN_START
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.gating import GATINGS
from leap_serving.model.profiles import PAPER_CASCADE, profile_params

SETTINGS: dict[str, dict] = {
    "single_gbdt": {"n_bins": 1},
    "paper": PAPER_CASCADE,
    "oof_em": PAPER_CASCADE | {"oof_folds": 2},
    "overlap": PAPER_CASCADE | {"expert_overlap": 0.5},
    "oof_em+overlap": PAPER_CASCADE | {"oof_folds": 2, "expert_overlap": 0.5},
    "k6": PAPER_CASCADE | {"n_bins": 6},
    "k26": PAPER_CASCADE | {"n_bins": 26},
}


def score_setting(name: str, params: dict, window, rows, profile: str) -> dict:
    X = window.select(FEATURE_COLUMNS).to_numpy()
    start = time.perf_counter()
    model = BinnedCascade(**(profile_params(profile) | params)).fit(
        X, window["log_q"].to_numpy(), validation=validation_rows(window)
    )
    seconds = time.perf_counter() - start
    X_day, measured = rows.select(FEATURE_COLUMNS).to_numpy(), rows["throughput"].to_numpy()
    gatings = ("argmax",) if model.n_bins_ == 1 else GATINGS
    return {
        "setting": name,
        "seconds": round(seconds, 1),
        "w20": {
            g: metrics.within(np.exp(model.set_params(gating=g).predict(X_day)), measured, 20)
            for g in gatings
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nights", type=int, default=10, help="spread evenly over 30 nights")
    parser.add_argument("--profile", default="fast", choices=("paper", "fast", "quick"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--data", default="data")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.nights <= 30:
        parser.error(f"--nights {args.nights} must be in 1..30")
    start = time.perf_counter()
    warehouse = Path(args.data) / f"report-{args.scale}-{args.seed}.duckdb"
    if discard_stale_warehouse(warehouse):
        print(f"removed {warehouse}: built by other code; landing it again", file=sys.stderr)
    first_night = SPAN_START + dt.timedelta(days=WINDOW_DAYS)
    nights = [
        first_night + dt.timedelta(days=int(i))
        for i in np.linspace(0, 29, args.nights).round().astype(int)
    ]
    source = f"simulator:seed={args.seed},scale={args.scale}"
    print(f"landing {source} to {nights[-1]}", file=sys.stderr)
    materialize_days(SPAN_START, nights[-1], source=source, warehouse=str(warehouse),
                     log_level="WARNING")  # fmt: skip
    per_night = []
    for night in nights:
        with open_warehouse(warehouse, read_only=True) as wh:
            window = wh.read("feature_table", *training_window(night))
            rows = wh.read("feature_table", night, night)
        results = Parallel(n_jobs=args.jobs)(
            delayed(score_setting)(name, params, window, rows, args.profile)
            for name, params in SETTINGS.items()
        )
        per_night.append({"ds": night.isoformat(), "results": results})
        print(
            f"{night}: "
            + ", ".join(
                f"{r['setting']} " + "/".join(f"{v:.3f}" for v in r["w20"].values())
                for r in results
            ),
            file=sys.stderr,
        )
    table = {}
    for name in SETTINGS:
        for gating in GATINGS:
            series = [
                r["w20"][gating]
                for n in per_night
                for r in n["results"]
                if r["setting"] == name and gating in r["w20"]
            ]
            if series:
                single = [
                    r["w20"]["argmax"]
                    for n in per_night
                    for r in n["results"]
                    if r["setting"] == "single_gbdt"
                ]
                gaps = np.subtract(series, single)
                table[f"{name}/{gating}" if name != "single_gbdt" else name] = {
                    "median_w20": float(np.median(series)),
                    "median_gap_to_single_gbdt": float(np.median(gaps)),
                    "nights_at_or_above_single_gbdt": int(np.sum(gaps >= 0)),
                }
    result = {
        "scale": args.scale,
        "seed": args.seed,
        "profile": args.profile,
        "nights": [n["ds"] for n in per_night],
        "settings": table,
        "per_night": per_night,
        "seconds": round(time.perf_counter() - start, 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, row in table.items():
            gap = 100 * row["median_gap_to_single_gbdt"]
            above = row["nights_at_or_above_single_gbdt"]
            print(f"{key:28} median w20 {row['median_w20']:.3f}  gap {gap:+.1f} points  "
                  f"at or above on {above}/{len(nights)} nights")  # fmt: skip


if __name__ == "__main__":
    main()
