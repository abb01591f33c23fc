"""The night's single GBDT fitted by three engines, side by side, on the same rows.

The same window as ``train_cascade.py`` (the simulated fleet's 30 days before ``--day``, from
its benchmark warehouse), the night's model: one regressor of ln throughput under the absolute
(L1) loss, 255 leaves, rate 0.03, up to 3,000 trees, early-stopped after 20 rounds without
improvement on the window's last day (``selection.validation_rows``), as ``fit_models`` trains
it. Engines: scikit-learn's HistGradientBoostingRegressor, LightGBM (the night's own booster,
``leap_serving.model.boosters.GBDTRegressor``: ``objective="regression_l1"``, leaf-wise) and XGBoost
(``hist``, ``grow_policy="lossguide"``, ``objective="reg:absoluteerror"``), each on
``--threads`` threads and in its own process, so each one's peak memory is its own.

Per engine: ``fit_s``, ``trees`` kept, ``w20`` on day D, ``peak_rss_mb`` (the process, data
included; ``data_rss_mb`` is the same process before the fit), ``model_mb`` in the engine's
own file format (scikit-learn: skops, as MLflow stores it; LightGBM: its text model; XGBoost:
its JSON), and ``rank_p50_ms``/``rank_p99_ms``: the engine's own ``predict`` of 20 rows of day D
at a time over distinct launches. For LightGBM, ``walker_p50_ms``/``walker_p99_ms`` are the
same rows through our compiled walker (``leap_serving.model.trees``), which reads LightGBM's text
model, and ``walker_equal`` whether it gives LightGBM's values.

XGBoost is not a dependency of the project: ``pip install -e .[engines]`` to run it here; an
engine that is not installed is reported as such.

Run: python benchmarks/engines.py [--scale 1.0] [--engines sklearn,lightgbm,xgboost]
     [--threads 2] [--max-iter 3000] [--json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ENGINES = ("sklearn", "lightgbm", "xgboost")
EARLY_STOPPING_ROUNDS = 20  # the night's n_iter_no_change
RANK_ROWS = 20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def night_rows(scale: float, day: dt.date, warehouse: str) -> dict[str, np.ndarray]:
    """The night's training rows, its early-stopping mask and day D, materialized on first use."""
    import polars as pl

    from leap_pipeline.data.feature_table import discard_stale_warehouse
    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.modeling.selection import training_window, validation_rows
    from leap_pipeline.orchestration.definitions import materialize_days
    from leap_pipeline.simulation import SPAN_START
    from leap_serving.launch.features import FEATURE_COLUMNS

    path = Path(warehouse or f"data/bench-{scale}.duckdb")
    if not warehouse and discard_stale_warehouse(path):
        print(f"removed {path}: it was built with other features", file=sys.stderr)
    landed = set()
    if path.exists():
        with open_warehouse(path, read_only=True) as wh:
            landed = set(wh.partitions("feature_table"))
    days = [SPAN_START + dt.timedelta(days=i) for i in range((day - SPAN_START).days + 1)]
    missing = [d for d in days if d not in landed]
    if missing:
        materialize_days(missing[0], day, source=f"simulator:seed=0,scale={scale}",
                         warehouse=str(path), log_level="WARNING")  # fmt: skip
    first, last = training_window(day)
    with open_warehouse(path, read_only=True) as wh:
        window = wh.read("feature_table", first, last)
        evaluation = wh.read("feature_table", day, day)
    # as fit_models trains: the window's last day is the selection's, the day before it the
    # early-stopping day
    training = window.filter(pl.col("ds") < window["ds"].max())
    return {
        "X": training.select(FEATURE_COLUMNS).to_numpy(),
        "y": training["log_q"].to_numpy(),
        "validation": validation_rows(training),
        "X_day": evaluation.select(FEATURE_COLUMNS).to_numpy(),
        "q_day": evaluation["throughput"].to_numpy(),
    }


def _fit_sklearn(X, y, validation, params, threads):
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    from leap_serving.model.fitting import fit_booster

    estimator = HistGradientBoostingRegressor(
        loss="absolute_error", max_iter=params["max_iter"],
        max_leaf_nodes=params["max_leaf_nodes"], learning_rate=params["learning_rate"],
        n_iter_no_change=EARLY_STOPPING_ROUNDS, random_state=0,
    )  # fmt: skip
    with threadpool_limits(threads):
        model = fit_booster(estimator, X, y, validation=validation)
    return model, int(model.n_iter_)


def _fit_lightgbm(X, y, validation, params, threads):
    from leap_serving.model.cascade import BinnedCascade
    from leap_serving.model.fitting import fit_booster

    estimator = BinnedCascade(**params, n_bins=1, n_threads=threads)._expert()
    model = fit_booster(estimator, X, y, validation=validation)
    return model, int(model.n_iter_)


def _fit_xgboost(X, y, validation, params, threads):
    import xgboost as xgb

    model = xgb.XGBRegressor(
        objective="reg:absoluteerror", tree_method="hist", grow_policy="lossguide",
        max_leaves=params["max_leaf_nodes"], max_depth=0, max_bin=255,
        learning_rate=params["learning_rate"], n_estimators=params["max_iter"],
        early_stopping_rounds=EARLY_STOPPING_ROUNDS, n_jobs=threads, random_state=0,
    )  # fmt: skip
    train = ~validation
    model.fit(X[train], y[train], eval_set=[(X[validation], y[validation])], verbose=False)
    return model, int(model.best_iteration + 1)


FITS = {"sklearn": _fit_sklearn, "lightgbm": _fit_lightgbm, "xgboost": _fit_xgboost}


