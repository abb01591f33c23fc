"""EM's scoring of many rows: LightGBM's ``predict`` against the packed block walk.

Fits one expert-sized regressor (255 leaves, absolute error) on synthetic rows with missing
values, then times LightGBM's ``predict`` (raw scores) and ``CompiledForest.predict_many`` on
one and two threads over the same rows, and checks the values are identical.

Run: python benchmarks/em_scoring.py [--rows 300000] [--trees 300] [--json]
"""

import argparse
import json
import time

import numpy as np

from leap_serving.model.boosters import GBDTRegressor


def timed(function) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = function()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--trees", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.rows, 79))  # as many columns as the feature table
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.nansum(X[:, :10] * rng.normal(size=10), axis=1) + np.sin(np.nan_to_num(X[:, 11]) * 3)
    fit_rows = min(args.rows, 100_000)
    model = GBDTRegressor(
        max_iter=args.trees, max_leaf_nodes=255, learning_rate=0.1, early_stopping=False,
        n_threads=2,
    ).fit(X[:fit_rows], y[:fit_rows])  # fmt: skip
    import lightgbm as lgb

    booster = lgb.Booster(model_str=model.model_text_)
    forest = model.forest()
    forest.predict_many(X[:10])  # compiles the walk
    result = {"rows": args.rows, "trees": forest.n_trees}
    reference = None
    for threads in (1, 2):
        seconds, reference = timed(
            lambda n=threads: booster.predict(X, raw_score=True, num_threads=n)
        )
        result[f"lightgbm_{threads}_thread_s"] = round(seconds, 2)
    for threads in (1, 2):
        seconds, walked = timed(lambda n=threads: forest.predict_many(X, n))
        result[f"packed_{threads}_thread_s"] = round(seconds, 2)
        result[f"packed_{threads}_identical"] = bool(np.array_equal(walked, reference))
    result["speedup_1_thread"] = round(
        result["lightgbm_1_thread_s"] / result["packed_1_thread_s"], 2
    )
    result["speedup_2_threads"] = round(
        result["lightgbm_1_thread_s"] / result["packed_2_thread_s"], 2
    )
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:22} {value}")


if __name__ == "__main__":
    main()
