"""Latency of one ``Ranker.rank`` call against the naive path, in one process.

Trains (once, cached under data/bench-models/) a paper-profile model on a small simulated
window unless --model names a model folder, then measures over thousands of calls: ``rank``
with 8 and 20 candidates (p50, p99), its model time alone (the compiled trees), model load time
and memory, and the other paths on the same rows: MLflow pyfunc ``predict`` on a data frame (the
compiled trees, behind pandas frames; ``naive_pyfunc``), and LightGBM's own ``predict`` of the
cascade's boosters (``naive_lightgbm``); for 20 candidates, ``rank`` and model time over
96 distinct launches in turn (``distinct_launches_20``: the same job on every call lets the
CPU learn its path through the trees), and under each gating of the same cascade against the
path before soft gating (``gating_20``, with each gating's ``rank`` as a ratio of that
baseline's); ``intervals_20``: ``rank`` over the same distinct launches with the model's
conformal intervals and without them, interleaved, and their ratio.

``--cascade single`` measures the one-bin model, the single GBDT, which is what a night publishes
when the selection keeps it; ``trees_tradeoff_20`` then keeps the first half, quarter and tenth
of its trees and prints, for each, the trees kept, w20 on the day after the training
window (for the model the benchmark trains) and the model time of 20 candidates over the
distinct launches: what a user gives up in accuracy for a p99 under 1 ms.

Run: python benchmarks/rank_latency.py [--model FOLDER] [--cascade default|paper|single]
     [--calls 3000] [--json]
"""

import argparse
import copy
import dataclasses
import datetime as dt
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.array(samples) * 1e3
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3)}  # fmt: skip


class LightGBMCascade:
    """The cascade's prediction through LightGBM's own ``Booster.predict`` on each booster's
    text: what serving would cost without the compiled walk."""

    def __init__(self, cascade) -> None:
        import lightgbm as lgb

        self.cascade = cascade
        self.experts = [lgb.Booster(model_str=e.model_text_) for e in cascade.experts_]
        classifier = cascade.classifier_
        self.classifier = (
            None if classifier is None else lgb.Booster(model_str=classifier.model_text_)
        )

    def predict(self, X: np.ndarray) -> np.ndarray:
        from leap_serving.model.gating import bin_probabilities, gate

        c = self.cascade
        if self.classifier is None:
            proba = np.ones((len(X), 1))
        else:
            raw = self.classifier.predict(X, raw_score=True, num_threads=1)
            proba = bin_probabilities(raw, c.classifier_.classes_, c.n_bins_, c.temperature_)
        return c.offset(X) + gate(
            proba,
            lambda b, rows: self.experts[b].predict(X[rows], raw_score=True, num_threads=1),
            c.gating, c.gate_top_k,
        )  # fmt: skip


class PerBinArgmax:
    """The serving path before soft gating (b58483d): the classifier, then, for each bin some
    row chose, that bin's expert on those rows. The baseline each gating is compared with."""

    def __init__(self, cascade) -> None:
        from leap_serving.model.compiled import CompiledCascade

        self.compiled = CompiledCascade(copy.copy(cascade).set_params(gating="argmax"))
        self.experts = [expert.forest() for expert in cascade.experts_]

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        X = np.ascontiguousarray(X, dtype=np.float64)
        bins, probability = self.compiled.predict_bins(X)
        log_q = np.empty(len(X))
        for b in np.unique(bins):
            rows = bins == b
            log_q[rows] = self.experts[b].raw_predict(X[rows])[:, 0]
        return log_q, bins, probability


def distinct_jobs(job: dict) -> list[dict]:
    """The example job at 4 trainer counts, 4 batch sizes, 3 precisions, under its own name and
    a new one (a cold start): 96 launches."""
    jobs = []
    for trainers in (1, 2, 4, 8):
        for scale in (1, 2, 4, 8):
            for precision in ("bf16", "fp16", "fp32"):
                for name in (job["job_name"], f"new_family_{trainers}_{scale}_{precision}"):
                    jobs.append(job | {"num_trainers": trainers, "precision": precision,
                                       "batch_size": job["batch_size"] * scale // 2,
                                       "job_name": name})  # fmt: skip
    return jobs


def checked(ranker, job: dict, candidates: list[str]) -> dict:
    """The launch as the ranker types it."""
    from leap_serving.decide.launch_fields import check_job

    return check_job(job, candidates, ranker._loaded, None)[0]


