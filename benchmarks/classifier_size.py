"""What the bin classifier's size costs in next-day accuracy and buys in serving time.

The bin classifier is most of a paper-profile model's trees (one per bin per round), so it is most
of a ranking's time. For each night this fits the paper-profile cascade once, then refits only its
bin classifier under each setting, on the same rows and the same final bins, and scores the
cascade with each classifier on the next day: w20, the classifier's trees and nodes, its fit
time and the compiled classifier's time on 20 rows (p50, p99). Settings are leaves:learning
rate; the classifier early-stops on the window's last day, as in training.

Run: python benchmarks/classifier_size.py [--scale 0.05] [--nights 3]
     [--settings 63:0.05,31:0.1,15:0.2] [--json]
"""

import argparse
import copy
import datetime as dt
import json
import time
from pathlib import Path

import numpy as np

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.selection import training_window, validation_rows
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.simulation import SPAN_START
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.compiled import CompiledCascade
from leap_serving.model.profiles import profile_params


class RecordingCascade(BinnedCascade):
    """A cascade that keeps what its bin classifier was fitted on, to refit it alone."""

    def _fit_classifier(self, X, bins, n_bins, validation, progress=None, units=0.0):
        self.classifier_inputs_ = (X, bins, n_bins, validation)
        return super()._fit_classifier(X, bins, n_bins, validation, progress, units)


def with_classifier(cascade: RecordingCascade, leaves: int, rate: float) -> tuple:
    """The cascade with its bin classifier refitted at ``leaves`` and ``rate``, and the fit's
    seconds."""
    variant = copy.copy(cascade).set_params(
        classifier_max_leaf_nodes=leaves, classifier_learning_rate=rate
    )
    X, bins, n_bins, validation = cascade.classifier_inputs_
    start = time.perf_counter()
    variant.classifier_ = variant._fit_classifier(X, bins, n_bins, validation)
    variant.temperature_ = variant._calibrate(X, bins, validation)
    return variant, time.perf_counter() - start


def classifier_latency(cascade: BinnedCascade, X: np.ndarray, calls: int) -> dict[str, float]:
    compiled = CompiledCascade(cascade)
    rng = np.random.default_rng(0)
    batches = [np.ascontiguousarray(X[rng.choice(len(X), 20)]) for _ in range(50)]
    compiled.predict_proba_bins(batches[0])
    seconds = []
    for i in range(calls):
        start = time.perf_counter()
        compiled.predict_proba_bins(batches[i % len(batches)])
        seconds.append(time.perf_counter() - start)
    ms = np.array(seconds) * 1e3
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--nights", type=int, default=3)
    parser.add_argument("--settings", default="63:0.05,31:0.1,15:0.2,7:0.3")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    settings = [(int(a), float(b)) for a, b in (s.split(":") for s in args.settings.split(","))]
    days = [SPAN_START + dt.timedelta(days=31 + 2 * i) for i in range(args.nights)]
    warehouse = Path(f"data/bench-{args.scale}.duckdb")
    materialize_days(SPAN_START, days[-1], source=f"simulator:seed=0,scale={args.scale}",
                     warehouse=str(warehouse), log_level="WARNING")  # fmt: skip
    rows = []
    for day in days:
        first, last = training_window(day)
        with open_warehouse(warehouse, read_only=True) as wh:
            window = wh.read("feature_table", first, last)
            held_out = wh.read("feature_table", day, day)
        X, y = window.select(FEATURE_COLUMNS).to_numpy(), window["log_q"].to_numpy()
        X_day = held_out.select(FEATURE_COLUMNS).to_numpy()
        q_day = held_out["throughput"].to_numpy()
        start = time.perf_counter()
        cascade = RecordingCascade(**profile_params("paper")).fit(
            X, y, validation=validation_rows(window)
        )
        fit_s = time.perf_counter() - start
        for leaves, rate in settings:
            variant, classifier_s = with_classifier(cascade, leaves, rate)
            classifier = variant.classifier_
            rows.append({
                "day": day.isoformat(),
                "leaves": leaves,
                "learning_rate": rate,
                "w20_cascade": metrics.within(np.exp(variant.predict(X_day)), q_day, 20),
                "classifier_rounds": int(classifier.n_iter_),
                "classifier_trees": classifier.forest().n_trees,
                "classifier_nodes": len(classifier.forest().nodes),
                "classifier_fit_s": round(classifier_s, 1),
                "cascade_fit_s": round(fit_s, 1),
                "classifier_20_rows": classifier_latency(variant, X_day, args.calls),
            })  # fmt: skip
            print(json.dumps(rows[-1]) if args.json else rows[-1], flush=True)
    summary = {}
    for leaves, rate in settings:
        mine = [r for r in rows if (r["leaves"], r["learning_rate"]) == (leaves, rate)]
        summary[f"{leaves}:{rate}"] = {
            "mean_w20_cascade": round(float(np.mean([r["w20_cascade"] for r in mine])), 4),
            "mean_trees": round(float(np.mean([r["classifier_trees"] for r in mine]))),
            "mean_fit_s": round(float(np.mean([r["classifier_fit_s"] for r in mine])), 1),
            "mean_p99_ms": round(
                float(np.mean([r["classifier_20_rows"]["p99_ms"] for r in mine])), 3
            ),
        }
    print(json.dumps({"summary": summary}) if args.json else json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
