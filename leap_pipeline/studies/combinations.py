"""Candidates that combine other candidates, for a selection to weigh beside them: where the
two GBDTs' leads over the rule are both real but a few validation model types cannot say which
is larger, a combination of both may hold most of either's lead without the choice.

Two kinds. A *blend* is a throughput predictor: the geometric mean of its members' predictions
(those that give one). A *rank mean* ranks a decision's types by each member's score for the
decision kind (a rule's too) and picks the type with the best mean rank, the blend of the two
GBDTs breaking ties; a member with no estimate for a type ranks it last.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from leap_pipeline.studies.decisions import CONFIG, RULES, candidate_scores

GBDT_PAIR = ("single_gbdt", "single_gbdt_prior")
GBDT_BLEND = "gbdt_blend"  # a candidate of ``leap crossval`` (``crossval.PREDICTORS``)
BLENDS = {
    GBDT_BLEND: GBDT_PAIR,
    "gbdt_physics_blend": (*GBDT_PAIR, "physics"),
}
RANK_MEANS = {
    "rank_mean_gbdts_rules": (*GBDT_PAIR, *RULES),
    "rank_mean_all": (*GBDT_PAIR, "physics", "fleet_ratio", "roofline", *RULES),
}
# what benchmarks/selection_study.py offers beyond crossval's candidates
COMBINED = tuple(name for name in (*BLENDS, *RANK_MEANS) if name != GBDT_BLEND)


def geometric_blend(predicted: dict[str, np.ndarray], members: Sequence[str]) -> np.ndarray:
    """The geometric mean of ``members``' predictions per row, over the members with a finite
    positive one (NaN where none has). The two GBDTs predict every row or none (a fit on too
    few rows), so their blend always averages both; a blend with physics averages physics in
    only where it has the configuration on another type. A prediction of 0 counts as none
    here, as no GBDT (a log-throughput model) nor physics gives one."""
    with np.errstate(divide="ignore", invalid="ignore"):  # 0 or negative: no estimate
        logs = np.stack([np.log(np.asarray(predicted[m], dtype=float)) for m in members])
    finite = np.isfinite(logs)
    total = np.where(finite, logs, 0.0).sum(axis=0)
    count = finite.sum(axis=0)
    return np.where(count > 0, np.exp(total / np.maximum(count, 1)), np.nan)


def with_blends(predicted: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``predicted`` and each blend of ``BLENDS``."""
    return predicted | {name: geometric_blend(predicted, m) for name, m in BLENDS.items()}


def combined_scores(
    predictors: Sequence[str], keys: Sequence[str] = CONFIG
) -> dict[str, dict[str, pl.Expr]]:
    """``candidate_scores`` of ``predictors`` (which must include the blends) and of each rank
    mean, for ``decisions.decision_regrets(scores=...)``. Higher is better, as there."""
    scores = candidate_scores(list(predictors))
    by = list(keys)
    out = dict(scores)
    for name, members in RANK_MEANS.items():
        out[name] = {}
        for kind in ("fastest", "per_cost"):
            ranks = [
                scores[m][kind]
                .fill_nan(None)
                .rank("average", descending=True)
                .over(by)
                .fill_null(pl.len().over(by).cast(pl.Float64))
                for m in members
            ]
            tie_break = scores[GBDT_BLEND][kind].fill_nan(None).rank("average").over(by)
            out[name][kind] = -pl.mean_horizontal(ranks) + 1e-3 * tie_break.fill_null(0.0)
    return out
