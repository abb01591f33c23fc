"""How far can carrying a configuration's throughput from its other hardware types go?

Under leave-model-hardware-out (``leap crossval``), a held-out row can only be carried over from
the same configuration measured on another type. This prints, per data set, the share of rows
that have such a measurement, and the w20 / MdAPE of two transfers:
- fleet ratio: the median log-ratio between the two types over the other models' configurations
  (learned from training folds only, as ``hist_xfer_fleet_log_q`` does);
- similar models: the other models' median log-ratios between the two types, weighted by how
  alike their ratios are to the held-out model's on the pairs of types it did run on,
  exp(-mean |difference| / 0.2): a bottleneck read from how the model moved across known types
  (0.2 was the best of 0.05, 0.2 and uniform weights on the Sia traces, so it is optimistic);
- ceiling: the held-out model's own median log-ratio between the two types, taken from the test
  rows themselves. No predictor can know it; it bounds what any per-model ratio could reach.
Run: python benchmarks/transfer_ceiling.py --source sia --path DIR --hardware ml_hardware.csv
"""

import argparse
from pathlib import Path

import numpy as np
import polars as pl

from leap_pipeline.data.public_data import public_sources
from leap_pipeline.studies.decisions import top1_accuracy
from leap_pipeline.studies.splits import leave_one_group_out
from leap_serving.decide import metrics
from leap_serving.launch.families import with_family
from leap_serving.launch.history import type_ratios


def _levels(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.group_by("family", "model_type", "hardware_type").agg(
        mean_log_q=pl.col("throughput").log().mean()
    )


def _carried(test: pl.DataFrame, levels: pl.DataFrame, ratios: dict[tuple[str, str], float]):
    """Mean over the family's other types of level + ratio(other -> target); NaN when none."""
    table = pl.DataFrame(
        [{"hardware_type": a, "target": b, "ratio": r} for (a, b), r in ratios.items()],
        schema={"hardware_type": pl.String, "target": pl.String, "ratio": pl.Float64},
    )
    joined = (
        test.select("family", "model_type", target="hardware_type")
        .with_row_index("_i")
        .join(levels, on=["family", "model_type"])
        .filter(pl.col("hardware_type") != pl.col("target"))
        .join(table, on=["hardware_type", "target"])
        .group_by("_i")
        .agg((pl.col("mean_log_q") + pl.col("ratio")).mean().alias("p"))
    )
    full = test.with_row_index("_i").select("_i").join(joined, on="_i", how="left").sort("_i")
    return np.exp(full["p"].to_numpy().astype(float))


def _model_ratios(levels: pl.DataFrame) -> dict[str, dict[tuple[str, str], float]]:
    """Per model: (type, target) -> median over its configurations of the log-ratio."""
    pairs = levels.join(levels, on=["family", "model_type"], suffix="_to").filter(
        pl.col("hardware_type") != pl.col("hardware_type_to")
    )
    medians = pairs.group_by("model_type", "hardware_type", "hardware_type_to").agg(
        ratio=(pl.col("mean_log_q_to") - pl.col("mean_log_q")).median()
    )
    out: dict[str, dict[tuple[str, str], float]] = {}
    for model, a, b, ratio in medians.iter_rows():
        out.setdefault(model, {})[(a, b)] = ratio
    return out


def _similar_ratios(levels: pl.DataFrame, model: str, target: str) -> dict[tuple[str, str], float]:
    by_model = _model_ratios(levels)
    mine = by_model.get(model, {})
    out = {}
    for source in {a for a, _ in mine}:
        total = weight_sum = 0.0
        for other, theirs in by_model.items():
            shared = [k for k in mine if k in theirs and target not in k]
            if other == model or (source, target) not in theirs or not shared:
                continue
            weight = np.exp(-np.mean([abs(mine[k] - theirs[k]) for k in shared]) / SIMILARITY)
            total, weight_sum = total + weight * theirs[(source, target)], weight_sum + weight
        if weight_sum:
            out[(source, target)] = total / weight_sum
    return out


SIMILARITY = 0.2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", choices=("sia", "lambda"), required=True)
    parser.add_argument("--path", type=Path, required=True)
    parser.add_argument("--hardware", type=Path, required=True)
    args = parser.parse_args()
    attempts, _, specs = public_sources(args.source, args.path, args.hardware)
    rows = with_family(attempts.filter(pl.col("throughput") > 0))
    fleet, similar, ceiling = (np.full(rows.height, np.nan) for _ in range(3))
    for mask in leave_one_group_out(rows, ["model_type", "hardware_type"]):
        train, test = rows.filter(~mask), rows.filter(mask)
        levels = _levels(train)
        model, target = test["model_type"][0], test["hardware_type"][0]
        fleet[mask] = _carried(test, levels, type_ratios(levels.drop("model_type")))
        similar[mask] = _carried(test, levels, _similar_ratios(levels, model, target))
        # the ceiling: the held-out model's own ratios, from every row of that model
        own = _model_ratios(_levels(rows.filter(pl.col("model_type") == model))).get(model, {})
        ceiling[mask] = _carried(test, levels, own)
    q = rows["throughput"].to_numpy()
    print(f"{args.source}: {rows.height:,} rows under leave-model-hardware-out")
    print(f"  same configuration measured on another type: {np.mean(~np.isnan(ceiling)):.1%}")
    predicted = {"fleet_ratio": fleet, "similar": similar, "ceiling": ceiling}
    top1 = top1_accuracy(rows, predicted, specs)["fastest"]
    for name, p in predicted.items():
        print(
            f"  {name:12} w20 {metrics.within(p, q, 20):.3f}  MdAPE {metrics.mdape(p, q):.1f}%"
            f"  coverage {metrics.predicted_share(p):.3f}  top-1 fastest {top1[name]:.3f}"
        )
    print(f"  rule 'highest FP16 peak': top-1 fastest {top1['highest_fp16_peak']:.3f}")


if __name__ == "__main__":
    main()
