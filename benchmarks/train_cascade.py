"""Train one night on a full-scale window and print where the time goes.

Materializes the simulated fleet's days up to the evaluation day that a benchmark warehouse
lacks, then runs a night's training (``selection.fit_models``: the cascade, the single GBDT,
the single GBDT on the prior, the lookup table and the selection) on the 30 days before it with
one profile, and scores the models on the evaluation day. ``--serial-baseline`` then fits the
night's cascade again the slow way (one expert at a time, EM and the classifier on every row)
to compare.

Run: python benchmarks/train_cascade.py [--scale 1.0] [--profile paper] [--n-jobs N]
     [--dask local|ADDRESS] [--em-sample S] [--classifier-sample S] [--subsample S]
     [--feature-fraction F] [--learning-rate R] [--early-stopping-tol T]
     [--serial-baseline] [--save DIR] [--json]

A lever left out takes the profile's value; the JSON names every value the night used.
"""

import argparse
import datetime as dt
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl

from leap_pipeline.app.cli import progress_on_stderr
from leap_pipeline.data.feature_table import discard_stale_warehouse
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.night_store import save_trained
from leap_pipeline.modeling.parallel import expert_backend
from leap_pipeline.modeling.selection import fit_models, training_window, validation_rows
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.simulation import SPAN_START
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.profiles import profile_params

