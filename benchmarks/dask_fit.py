"""The night's lone fits on a Dask cluster: whole fits as tasks against LightGBM's distributed
training, and against this process.

The night fits three models: the cascade, whose experts can already spread over joblib's
processes or a Dask cluster, and two fits that run alone, the single GBDT and the single GBDT on
the prior (one-bin cascades, each one LightGBM booster on every row). On the same window this
runs the night

- in this process (``fit_models`` with no cluster: the lone fits one after the other here),
- with the cluster (``parallel.expert_backend``: the experts through joblib's ``dask`` backend,
  each lone fit whole as one task on a worker, the two side by side),

then times the two lone fits alone by both routes on the cluster:

- route a, whole fits: each one-bin cascade one task on one worker, the two submitted at once;
- route b, data-parallel: each one's booster trained by ``lightgbm.dask.DaskLGBMRegressor``
  over every worker, its rows split between them and early stopping on the same held-out day
  (a copy on each worker, so they stop together), then turned into the ``GBDTRegressor`` the
  night publishes (its LightGBM text); one fit at a time, since LightGBM's Dask fits submitted
  together can hang.

Each model is scored on the evaluation day (w20, the share within 20%), and for each route the
selection picks the night's published model from its lone fits and the night's cascade.

With ``--json`` the result is the last line of the output (the workers' LightGBM prints its
network's start before it).

Run: python benchmarks/dask_fit.py [--scale 0.3] [--day 2026-01-31] [--profile fast]
     [--n-jobs -1] [--workers 2] [--repeat N] [--no-nights] [--warehouse PATH] [--json]
"""

import argparse
import datetime as dt
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import polars as pl

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.parallel import expert_backend, lone_fits
from leap_pipeline.modeling.selection import (
    fit_models,
    select_model,
    split_window,
    training_window,
    validation_rows,
)
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.simulation import SPAN_START
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.fitting import MIN_PRESENT, MIN_VALIDATION_ROWS
from leap_serving.model.profiles import profile_params


def load_rows(warehouse: Path, scale: float, day: dt.date) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The window before ``day`` and ``day``'s rows, materializing the days a warehouse lacks."""
    landed = set()
    if warehouse.exists():
        with open_warehouse(warehouse, read_only=True) as wh:
            landed = set(wh.partitions("feature_table"))
    first, last = training_window(day)
    first = max(first, SPAN_START)
    days = [first + dt.timedelta(days=i) for i in range((day - first).days + 1)]
    missing = [d for d in days if d not in landed]
    if missing:
        materialize_days(missing[0], day, source=f"simulator:seed=0,scale={scale}",
                         warehouse=str(warehouse), log_level="WARNING")  # fmt: skip
    with open_warehouse(warehouse, read_only=True) as wh:
        return wh.read("feature_table", first, last), wh.read("feature_table", day, day)


def _placed(client, parts: list[np.ndarray], workers: list[str]):
    """A Dask array of ``parts``, part i held by worker i."""
    import dask
    import dask.array as da

    futures = [
        client.scatter(p, workers=[w], hash=False) for p, w in zip(parts, workers, strict=True)
    ]
    return da.concatenate(
        [
            da.from_delayed(dask.delayed(f), p.shape, p.dtype)
            for f, p in zip(futures, parts, strict=True)
        ]
    )