def paper_model(scale: float, cascade: str) -> Path:
    """A paper-profile model trained on a 30-day window of a small fleet, cached. ``cascade``:
    ``default`` (the cascade the pipeline trains), ``paper`` (the paper's 13 bins, argmax) or
    ``single`` (one bin: the single GBDT)."""
    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.modeling.night_store import save_trained
    from leap_pipeline.modeling.selection import fit_models, training_window
    from leap_pipeline.orchestration.definitions import materialize_days
    from leap_pipeline.simulation import SPAN_START
    from leap_serving.launch.features import FEATURE_COLUMNS, PRIOR_COLUMNS
    from leap_serving.model.cascade import BinnedCascade
    from leap_serving.model.profiles import PAPER_CASCADE, profile_params

    root = Path("data") / "bench-models" / f"paper-{scale}" / cascade
    settings = {"paper": PAPER_CASCADE, "single": {"n_bins": 1}}.get(cascade, {})
    night = root / "night"
    # the cache holds while the features, the history prior's order and the paper profile's
    # cascade are what the code has (a model recording another of the first two is refused)
    key = {"feature_columns": list(FEATURE_COLUMNS), "prior_columns": list(PRIOR_COLUMNS),
           "cascade": BinnedCascade(**profile_params("paper") | settings).get_params(),
           "ships": ["intervals"]}  # fmt: skip
    stamp = root / "key.json"
    if (night / "cascade").exists() and stamp.exists() and json.loads(stamp.read_text()) == key:
        return night / "cascade"
    if root.exists():
        print(f"the cached model in {root} predates the current code: retraining")
        shutil.rmtree(root)
    day = SPAN_START + dt.timedelta(days=31)
    warehouse = root / "leap.duckdb"
    materialize_days(SPAN_START, day, source=f"simulator:seed=0,scale={scale}",
                     warehouse=str(warehouse), log_level="WARNING")  # fmt: skip
    first, last = training_window(day)
    with open_warehouse(warehouse, read_only=True) as wh:
        start = time.perf_counter()
        models = fit_models(wh.read("feature_table", first, last), day, profile="paper",
                            cascade_params=settings)  # fmt: skip
        print(f"trained the paper-profile model in {time.perf_counter() - start:.0f} s")
        # the cascade's serving cost is what is measured, whichever model the selection chose
        models = dataclasses.replace(models, published=models.cascade)
        save_trained(models, night, wh.read("history_snapshot", day, day).drop("ds"),
                     wh.read("hardware_specs", day, day).drop("ds"), "paper")  # fmt: skip
    stamp.write_text(json.dumps(key))
    return night / "cascade"


def truncated(cascade, keep: int):
    """A copy of ``cascade`` whose experts keep their first ``keep`` boosting iterations (what
    early stopping at ``keep`` would have left), the classifier untouched."""
    from leap_serving.model.lgb_text import forest_from_text

    cut = copy.copy(cascade)
    experts = []
    for expert in cascade.experts_:
        short = copy.copy(expert)
        short.__dict__["_forest"] = forest_from_text(expert.model_text_, keep)
        short.n_iter_ = min(keep, expert.n_iter_)
        experts.append(short)
    cut.experts_ = experts
    return cut


def warehouse_beside(folder: Path) -> Path | None:
    """The warehouse a model folder ``ROOT/night/cascade`` lies beside (``ROOT/leap.duckdb``:
    this benchmark's own model, or one saved by ``train_cascade.py --save``), if there is one."""
    parents = folder.resolve().parents
    warehouse = parents[1] / "leap.duckdb" if len(parents) > 1 else None
    return warehouse if warehouse is not None and warehouse.exists() else None