def _model_mb(engine: str, model) -> float:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model"
        if engine == "sklearn":
            import skops.io as sio

            sio.dump(model, path)
        elif engine == "lightgbm":
            path.write_text(model.model_text_)
        else:
            path = path.with_suffix(".json")
            model.save_model(path)
        return path.stat().st_size / 2**20


def _latency(predict, X_day: np.ndarray, calls: int) -> dict[str, float]:
    """p50/p99 of ``predict`` on 20 rows at a time, each call a different slice of day D."""
    starts = np.random.default_rng(0).integers(0, max(1, len(X_day) - RANK_ROWS), calls)
    samples = []
    for s in starts:
        rows = np.ascontiguousarray(X_day[s : s + RANK_ROWS])
        t = time.perf_counter()
        predict(rows)
        samples.append(time.perf_counter() - t)
    ms = np.array(samples) * 1e3
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3)}  # fmt: skip


def run_engine(engine: str, args: argparse.Namespace) -> dict:
    """One engine's fit and figures, in this process."""
    from leap_serving.decide import metrics
    from leap_serving.model.boosters import EARLY_STOPPING_TOL
    from leap_serving.model.profiles import profile_params

    # section 2.4's rate, scikit-learn's stopping tolerance and every feature for every engine:
    # the paper profile's speed levers would reach LightGBM alone, through its expert
    params = profile_params("paper") | {
        "max_iter": args.max_iter, "learning_rate": 0.03, "early_stopping_tol": EARLY_STOPPING_TOL,
        "feature_fraction": 1.0, "subsample": 1.0,
    }  # fmt: skip
    rows = night_rows(args.scale, args.day, args.warehouse)
    data_mb = peak_rss_mb()
    start = time.perf_counter()
    model, trees = FITS[engine](rows["X"], rows["y"], rows["validation"], params, args.threads)
    fit_s = time.perf_counter() - start
    result = {
        "engine": engine,
        "version": sys.modules[{"sklearn": "sklearn"}.get(engine, engine)].__version__,
        "training_rows": int((~rows["validation"]).sum()),
        "validation_rows": int(rows["validation"].sum()),
        "fit_s": round(fit_s, 1),
        "trees": trees,
        "w20": round(metrics.within(np.exp(model.predict(rows["X_day"])), rows["q_day"], 20), 4),
        "data_rss_mb": round(data_mb),
        "peak_rss_mb": round(peak_rss_mb()),
        "model_mb": round(_model_mb(engine, model), 2),
    }
    if engine == "lightgbm":  # LightGBM's own predict of the trees the booster kept
        import lightgbm as lgb

        booster = lgb.Booster(model_str=model.model_text_)
        own = lambda X: booster.predict(X, raw_score=True, num_threads=args.threads)  # noqa: E731
    else:
        own = model.predict
    with _threads(args.threads):
        latency = _latency(own, rows["X_day"], args.calls)
    result |= {"rank_p50_ms": latency["p50_ms"], "rank_p99_ms": latency["p99_ms"]}
    if engine == "lightgbm":
        forest = model.forest()

        def walker(X: np.ndarray) -> np.ndarray:
            return forest.raw_predict(X).ravel()

        walker(rows["X_day"][:RANK_ROWS])  # compile outside the timing
        latency = _latency(walker, rows["X_day"], args.calls)
        result |= {"walker_p50_ms": latency["p50_ms"], "walker_p99_ms": latency["p99_ms"]}
        result["walker_equal"] = bool(np.array_equal(walker(rows["X_day"]), own(rows["X_day"])))
    return result


def _threads(n: int):
    from threadpoolctl import threadpool_limits

    return threadpool_limits(n)


def main() -> None:
    from leap_pipeline.simulation import SPAN_START

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--day", type=dt.date.fromisoformat, default=SPAN_START + dt.timedelta(31))
    parser.add_argument("--warehouse", default="", help="default: data/bench-<scale>.duckdb")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-iter", type=int, default=3000, help="the paper profile's trees")
    parser.add_argument("--calls", type=int, default=2000, help="20-row predictions timed")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)  # a child: one engine
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_engine(args.one, args)))
        return
    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"--engines: {unknown} not among {list(ENGINES)}")
    night_rows(args.scale, args.day, args.warehouse)  # land the days once, before the children
    results = []
    for engine in engines:
        print(f"{engine}: fitting ...", file=sys.stderr)
        child = [sys.executable, __file__, *sys.argv[1:], "--one", engine]
        done = subprocess.run(child, capture_output=True, text=True, env=os.environ | {
            "OMP_NUM_THREADS": str(args.threads)})  # fmt: skip
        if done.returncode:
            missing = "No module named" in done.stderr
            error = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
            results.append(
                {
                    "engine": engine,
                    "error": "not installed (pip install -e .[engines])" if missing else error,
                }
            )
            continue  # fmt: skip
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{engine}: {results[-1]['fit_s']} s, {results[-1]['trees']} trees, "
              f"w20 {results[-1]['w20']:.1%}", file=sys.stderr)  # fmt: skip
    fitted = [r for r in results if "fit_s" in r]
    if fitted:
        best = max(r["w20"] for r in fitted)
        eligible = [r for r in fitted if r["w20"] >= best - 0.005]
        fastest = min(eligible, key=lambda r: r["fit_s"])["engine"]
        for r in fitted:
            r["fastest_within_half_point"] = r["engine"] == fastest
    if args.json:
        print(json.dumps({"scale": args.scale, "day": args.day.isoformat(),
                          "threads": args.threads, "engines": results}))  # fmt: skip
    else:
        for r in results:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
