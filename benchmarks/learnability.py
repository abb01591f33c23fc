"""How learnable the simulated fleet is: a reference GBDT on what a launcher knows, and on that
plus each hidden simulator factor revealed.

The reference single GBDT (a profile's trees, early-stopped on the window's last day) is trained
on 30 days of the fleet and scored on day 31, fitted on:
(a) launch config + hardware specs + the model type's record (``MODEL_TYPE_HISTORY_FEATURES``);
then the ladder: + the family's history, + throughput-ratio features, + architecture features
= (b) every feature; (c) every feature plus one hidden factor revealed as a column, for each
factor; (d) every feature plus all of them. Beside them: the oracle's w20 (true medians against
measured throughput) and the share of var(ln q) each hidden factor carries over the window.

The revealed columns come from ``Oracle.hidden_factors`` and exist only here: no feature reads
them. The JSON keys follow the "Learnability" section of the shared simulated-fleet notes.

Run: python benchmarks/learnability.py [--scale 1.0] [--seed 0] [--profile paper] [--jobs 2]
     [--no-each] [--json]
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
from threadpoolctl import threadpool_limits

from leap_pipeline.data.feature_table import discard_stale_warehouse
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.selection import training_window, validation_rows
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.simulation import HIDDEN_FACTORS, SPAN_START, SimulatedFleet
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS, FEATURE_GROUPS
from leap_serving.launch.history import MODEL_TYPE_HISTORY_FEATURES
from leap_serving.model.cascade import make_single_gbdt_booster
from leap_serving.model.fitting import fit_booster

# factors a model could in principle learn (the noise is each attempt's own: never revealed)
REVEALABLE = tuple(f for f in HIDDEN_FACTORS if f != "noise")
FAMILY_HISTORY = tuple(c for c in FEATURE_GROUPS["hist"] if c not in MODEL_TYPE_HISTORY_FEATURES)
CONFIG_SPECS = (*FEATURE_GROUPS["job"], *FEATURE_GROUPS["cfg"], *FEATURE_GROUPS["hw"],
                *MODEL_TYPE_HISTORY_FEATURES)  # fmt: skip
LADDER = {
    "config_specs": CONFIG_SPECS,
    "history": (*CONFIG_SPECS, *FAMILY_HISTORY),
    "ratio": (*CONFIG_SPECS, *FAMILY_HISTORY, *FEATURE_GROUPS["ratio"]),
    "architecture": tuple(FEATURE_COLUMNS),
}


def fit_and_score(columns, window, held_out, validation, profile) -> float:
    X = window.select(columns).to_numpy()
    with threadpool_limits(1):
        booster = make_single_gbdt_booster(profile)
        model = fit_booster(booster, X, window["log_q"].to_numpy(), validation)
        predicted = np.exp(model.predict(held_out.select(columns).to_numpy()))
    return metrics.within(predicted, held_out["throughput"].to_numpy(), 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default="paper", choices=("paper", "fast", "quick"))
    parser.add_argument("--jobs", type=int, default=2, help="fits run in parallel, one thread each")
    parser.add_argument("--data", default="data")
    parser.add_argument(
        "--no-each", action="store_true",
        help="skip revealing the factors one at a time (the acceptance keys need only all of them)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.scale <= 0:
        parser.error(f"--scale {args.scale} must be positive")
    start = time.perf_counter()
    warehouse = Path(args.data) / f"learnability-{args.scale}-{args.seed}.duckdb"
    if discard_stale_warehouse(warehouse):
        print(f"removed {warehouse}: built by other code; landing it again", file=sys.stderr)
    day = SPAN_START + dt.timedelta(days=30)
    source = f"simulator:seed={args.seed},scale={args.scale}"
    print(f"landing 31 days of {source}", file=sys.stderr)
    materialize_days(SPAN_START, day, source=source, warehouse=str(warehouse),
                     log_level="WARNING")  # fmt: skip
    with open_warehouse(warehouse, read_only=True) as wh:
        window = wh.read("feature_table", *training_window(day))
        held_out = wh.read("feature_table", day, day)
    oracle = SimulatedFleet(seed=args.seed, scale=args.scale).oracle()
    window, held_out = (
        frame.join(
            oracle.hidden_factors(frame["attempt_id"].to_list()).rename(
                {f: f"revealed_{f}" for f in HIDDEN_FACTORS}
            ),
            on="attempt_id",
            how="left",
            maintain_order="left",
        )
        for frame in (window, held_out)
    )
    validation = validation_rows(window)
    fits = {f"ladder_{name}": columns for name, columns in LADDER.items()}
    full = LADDER["architecture"]
    if not args.no_each:
        fits |= {f"revealed_{f}": (*full, f"revealed_{f}") for f in REVEALABLE}
    fits["revealed_all"] = (*full, *(f"revealed_{f}" for f in REVEALABLE))
    print(f"{len(fits)} fits of the {args.profile} GBDT on {window.height:,} rows, "
          f"{args.jobs} at a time", file=sys.stderr)  # fmt: skip
    scores = dict(
        zip(
            fits,
            Parallel(n_jobs=args.jobs)(
                delayed(fit_and_score)(list(c), window, held_out, validation, args.profile)
                for c in fits.values()
            ),
            strict=True,
        )
    )
    medians = oracle.true_medians(held_out["attempt_id"].to_list())["true_median"].to_numpy()
    variance = float(np.var(window["log_q"].to_numpy()))
    ladder = {
        "history": scores["ladder_history"] - scores["ladder_config_specs"],
        "ratio": scores["ladder_ratio"] - scores["ladder_history"],
        "architecture": scores["ladder_architecture"] - scores["ladder_ratio"],
    }
    result = {
        "scale": args.scale,
        "seed": args.seed,
        "profile": args.profile,
        "training_rows": window.height,
        "held_out_rows": held_out.height,
        "gbdt_config_specs_w20": scores["ladder_config_specs"],
        "gbdt_full_w20": scores["ladder_architecture"],
        "gbdt_revealed_w20": scores["revealed_all"],
        "gbdt_revealed_each_w20": {
            f: scores[f"revealed_{f}"] for f in REVEALABLE if f"revealed_{f}" in scores
        },
        "ladder": ladder,
        "oracle_w20": metrics.within(medians, held_out["throughput"].to_numpy(), 20),
        "variance_share": {
            f: float(np.var(window[f"revealed_{f}"].to_numpy())) / variance for f in HIDDEN_FACTORS
        },
        "seconds": round(time.perf_counter() - start, 1),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"reference GBDT ({args.profile}), trained on {window.height:,} rows, "
          f"scored on {held_out.height:,} of {day}")  # fmt: skip
    print(f"  config + specs + model type:  w20 {result['gbdt_config_specs_w20']:.3f}")
    for step, gain in ladder.items():
        print(f"  + {step:27} {gain:+.3f}")
    print(f"  every feature:                w20 {result['gbdt_full_w20']:.3f}")
    for factor, w20 in result["gbdt_revealed_each_w20"].items():
        print(f"  + revealed {factor:26} w20 {w20:.3f}")
    print(f"  + all revealed:               w20 {result['gbdt_revealed_w20']:.3f}")
    print(f"  oracle:                       w20 {result['oracle_w20']:.3f}")
    print("share of var(ln q) over the window: " + ", ".join(
        f"{f} {v:.1%}" for f, v in result["variance_share"].items()))  # fmt: skip
    print(f"{result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