def trees_tradeoff(model, matrices: list, calls: int, warehouse: Path | None) -> list[dict]:
    """Per number of trees kept: trees, w20 on the day after the window (where a ``warehouse``
    holds that day) and the compiled model time of 20 candidates."""
    from leap_pipeline.data.warehouse import open_warehouse
    from leap_serving.decide import metrics
    from leap_serving.launch.features import FEATURE_COLUMNS
    from leap_serving.model.compiled import CompiledCascade

    rows = None
    if warehouse is not None:
        day = model.history_index.last_ds
        with open_warehouse(warehouse, read_only=True) as wh:
            rows = wh.read("feature_table", day, day)
    out = []
    full = max(e.n_iter_ for e in model.cascade.experts_)
    for keep in sorted({max(1, round(full * share)) for share in (1, 1 / 2, 1 / 4, 1 / 10)},
                       reverse=True):  # fmt: skip
        cascade = truncated(model.cascade, keep)
        compiled = CompiledCascade(cascade)
        compiled.predict(matrices[0])  # compiled and warm before timing
        timing = []
        for i in range(calls):
            t = time.perf_counter()
            compiled.predict(matrices[i % len(matrices)])
            timing.append(time.perf_counter() - t)
        entry = {"trees": compiled.n_trees, **percentiles(timing)}
        if rows is not None:
            X = rows.select(FEATURE_COLUMNS).to_numpy()
            predicted = np.exp(compiled.predict(X)[0])
            entry["w20"] = round(metrics.within(predicted, rows["throughput"].to_numpy(), 20), 4)
        out.append(entry)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="a model folder (default: train one)")
    parser.add_argument("--scale", type=float, default=0.05, help="fleet scale to train on")
    parser.add_argument(
        "--cascade", choices=("default", "paper", "single"), default="default",
        help="ours, the paper's (13 bins, argmax), or one bin: the single GBDT",
    )  # fmt: skip
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(args.model) if args.model else paper_model(args.scale, args.cascade)

    from leap_serving.decide.ranker import Ranker
    from leap_serving.launch.features import expand_candidates, launch_features, launch_matrix
    from leap_serving.launch.rows import CandidateRows

    before = rss_mb()
    start = time.perf_counter()
    ranker = Ranker(str(folder), check_interval_s=float("inf"), wait=True)
    load_s = time.perf_counter() - start
    loaded = ranker._loaded
    if loaded is None:
        raise SystemExit(f"model at {folder} did not load: {ranker._load_error}")
    model = loaded.model
    snapshot_day = model.history_index.last_ds
    example = json.loads((Path(__file__).parents[1] / "examples" / "job.json").read_text())
    example.pop("candidates")
    job = {**example, "ds": (snapshot_day + dt.timedelta(days=1)).isoformat()}
    types = list(loaded.specs)
    result = {
        "model": str(folder),
        "gating": loaded.compiled.gating,
        "bins": loaded.compiled.n_bins,
        "trees": loaded.compiled.n_trees,
        "classifier_trees": loaded.compiled.classifier.n_trees if loaded.compiled.classifier else 0,
        "load_s": round(load_s, 2),
        "load_rss_mb": round(rss_mb() - before),
    }

    import mlflow.pyfunc

    from leap_serving.model.published import ARTIFACTS, check_artifacts
    from leap_serving.registry import mlflow_model, pyfunc

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pyfunc"
        artifacts = {k: str(folder.resolve() / f) for k, f in ARTIFACTS.items()}
        mlflow.pyfunc.save_model(
            path, python_model=mlflow_model.__file__, artifacts=artifacts,
            code_paths=pyfunc.code_paths(),
            model_config=pyfunc.model_config(check_artifacts(artifacts)["files"]),
        )  # fmt: skip
        start = time.perf_counter()
        pyfunc = mlflow.pyfunc.load_model(str(path))
        result["naive_load_s"] = round(time.perf_counter() - start, 2)

        lightgbm = LightGBMCascade(model.cascade)
        for n in (8, 20):
            candidates = types[:n]
            assert ranker.rank(job, candidates).reason is None
            rows = expand_candidates(job | {"ds": dt.date.fromisoformat(job["ds"])}, candidates)
            X = launch_features(rows, model.hardware_specs, model.history_index).to_numpy()
            frame = rows.to_pandas()
            timings = {"rank": [], "model_time": [], "naive_pyfunc": [], "naive_lightgbm": []}
            for _ in range(args.calls):
                t = time.perf_counter()
                ranker.rank(job, candidates)
                timings["rank"].append(time.perf_counter() - t)
                t = time.perf_counter()
                loaded.compiled.predict(X)
                timings["model_time"].append(time.perf_counter() - t)
            naive_calls = max(50, args.calls // 20)  # the naive paths are slow: fewer calls
            for _ in range(naive_calls):
                t = time.perf_counter()
                pyfunc.predict(frame)
                timings["naive_pyfunc"].append(time.perf_counter() - t)
                t = time.perf_counter()
                lightgbm.predict(X)
                timings["naive_lightgbm"].append(time.perf_counter() - t)
            stats = {k: percentiles(v) for k, v in timings.items()}
            stats["speedup_p50_vs_pyfunc"] = round(
                stats["naive_pyfunc"]["p50_ms"] / stats["rank"]["p50_ms"], 1
            )
            result[f"candidates_{n}"] = stats
    # The same job on every call flatters a tree walk: the CPU's branch predictors learn its
    # path through the trees (the model's time on one repeated input is about half its time on
    # inputs that change). Distinct launches, as a launcher sends them: the example job at
    # other scales and precisions and under another name, 96 in all, in turn. Model time is
    # the next launch's rows, not the rows the ranking just walked.
    candidates = types[:20]
    jobs = distinct_jobs(job)
    matrices = [launch_matrix(CandidateRows([(checked(ranker, j, candidates), candidates)]),
                              model.spec_table, model.history_index) for j in jobs]  # fmt: skip
    timings = {"rank": [], "model_time": []}
    for i in range(args.calls):
        k = i % len(jobs)
        t = time.perf_counter()
        ranking = ranker.rank(jobs[k], candidates)
        timings["rank"].append(time.perf_counter() - t)
        t = time.perf_counter()
        loaded.compiled.predict(matrices[(k + 1) % len(jobs)])
        timings["model_time"].append(time.perf_counter() - t)
        assert ranking.reason is None, ranking.reason
    result["distinct_launches_20"] = {"launches": len(jobs)} | {
        k: percentiles(v) for k, v in timings.items()
    }
    # the conformal intervals' cost: the same distinct launches ranked with the model's
    # intervals and without them, calls interleaved so drift and contention fall on both alike
    if model.intervals is None:
        result["intervals_20"] = {"error": "the model has no intervals: train it again"}
    else:
        intervals, timings = model.intervals, {"with": [], "without": []}
        try:
            for i in range(args.calls):
                for name in ("with", "without"):
                    model.intervals = intervals if name == "with" else None
                    t = time.perf_counter()
                    ranker.rank(jobs[i % len(jobs)], candidates)
                    timings[name].append(time.perf_counter() - t)
        finally:
            model.intervals = intervals
        stats = {k: percentiles(v) for k, v in timings.items()}
        stats["ratio"] = {k: round(stats["with"][k] / stats["without"][k], 3)
                          for k in ("p50_ms", "p99_ms")}  # fmt: skip
        result["intervals_20"] = stats
    # each gating of the same cascade against the path before soft gating, calls interleaved so
    # drift and contention fall on all alike: rank and model time for 20 candidates
    from leap_serving.model.compiled import CompiledCascade
    from leap_serving.model.gating import GATINGS

    saved = loaded.compiled
    candidates = types[:20]
    rows = expand_candidates(job | {"ds": dt.date.fromisoformat(job["ds"])}, candidates)
    X = launch_features(rows, model.hardware_specs, model.history_index).to_numpy()
    paths = {"per_bin_argmax": PerBinArgmax(model.cascade)} | {
        gating: CompiledCascade(copy.copy(model.cascade).set_params(gating=gating))
        for gating in GATINGS
    }
    timings = {name: {"rank": [], "model_time": []} for name in paths}
    try:
        for _ in range(args.calls):
            for name, compiled in paths.items():
                object.__setattr__(loaded, "compiled", compiled)
                t = time.perf_counter()
                ranker.rank(job, candidates)
                timings[name]["rank"].append(time.perf_counter() - t)
                t = time.perf_counter()
                compiled.predict(X)
                timings[name]["model_time"].append(time.perf_counter() - t)
    finally:
        object.__setattr__(loaded, "compiled", saved)
    result["gating_20"] = {
        name: {k: percentiles(v) for k, v in timing.items()} for name, timing in timings.items()
    }
    baseline = result["gating_20"]["per_bin_argmax"]["rank"]
    for name in GATINGS:
        rank = result["gating_20"][name]["rank"]
        rank["vs_per_bin_argmax"] = {
            k: round(rank[k] / baseline[k], 3) for k in ("p50_ms", "p99_ms")
        }
    if args.cascade == "single":
        # w20 where the model's warehouse lies beside it (the benchmark's own model, or one
        # saved by ``train_cascade.py --save``)
        result["trees_tradeoff_20"] = trees_tradeoff(
            model, matrices, args.calls, warehouse_beside(folder)
        )
    result["rss_mb"] = round(rss_mb())
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