# the speed levers a run may set, each reported with the value the night used
LEVERS = ("em_sample", "classifier_sample", "subsample", "feature_fraction", "learning_rate",
          "early_stopping_tol")  # fmt: skip


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class TreeMemory:
    """The peak resident memory of this process and every process under it (joblib's workers
    hold copies of the rows), sampled each ``interval_s`` from /proc."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval_s,), daemon=True)

    def __enter__(self) -> "TreeMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self, interval_s: float) -> None:
        page_mb = resource.getpagesize() / 2**20
        while not self._stop.wait(interval_s):
            parents, pages = {}, {}
            for entry in Path("/proc").iterdir():
                try:
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    pages[int(entry.name)] = int((entry / "statm").read_text().split()[1])
                    parents[int(entry.name)] = int(stat[1])
                except (ValueError, OSError, IndexError):
                    continue
            tree, frontier = set(), {os.getpid()}
            while frontier:
                tree |= frontier
                frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - tree
            self.peak_mb = max(self.peak_mb, sum(pages.get(pid, 0) for pid in tree) * page_mb)


def early_stop_trees(scores: np.ndarray, n_iter_no_change: int, tol: float) -> int:
    """Trees a fit would have kept had early stopping used ``tol``: LightGBM's rule replayed on
    the held-out scores it recorded (higher is better, the first before any tree). A round is
    the new best only if it beats the best so far by more than ``tol``; the fit stops
    ``n_iter_no_change`` rounds after the best and keeps the trees up to it."""
    best, best_trees = -np.inf, 0
    for trees in range(1, len(scores)):
        if scores[trees] > best + tol:  # the first round always is: best starts at -inf
            best, best_trees = scores[trees], trees
        elif trees - best_trees >= n_iter_no_change:
            break
    return best_trees


def tree_curve(booster, X: np.ndarray, q: np.ndarray, every: int = 100) -> dict:
    """Where a booster's trees go: its held-out loss and the evaluation day's w20 every
    ``every`` trees, and the trees it would keep under larger early-stopping tolerances."""
    from leap_serving.model.lgb_text import forest_from_text

    if not len(booster.validation_loss_):  # trained without early stopping: no held-out loss
        return {}
    scores = np.concatenate([[-np.inf], -booster.validation_loss_])  # none before any tree
    trees = sorted({*range(every, booster.n_iter_ + 1, every), booster.n_iter_})
    w20 = []
    for n in trees:
        log_q = forest_from_text(booster.model_text_, n).predict_many(X, 2)
        w20.append(round(metrics.within(np.exp(log_q), q, 20), 4))
    return {
        "trees": trees,
        "validation_loss": [round(-float(scores[n]), 5) for n in trees],
        "w20": w20,
        "trees_at_tol": {
            tol: early_stop_trees(scores, booster.n_iter_no_change, tol)
            for tol in (5e-5, 1e-4, 2e-4, 5e-4)
            if tol > booster.early_stopping_tol  # a smaller one: the curve was already cut
        },
    }


def save_night(night, folder: Path, warehouse: Path, day: dt.date, profile: str) -> None:
    """The night's models as the pipeline publishes them, with day D's history snapshot and
    spec table, and the warehouse linked beside them (rank_latency scores the trees it keeps)."""
    with open_warehouse(warehouse, read_only=True) as wh:
        snapshot = wh.read("history_snapshot", day, day).drop("ds")
        specs = wh.read("hardware_specs", day, day).drop("ds")
    save_trained(night, folder / "night", snapshot, specs, profile)
    link = folder / "leap.duckdb"  # replaced: a link left by a run on another warehouse
    link.unlink(missing_ok=True)
    link.symlink_to(warehouse.resolve())
    print(f"saved the night's models under {folder / 'night'}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--profile", default="paper", choices=("paper", "fast"))
    parser.add_argument("--day", type=dt.date.fromisoformat, default=SPAN_START + dt.timedelta(31))
    parser.add_argument("--warehouse", default="", help="default: data/bench-<scale>.duckdb")
    parser.add_argument("--n-jobs", type=int, default=-1, help="experts fitted at once, and "
                        "threads of a lone fit (joblib; -1: one per core)")  # fmt: skip
    parser.add_argument("--dask", default="", help="fit the experts on this Dask scheduler "
                        "address, or 'local' for a cluster on this machine")  # fmt: skip
    parser.add_argument(
        "--em-sample",
        type=float,
        default=None,
        help="share of rows the experts fit during EM, the refit uses all (default: the profile's)",
    )
    parser.add_argument(
        "--classifier-sample",
        type=float,
        default=None,
        help="share of each bin's rows the bin classifier fits (default: the profile's)",
    )
    parser.add_argument("--subsample", type=float, default=None,
                        help="share of rows each tree of every model grows on (default: the "
                        "profile's)")  # fmt: skip
    parser.add_argument(
        "--feature-fraction",
        type=float,
        default=None,
        help="share of columns each tree grows on (default: the profile's)",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="every regressor's learning rate (default: the profile's)",
    )
    parser.add_argument(
        "--early-stopping-tol",
        type=float,
        default=None,
        help="an expert stops once 20 rounds gain less held-out error than this (default: "
        "the profile's)",
    )
    parser.add_argument("--serial-baseline", action="store_true",
                        help="also fit the cascade the slow way (one expert at a time, EM and "
                        "the classifier on every row, the night's other levers), in this "
                        "process, and print the speed-up, its w20 and whether its "
                        "predictions equal the night's (only if it samples no rows)")  # fmt: skip
    parser.add_argument("--save", default="", help="publish the night's models under "
                        "SAVE/night (the published model in SAVE/night/cascade, for "
                        "rank_latency.py --model) beside a link SAVE/leap.duckdb to the "
                        "warehouse")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    warehouse = Path(args.warehouse or f"data/bench-{args.scale}.duckdb")
    source = f"simulator:seed=0,scale={args.scale}"

    if not args.warehouse and discard_stale_warehouse(warehouse):
        print(f"removed {warehouse}: it was built with other features", file=sys.stderr)
    start = time.perf_counter()
    landed = set()
    if warehouse.exists():
        with open_warehouse(warehouse, read_only=True) as wh:
            landed = set(wh.partitions("feature_table"))
    days = [SPAN_START + dt.timedelta(days=i) for i in range((args.day - SPAN_START).days + 1)]
    missing = [day for day in days if day not in landed]
    if missing:  # from the first day it lacks: a full-scale fleet takes minutes a day to land
        materialize_days(missing[0], args.day, source=source, warehouse=str(warehouse),
                         log_level="WARNING")  # fmt: skip
    materialize_s = time.perf_counter() - start
    first, last = training_window(args.day)
    with open_warehouse(warehouse, read_only=True) as wh:
        window = wh.read("feature_table", first, last)
        held_out = wh.read("feature_table", args.day, args.day)
    X_day, q_day = held_out.select(FEATURE_COLUMNS).to_numpy(), held_out["throughput"].to_numpy()

    params = profile_params(args.profile)
    levers = {"n_jobs": args.n_jobs}
    for name in LEVERS:
        if getattr(args, name) is not None:
            levers[name] = getattr(args, name)
    start = time.perf_counter()
    with progress_on_stderr(), expert_backend(args.dask), TreeMemory() as memory:
        night = fit_models(window, args.day, profile=args.profile, cascade_params=levers)
    night_s = time.perf_counter() - start
    cascade = night.cascade

    def w20(model) -> float:
        return metrics.within(np.exp(model.predict(X_day)), q_day, 20)

    baseline = {}
    if args.serial_baseline:  # the night's cascade again, the slow way, on the same rows
        training = window.filter(pl.col("ds") < window["ds"].max())
        X, y = training.select(FEATURE_COLUMNS).to_numpy(), training["log_q"].to_numpy()
        start = time.perf_counter()
        slow = params | levers | {"n_jobs": 1, "em_sample": 1.0, "classifier_sample": 1.0}
        serial = BinnedCascade(**slow).fit(X, y, validation=validation_rows(training))
        serial_s = time.perf_counter() - start
        baseline = {
            "serial_wall_s": round(serial_s, 1),
            "serial_phase_s": {k: round(v, 1) for k, v in serial.fit_seconds_.items()},
            "speedup": round(serial_s / night.seconds["cascade"], 2),
            "serial_w20_cascade": w20(serial),
            "identical_predictions": bool(
                np.array_equal(serial.predict(X_day), cascade.predict(X_day))
            ),
        }
    result = {
        "scale": args.scale,
        "profile": args.profile,
        "training_rows": night.training_rows,
        "evaluation_rows": len(q_day),
        "materialize_s": round(materialize_s, 1),
        "wall_s": round(night_s, 1),  # the whole night: the three models, lookup, selection
        "model_s": {k: round(v, 1) for k, v in night.seconds.items()},
        "phase_s": {k: round(v, 1) for k, v in cascade.fit_seconds_.items()},
        "peak_rss_mb": round(peak_rss_mb()),
        "peak_tree_rss_mb": round(memory.peak_mb),  # with the workers, during the night's fits
        "em_iterations": cascade.em_iterations_,
        "rows_moved": [round(m, 4) for m in cascade.rows_moved_],
        "trees_per_expert": cascade.n_trees_per_expert_,
        "classifier_rounds": int(cascade.classifier_.n_iter_) if cascade.classifier_ else 0,
        "single_gbdt_trees": int(night.single_gbdt_booster.n_iter_),
        "published": night.selection["published"],
        "w20_cascade": w20(cascade),
        "w20_single_gbdt": w20(night.single_gbdt_booster),
        "w20_published": w20(night.published),
        "single_gbdt_curve": tree_curve(night.single_gbdt_booster, X_day, q_day),
        **{k: cascade.get_params()[k] for k in LEVERS},  # the values the night used
        "n_jobs": args.n_jobs,
        "dask": args.dask,
        **baseline,
    }
    if args.save:
        save_night(night, Path(args.save), warehouse, args.day, args.profile)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:20} {value}")


if __name__ == "__main__":
    main()
