"""Which first carrier for the prior: a single GBDT on ln q against single GBDTs on ln q minus
the history's prior, with the first carrier of a family's level to a new type varied.

Under leave-model-hardware-out (``leap crossval``'s folds and features), each variant's prior is
the family's own level on the type, else its levels carried by the first carrier, then the rest of
``features.PRIOR_COLUMNS`` in order (bandwidth first is what ships). Prints w20, MdAPE and top-1
fastest / per dollar of each, beside the physics baseline.

Run: python benchmarks/prior_carriers.py --source sia|lambda --path DIR --hardware ml_hardware.csv
"""

import argparse
import json
from pathlib import Path

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

from leap_pipeline.data.public_data import public_sources
from leap_pipeline.studies.crossval import fold_features, physics_predict
from leap_pipeline.studies.decisions import top1_accuracy
from leap_pipeline.studies.splits import GROUP_KEYS, groups, leave_one_group_out
from leap_serving.decide import metrics
from leap_serving.launch.families import with_family
from leap_serving.launch.features import FEATURE_COLUMNS, PRIOR_COLUMNS
from leap_serving.model.cascade import make_single_gbdt_booster
from leap_serving.model.fitting import fit_booster

SPLIT = "leave-model-hardware-out"
FIRST = {
    "bandwidth_first": "hist_xfer_bandwidth_log_q",
    "fleet_ratio_first": "hist_xfer_fleet_log_q",
    "compute_first": "hist_xfer_compute_log_q",
}


def prior(X: np.ndarray, first: str) -> np.ndarray:
    column = {c: j for j, c in enumerate(FEATURE_COLUMNS)}
    order = [first, *(c for c in PRIOR_COLUMNS if c != first)]
    out = np.where(X[:, column["hist_hw_count"]] > 0, X[:, column["hist_hw_mean_log_q"]], np.nan)
    for c in order:
        out = np.where(np.isnan(out), X[:, column[c]], out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("sia", "lambda"), required=True)
    parser.add_argument("--path", type=Path, required=True)
    parser.add_argument("--hardware", type=Path, required=True)
    args = parser.parse_args()
    attempts, _, specs = public_sources(args.source, args.path, args.hardware)
    rows = with_family(attempts.filter(pl.col("throughput") > 0))
    names = ["level", *FIRST]
    predicted = {name: np.full(rows.height, np.nan) for name in [*names, "physics"]}
    for test_mask in leave_one_group_out(rows, GROUP_KEYS[SPLIT]):
        train, test = rows.filter(~test_mask), rows.filter(test_mask)
        own_group = groups(train, GROUP_KEYS[SPLIT])  # history leaves out its own group
        X_train, X_test = fold_features(train, test, specs, own_group)
        y = train["throughput"].log().to_numpy()
        fallback = float(np.median(y))
        for name in names:
            if name == "level":
                base_train, base_test = 0.0, 0.0
            else:
                base_train = np.nan_to_num(prior(X_train, FIRST[name]), nan=fallback)
                base_test = np.nan_to_num(prior(X_test, FIRST[name]), nan=fallback)
            with threadpool_limits(1):
                model = fit_booster(make_single_gbdt_booster("fast"), X_train, y - base_train)
            predicted[name][test_mask] = np.exp(model.predict(X_test) + base_test)
        intensity = X_test[:, FEATURE_COLUMNS.index("arch_arithmetic_intensity")]
        predicted["physics"][test_mask] = physics_predict(train, test, specs, intensity)
    q = rows["throughput"].to_numpy()
    top1 = top1_accuracy(rows, predicted, specs)
    result = {
        name: {
            "w20": round(metrics.within(p, q, 20), 4),
            "mdape": round(metrics.mdape(p, q), 2),
            "top1_fastest": round(top1["fastest"][name], 4),
            "top1_per_cost": round(top1["per_cost"][name], 4),
        }
        for name, p in predicted.items()
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
