"""Table 4's hold-outs as decisions: what a model trained without a hardware type (or a model
type) costs a launcher that ranks by it, beside the rules, on the simulated fleet where the
truth of every candidate is known.

For the day's launches of the held-out type or family, every candidate type is scored: the
features a Ranker builds (the launch on that type, the history snapshot before the day), the
published model refitted on the night's training rows without the held-out rows, the full
published model and the two rules. Truth comes from the simulator's oracle: the job's true
median throughput and its devices on each candidate, priced as the Ranker prices them.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from leap_pipeline.studies.decisions import KINDS, RULES, decision_regrets, summarize, unit_costs
from leap_serving.launch.families import with_family
from leap_serving.launch.features import FEATURE_COLUMNS, build_features
from leap_serving.launch.history import history_features

TARGETS = (("hardware", "hardware_type"), ("family", "model_type"))  # as Table 4 holds out


def candidate_features(
    launches: pl.DataFrame, snapshot: pl.DataFrame, specs: pl.DataFrame
) -> tuple[pl.DataFrame, np.ndarray]:
    """One row per (launch, candidate type): its ``attempt_id`` and ``hardware_type``, and the
    feature matrix a Ranker would build for it."""
    pairs = with_family(
        launches.explode("candidate_hardware")
        .drop("hardware_type")
        .rename({"candidate_hardware": "hardware_type"})
    )
    history = history_features(pairs, snapshot, specs)
    X = build_features(pairs, specs, history).select(FEATURE_COLUMNS).to_numpy()
    keep = ["attempt_id", "model_type", "hardware_type", "num_trainers"]
    if "requested_devices_per_host" in pairs.columns:
        keep.append("requested_devices_per_host")
    return pairs.select(keep), X


def holdout_regrets(
    launches: pl.DataFrame,
    snapshot: pl.DataFrame,
    specs: pl.DataFrame,
    oracle,
    published,
    refits: dict[str, tuple[str, object, pl.DataFrame | None]],
) -> dict:
    """Per hold-out (hardware type, model type): the value held out (``target``), and mean /
    p90 / within-5% regret and top-1 of the published model refitted without its rows
    (``held_out``), of the full published model (``full``) and of the rules, fastest and per
    dollar, over the day's launches of the held-out value. ``refits`` maps each hold-out
    (``hardware``, ``family``) to the value it removed, the refit without it and the snapshot
    it ranks from (None: ``snapshot``; ``ablations.features_without``'s: no history of the
    value, as a launcher has for a type just bought): Table 4's (``ablations.holdouts``), so one
    refit answers both the w20 and the decisions. The full model ranks from ``snapshot``."""
    out = {}
    for key, column in TARGETS:
        target, refit, unseen_snapshot = refits[key]
        day = launches.filter(pl.col(column) == target)
        pairs, X = candidate_features(day, snapshot, specs)
        X_unseen = (
            X if unseen_snapshot is None else candidate_features(day, unseen_snapshot, specs)[1]
        )
        truth = oracle.true_medians(day["attempt_id"].to_list(), specs["hardware_type"].to_list())
        table = _decision_table(pairs, truth, specs).with_columns(
            held_out=pl.Series(np.exp(refit.predict(X_unseen))),
            full=pl.Series(np.exp(published.predict(X))),
        )
        regrets, _ = decision_regrets(table, ["held_out", "full"], keys=["attempt_id"])
        out[key] = {"target": target, "launches": day.height}
        for name in ("held_out", "full", *RULES):
            summary = {kind: summarize(regrets[name][kind]) for kind in KINDS}
            out[key][name] = summary
    return out


def _decision_table(pairs: pl.DataFrame, truth: pl.DataFrame, specs: pl.DataFrame) -> pl.DataFrame:
    peak = dict(zip(specs["hardware_type"], specs["peak_bf16_tflops"], strict=True))
    joined = pairs.join(
        truth.select("attempt_id", "hardware_type", "true_median"),
        on=["attempt_id", "hardware_type"],
        how="left",
        maintain_order="left",
    )
    # priced from the launch's fields as the Ranker prices it; the oracle gives only the truth
    return joined.select(
        "attempt_id",
        "model_type",
        "hardware_type",
        q="true_median",
        cost=pl.Series(unit_costs(joined, specs)),
        peak=pl.col("hardware_type").replace_strict(peak, return_dtype=pl.Float64),
        held=pl.lit(True),
    )
