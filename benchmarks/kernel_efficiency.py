"""How well a GPU's per-operator efficiency is learned from other GPUs' kernels.

The kernel model (``leap_serving.launch.kernel_efficiency``) is fitted on NeuSight's training
kernels (``public-data/neusight-kernels``) and scored on a GPU whose kernels it never saw:

- ``leave-gpu-out``: each of NeuSight's five training GPUs in turn, its kernels (training and
  test shapes) excluded from the fit, scored on its test shapes;
- ``neusight-test``: fitted on all five, scored on NeuSight's test shapes of every GPU, the
  three it never trained on (H100, L4, A100 80GB) among them.

Per GPU and operator class (matmul; the memory-bound rest), MdAPE and w20 of the latency, beside
the roofline alone (efficiency 1) and each operator's median efficiency on the training GPUs.

    python benchmarks/kernel_efficiency.py --json

Progress goes to stderr; stdout gets one JSON line (or a table without ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from leap_pipeline.data.kernel_sets import read_kernel_set  # noqa: E402
from leap_serving.decide import metrics  # noqa: E402
from leap_serving.launch.kernel_efficiency import (  # noqa: E402
    MATMUL_OPS,
    KernelEfficiency,
    kernel_features,
)


def _scores(predicted: np.ndarray, measured: np.ndarray) -> dict:
    return {
        "mdape": round(float(metrics.mdape(predicted, measured)), 1),
        "w20": round(100 * metrics.within(predicted, measured, 20), 1),
    }


def score_gpu(model: KernelEfficiency, train: pl.DataFrame, rows: pl.DataFrame, specs) -> dict:
    """Per operator class on ``rows``: the learned latency, the roofline's, and the training
    GPUs' median efficiency per operator, each scored on the measured latency."""
    out = {}
    fitted = kernel_features(train, specs)
    median = (
        fitted.with_columns(e=(pl.col("roofline_s") * 1e3 / pl.col("latency_ms")).log())
        .group_by(pl.col("op").cast(pl.String))
        .agg(pl.col("e").median())
    )
    for name, is_matmul in (("matmul", True), ("memory-bound", False)):
        part = rows.filter(pl.col("op").cast(pl.String).is_in(MATMUL_OPS) == is_matmul)
        if part.height == 0:
            continue
        measured = part["latency_ms"].to_numpy()
        features = kernel_features(part, specs).with_columns(pl.col("op").cast(pl.String))
        roofline = features["roofline_s"].to_numpy() * 1e3
        typical = features.join(median, on="op", how="left", maintain_order="left")["e"]
        out[name] = {
            "kernels": part.height,
            "learned": _scores(model.latency_ms(part, specs), measured),
            "roofline": _scores(roofline, measured),
            "median_efficiency": _scores(roofline / np.exp(typical.to_numpy()), measured),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line on stdout")
    args = parser.parse_args()
    ops, specs = read_kernel_set()
    train = ops.filter(pl.col("neusight_split") == "train")
    test = ops.filter(pl.col("neusight_split") == "test")
    result: dict = {"leave-gpu-out": {}, "neusight-test": {}}
    started = time.monotonic()
    for gpu in sorted(train["hardware_type"].unique()):
        fit_on = train.filter(pl.col("hardware_type") != gpu)
        model = KernelEfficiency().fit(fit_on, specs)
        rows = test.filter(pl.col("hardware_type") == gpu)
        result["leave-gpu-out"][gpu] = score_gpu(model, fit_on, rows, specs)
        print(f"leave {gpu} out: {time.monotonic() - started:.0f} s", file=sys.stderr)
    model = KernelEfficiency().fit(train, specs)
    for gpu in sorted(test["hardware_type"].unique()):
        rows = test.filter(pl.col("hardware_type") == gpu)
        result["neusight-test"][gpu] = score_gpu(model, train, rows, specs)
    result["seconds"] = round(time.monotonic() - started)
    if args.json:
        print(json.dumps(result))
        return 0
    for setting, by_gpu in result.items():
        if not isinstance(by_gpu, dict):
            continue
        for gpu, by_class in by_gpu.items():
            for name, s in by_class.items():
                print(
                    f"{setting:14} {gpu:24} {name:12} {s['kernels']:5}  learned "
                    f"{s['learned']['mdape']:6.1f}% / {s['learned']['w20']:5.1f}%  roofline "
                    f"{s['roofline']['mdape']:6.1f}% / {s['roofline']['w20']:5.1f}%  median eff. "
                    f"{s['median_efficiency']['mdape']:6.1f}% / "
                    f"{s['median_efficiency']['w20']:5.1f}%"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