def dask_fit_booster(client, estimator, X, y, validation=None, sample_weight=None):
    """``fitting.fit_booster`` with the booster trained by ``lightgbm.dask`` over every worker:
    the same empty-column rule and held-out rows, the trees turned into the ``GBDTRegressor``
    the night publishes."""
    import lightgbm as lgb
    from lightgbm.dask import DaskLGBMRegressor

    assert sample_weight is None and validation is not None  # what a one-bin cascade asks
    present = np.sum(~np.isnan(X), axis=0)
    empty = present < max(MIN_PRESENT, 0.01 * len(X))
    if empty.any():
        X = X.copy()
        X[:, empty] = 0.0
    train = ~validation
    assert validation.sum() >= MIN_VALIDATION_ROWS
    workers = sorted(client.scheduler_info()["workers"])
    split = np.array_split(np.flatnonzero(train), len(workers))
    X_train = _placed(client, [X[rows] for rows in split], workers)
    y_train = _placed(client, [y[rows] for rows in split], workers)
    # the whole held-out day on each worker: each scores the same (identical) model on the same
    # rows, so early stopping stops every worker at the same round
    X_val = _placed(client, [X[validation]] * len(workers), workers)
    y_val = _placed(client, [y[validation]] * len(workers), workers)
    params = estimator._params(0)
    params.pop("num_threads")  # lightgbm.dask takes each worker's threads
    model = DaskLGBMRegressor(client=client, n_estimators=estimator.max_iter, **params)
    stop = lgb.early_stopping(estimator.n_iter_no_change, first_metric_only=True, verbose=False,
                              min_delta=estimator.early_stopping_tol)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sklearn face's notes on parameter aliases
        model.fit(X_train, y_train, eval_set=[(X_val, y_val)], callbacks=[stop])
    booster = model.booster_
    kept = booster.best_iteration if booster.best_iteration > 0 else -1
    estimator.model_text_ = booster.model_to_string(num_iteration=kept)
    estimator.n_iter_ = booster.best_iteration if kept > 0 else booster.current_iteration()
    estimator.n_features_in_ = X.shape[1]
    estimator.validation_loss_ = np.asarray(next(iter(model.evals_result_["valid_0"].values())))
    estimator.machines_ = int(re.search(r"\[num_machines: (\d+)\]", estimator.model_text_)[1])
    return estimator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.3)
    parser.add_argument("--day", type=dt.date.fromisoformat, default=SPAN_START + dt.timedelta(30))
    parser.add_argument("--profile", default="fast", choices=("paper", "fast", "quick"))
    parser.add_argument("--n-jobs", type=int, default=-1, help="experts fitted at once, and "
                        "threads of a lone fit (joblib; -1: one per core or worker)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the "
                        "LocalCluster, one thread each")  # fmt: skip
    parser.add_argument("--warehouse", default="", help="default: data/bench-<scale>.duckdb")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the lone fits by "
                        "each route, interleaved (the median is reported)")  # fmt: skip
    parser.add_argument("--no-nights", dest="nights", action="store_false", help="time the "
                        "lone fits only, not the whole night in this process and on the "
                        "cluster (then no selection: no published model)")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from dask.distributed import Client, LocalCluster

    window, day_rows = load_rows(
        Path(args.warehouse or f"data/bench-{args.scale}.duckdb"), args.scale, args.day
    )
    X_day, q_day = day_rows.select(FEATURE_COLUMNS).to_numpy(), day_rows["throughput"].to_numpy()
    training, selection_rows = split_window(window)
    X, y = training.select(FEATURE_COLUMNS).to_numpy(), training["log_q"].to_numpy()
    held_out = validation_rows(training)
    X_sel = selection_rows.select(FEATURE_COLUMNS).to_numpy()
    q_sel = selection_rows["throughput"].to_numpy()
    params = profile_params(args.profile) | {"n_jobs": args.n_jobs}

    def w20(model) -> float:
        return round(100 * metrics.within(np.exp(model.predict(X_day)), q_day, 20), 2)

    def one_bins() -> dict[str, BinnedCascade]:  # the night's lone fits, as fit_models builds them
        one_bin = params | {"n_bins": 1}
        return {
            "single_gbdt": BinnedCascade(**one_bin),
            "single_gbdt_prior": BinnedCascade(**(one_bin | {"target": "residual"})),
        }

    def scores(fits: dict[str, BinnedCascade], cascade) -> dict:
        found = {
            **{f"w20_{name}": w20(model) for name, model in fits.items()},
            "trees": {name: int(m.experts_[0].n_iter_) for name, m in fits.items()},
        }
        if cascade is not None:  # the night's pick between its cascade and these lone fits
            prior = {"single_gbdt_prior": fits["single_gbdt_prior"]}
            selection = select_model(cascade, fits["single_gbdt"], X_sel, q_sel, challengers=prior)
            found |= {"published": selection["published"], "w20_published": w20(selection["model"])}
        return found

    def night(where: str) -> tuple[dict, object]:
        start = time.perf_counter()
        models = fit_models(window, args.day, profile=args.profile,
                            cascade_params={"n_jobs": args.n_jobs})  # fmt: skip
        found = {
            "night_wall_s": round(time.perf_counter() - start, 1),
            "model_s": {k: round(v, 1) for k, v in models.seconds.items()},
            "w20_cascade": w20(models.cascade),
            "w20_single_gbdt": w20(models.single_gbdt_booster),
            "published": models.selection["published"],
            "w20_published": w20(models.published),
        }
        print(f"{where} night: {found}", file=sys.stderr)
        return found, models

    def in_process() -> dict[str, BinnedCascade]:  # one after the other, here
        fits = one_bins()
        for model in fits.values():
            model.fit(X, y, validation=held_out)
        return fits

    def whole_fits() -> dict[str, BinnedCascade]:  # route a, inside expert_backend
        return {name: model for name, model, _ in lone_fits(one_bins(), X, y, held_out).results()}

    def data_parallel(client) -> dict[str, BinnedCascade]:  # route b, one fit at a time
        fits = one_bins()
        booster = lambda *a, **k: dask_fit_booster(client, *a, **k)  # noqa: E731
        with mock.patch("leap_serving.model.em.fit_booster", booster):
            for model in fits.values():
                model.fit(X, y, validation=held_out)
        return fits

    result = {"scale": args.scale, "profile": args.profile, "day": args.day.isoformat(),
              "training_rows": len(y), "evaluation_rows": len(q_day), "n_jobs": args.n_jobs,
              "workers": args.workers, "repeat": args.repeat}  # fmt: skip
    cascade = None
    if args.nights:
        result["in_process_night"], here = night("in-process")
        cascade = here.cascade
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                           dashboard_address=None)  # fmt: skip
    try:
        with expert_backend(cluster.scheduler_address), Client(cluster) as client:
            if args.nights:
                result["cluster_night"], there = night("cluster")
                result["cluster_night"]["same_predictions_as_in_process"] = bool(
                    np.array_equal(there.published.predict(X_day), here.published.predict(X_day))
                )
            routes = {
                "in_process_lone_fits": in_process,
                "route_a_whole_fits": whole_fits,
                "route_b_data_parallel": lambda: data_parallel(client),
            }
            seconds = {name: [] for name in routes}
            load = {name: [] for name in routes}  # the machine's, others' work included
            fitted = {}
            for round_ in range(args.repeat):  # interleaved, each round in another order
                names = list(routes)[round_ % 3 :] + list(routes)[: round_ % 3]
                for name in names:
                    start = time.perf_counter()
                    fitted[name] = routes[name]()
                    seconds[name].append(round(time.perf_counter() - start, 1))
                    load[name].append(round(os.getloadavg()[0], 1))
                    print(f"{name}: {seconds[name][-1]} s", file=sys.stderr)
    finally:
        cluster.close()
    for name, fits in fitted.items():
        result[name] = {
            "lone_fits_wall_s": seconds[name],
            "load_1min_after": load[name],
            "median_s": float(np.median(seconds[name])),
            **scores(fits, cascade),
            "same_models_as_in_process": all(
                np.array_equal(m.predict(X_day), fitted["in_process_lone_fits"][n].predict(X_day))
                for n, m in fits.items()
            ),
        }
    result["route_b_data_parallel"]["machines"] = [
        m.experts_[0].machines_ for m in fitted["route_b_data_parallel"].values()
    ]
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:22} {value}")


if __name__ == "__main__":
    main()
