"""A launcher's decisions, and what a wrong one costs.

A decision is one configuration (model, trainers, batch size) measured on at least two types,
at least one of them held out: the launcher ranks every type the configuration ran on. A type
held out gets the candidate's prediction; a type outside the held-out set has been measured, so
every throughput predictor uses the measurement there, as a launcher that trusts its own
history would. The rules rank by the spec table alone.

Regret weighs a wrong choice by what it costs: (time per sample of the chosen type / that of
the best type) - 1 for the fastest, and the same with cost per sample for per dollar, the cost
being the type's price times the devices the job occupies there (``contract.job_devices``), as
the Ranker prices a launch. A decision no candidate value answers takes the mean regret of its
types (a random pick).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from leap_serving.launch.contract import job_devices

CONFIG = ("model_type", "num_trainers", "batch_size")
KINDS = ("fastest", "per_cost")
# rules rank by the spec table alone (``candidate_scores``)
RULES = ("highest_fp16_peak", "best_fp16_peak_per_dollar")
WITHIN = 0.05  # a decision "within 5%" costs at most this much more than the best
TIE = 1e-12  # a regret this small is the best choice (top-1)
# the fallback that places nothing: a type the ranking cannot score ranks last
LAST = "last"


def unit_costs(rows: pl.DataFrame, specs: pl.DataFrame) -> np.ndarray:
    """Per row: the hourly price of the devices the job occupies on its type."""
    spec = rows.select("hardware_type").join(
        specs.select("hardware_type", "hourly_cost_usd", "devices_per_host"),
        on="hardware_type",
        how="left",
        maintain_order="left",
    )
    requested = (
        rows["requested_devices_per_host"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        if "requested_devices_per_host" in rows.columns
        else None
    )
    devices = job_devices(
        rows["num_trainers"].cast(pl.Float64).to_numpy(),
        requested,
        spec["devices_per_host"].cast(pl.Float64).fill_null(1.0).to_numpy(),
    )
    return spec["hourly_cost_usd"].cast(pl.Float64).to_numpy() * devices


def cells(
    rows: pl.DataFrame, specs: pl.DataFrame, held: np.ndarray, predicted: dict[str, np.ndarray]
) -> pl.DataFrame:
    """One row per (configuration, type): measured throughput (geometric mean over its rows),
    unit cost, FP16 peak, whether any of its rows is ``held`` out, and each predictor's value:
    the geometric mean of its predictions over the held rows, the measurement elsewhere."""
    peak = dict(zip(specs["hardware_type"], specs["peak_bf16_tflops"], strict=True))
    frame = rows.select(*CONFIG, "hardware_type", q="throughput").with_columns(
        held=pl.Series(held, dtype=pl.Boolean),
        cost=pl.Series(unit_costs(rows, specs)),
        peak=pl.col("hardware_type").replace_strict(peak, return_dtype=pl.Float64),
        **{
            name: pl.Series(np.asarray(p, dtype=float)).fill_nan(None)
            for name, p in predicted.items()
        },
    )
    keys = [*CONFIG, "hardware_type"]
    table = frame.group_by(keys, maintain_order=True).agg(
        pl.col("q").log().mean().exp(),
        pl.col("cost").first(),
        pl.col("peak").first(),
        pl.col("held").any(),
        *(pl.col(n).filter(pl.col("held")).log().mean().exp() for n in predicted),
    )
    return table.with_columns(
        pl.when(pl.col("held")).then(pl.col(n)).otherwise(pl.col("q")).alias(n) for n in predicted
    )


def candidate_scores(predictors: list[str]) -> dict[str, dict[str, pl.Expr]]:
    """What each candidate ranks a decision's types by, per decision kind (higher is better)."""
    scores = {
        name: {"fastest": pl.col(name), "per_cost": pl.col(name) / pl.col("cost")}
        for name in predictors
    }
    scores["highest_fp16_peak"] = {"fastest": pl.col("peak"), "per_cost": pl.col("peak")}
    per_dollar = pl.col("peak") / pl.col("cost")
    scores["best_fp16_peak_per_dollar"] = {"fastest": per_dollar, "per_cost": per_dollar}
    return scores


def decision_regrets(
    table: pl.DataFrame,
    predictors: list[str],
    keys: Sequence[str] = CONFIG,
    scores: dict[str, dict[str, pl.Expr]] | None = None,
) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray]:
    """Per candidate and kind: the regret of each decision, and each decision's model type
    (one order for all). ``table`` has one row per (decision, type): the decision's ``keys``,
    ``model_type``, ``q`` (true throughput), ``cost`` (unit cost), ``peak``, ``held`` and a
    column per predictor (``cells`` builds it). ``scores`` (default ``candidate_scores``) may
    add candidates that combine others; an expression may use ``pl.Expr.over(keys)``, as it is
    evaluated on the table of decisions."""
    by = list(keys)
    decisions = _regret_columns(_decisions(table, by), by)
    group, first_row, n_groups = _groups(decisions, by)
    out: dict[str, dict[str, np.ndarray]] = {}
    value = {kind: decisions[kind].cast(pl.Float64).to_numpy() for kind in KINDS}
    random = {kind: _group_nanmean(value[kind], group, n_groups) for kind in KINDS}
    for name, by_kind in (scores or candidate_scores(predictors)).items():
        out[name] = {}
        for kind, score in by_kind.items():
            own = _scored(decisions, score)
            scores_any = np.bincount(group, ~np.isnan(own), n_groups) > 0
            # its best-scored type; a decision it scores no type of: a random pick's mean regret
            pick = _first_best(own, np.ones(len(own), dtype=bool), group, n_groups)
            out[name][kind] = np.where(
                scores_any, value[kind][np.where(pick < 0, first_row, pick)], random[kind]
            )
    models = decisions["model_type"].to_numpy()[first_row]
    return out, models


def fallback_regrets(
    table: pl.DataFrame,
    predictors: list[str],
    ranking: str,
    fallback: str,
    keys: Sequence[str] = CONFIG,
) -> dict[str, np.ndarray]:
    """Per kind, the regret of each decision (in ``decision_regrets``' order) as ``ranking``
    placed by ``fallback`` decides it: ``ranking`` picks its best of the types it scores; where
    it cannot score some type of the decision (a rule on a type with no peak or price, the
    fleet ratio on a type no configuration ran), ``fallback`` decides between that pick and
    those types, by its own score for the kind, and takes the one it scores highest. A type
    ``fallback`` cannot score either stays behind the pick. ``fallback="last"`` is the
    ranking alone (every type it cannot score ranks last), as ``decision_regrets`` scores it.

    This is what a published decision is, whole: a rule alone cannot say where an unpriced
    type goes, so the decision names who places it, and is scored as it is named."""
    if fallback == LAST:
        scores = candidate_scores(predictors)
        regrets, _ = decision_regrets(table, predictors, keys, {ranking: scores[ranking]})
        return regrets[ranking]
    return fallback_regrets_of(table, predictors, [(ranking, fallback)], keys)[ranking, fallback]


def fallback_regrets_of(
    table: pl.DataFrame,
    predictors: list[str],
    pairs: Sequence[tuple[str, str]],
    keys: Sequence[str] = CONFIG,
) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """``fallback_regrets`` for each (ranking, fallback) of ``pairs`` (no ``LAST``), on arrays:
    a selection scores every candidate under every fallback on every validation fold, and a
    Polars aggregation per pair took most of a fold's time on its few dozen decisions."""
    scores = candidate_scores(predictors)
    by = list(keys)
    decisions = _regret_columns(_decisions(table, by), by)
    group, first_row, n_groups = _groups(decisions, by)
    names = sorted({name for pair in pairs for name in pair})
    out: dict[tuple[str, str], dict[str, np.ndarray]] = {pair: {} for pair in pairs}
    for kind in KINDS:
        value = decisions[kind].cast(pl.Float64).to_numpy()
        score = {name: _scored(decisions, scores[name][kind]) for name in names}
        random = _group_nanmean(value, group, n_groups)
        for ranking, fallback in pairs:
            own, placed = score[ranking], score[fallback]
            unscored = np.isnan(own)
            scores_any = np.bincount(group, ~unscored, n_groups) > 0
            # the ranking's pick: its best-scored type (the decision's first when it scores none)
            pick = _first_best(own, np.ones_like(unscored), group, n_groups)
            pick = np.where(pick < 0, first_row, pick)
            # the fallback's best of the types the ranking cannot score
            rest = _first_best(placed, unscored, group, n_groups)
            has_rest = rest >= 0
            rest_row = np.where(has_rest, rest, 0)
            rest_placed = np.where(has_rest, placed[rest_row], np.nan)
            with np.errstate(invalid="ignore"):
                rest_wins = scores_any & (rest_placed > placed[pick])
            regret = np.where(
                rest_wins | (~scores_any & ~np.isnan(rest_placed)),
                np.where(has_rest, value[rest_row], np.nan),
                np.where(scores_any, value[pick], random),
            )
            out[ranking, fallback][kind] = regret
    return out


def _groups(decisions: pl.DataFrame, by: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """Each row's decision (numbered in the order decisions first appear), each decision's
    first row, and the number of decisions."""
    groups = decisions.with_row_index("_row").group_by(by, maintain_order=True).agg("_row")
    group = np.empty(decisions.height, dtype=np.int64)
    for number, rows in enumerate(groups["_row"].to_list()):
        group[rows] = number
    first_row = np.full(groups.height, decisions.height)
    np.minimum.at(first_row, group, np.arange(decisions.height))
    return group, first_row, groups.height


def _scored(decisions: pl.DataFrame, score: pl.Expr) -> np.ndarray:
    """A candidate's score of each row (NaN where it gives none)."""
    return decisions.select(score.fill_nan(None).cast(pl.Float64)).to_series().to_numpy()


def _first_best(
    score: np.ndarray, among: np.ndarray, group: np.ndarray, n_groups: int
) -> np.ndarray:
    """Per group, the row of the highest ``score`` among the rows ``among`` (the first such
    row on a tie; the first of them when none is scored, as a stable sort with unscored last
    puts them), or -1 where the group has no row ``among``."""
    if len(score) == 0:
        return np.full(n_groups, -1)
    rows = np.arange(len(score))
    unscored = np.isnan(score)
    order = np.lexsort((rows, -np.where(unscored, 0.0, score), unscored, ~among, group))
    sorted_group = group[order]
    starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
    best = np.full(n_groups, -1)
    first = order[starts]
    kept = among[first]
    best[sorted_group[starts][kept]] = first[kept]
    return best


def _group_nanmean(value: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the mean of the non-NaN ``value``s (NaN where there is none)."""
    known = ~np.isnan(value)
    total = np.bincount(group, np.where(known, value, 0.0), n_groups)
    count = np.bincount(group, known, n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def _regret_columns(decisions: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Each (decision, type) row's regret if the type is chosen, per kind."""
    value = pl.col("q") / pl.col("cost")
    return decisions.with_columns(
        fastest=pl.col("q").max().over(by) / pl.col("q") - 1,
        per_cost=value.max().over(by) / value - 1,
    )


def _decisions(table: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The (decision, type) rows that make a decision: two types or more, one held out."""
    return table.filter((pl.len().over(by) >= 2) & pl.col("held").any().over(by))


def decision_coverage(
    table: pl.DataFrame,
    predictors: list[str],
    keys: Sequence[str] = CONFIG,
    scores: dict[str, dict[str, pl.Expr]] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Per candidate and kind, per decision (in ``decision_regrets``' order): whether the
    candidate scores every type of the decision. A candidate that does not (the fleet ratio on
    a type no training configuration ran, a GBDT fitted on too few rows, a rule on a type with
    no peak or price) ranks the types it cannot estimate last."""
    by = list(keys)
    decisions = _decisions(table, by)
    group, _, n_groups = _groups(decisions, by)
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, by_kind in (scores or candidate_scores(predictors)).items():
        out[name] = {}
        for kind, score in by_kind.items():
            unscored = np.isnan(_scored(decisions, score))
            out[name][kind] = np.bincount(group, unscored, n_groups) == 0
    return out


def summarize(regrets: np.ndarray) -> dict:
    """Mean, 90th percentile, share within ``WITHIN`` of the best, and top-1 (no regret)."""
    if len(regrets) == 0:
        return {"mean": None, "p90": None, "within_5pct": None, "top1": None, "decisions": 0}
    return {
        "mean": float(np.mean(regrets)),
        "p90": float(np.quantile(regrets, 0.9)),
        "within_5pct": float(np.mean(regrets <= WITHIN)),
        "top1": float(np.mean(regrets <= TIE)),
        "decisions": len(regrets),
    }


def top1_accuracy(
    rows: pl.DataFrame, predicted: dict[str, np.ndarray], specs: pl.DataFrame
) -> dict:
    """Over configurations measured on at least two types, every type predicted: how often
    each predictor's and rule's first choice is the true best, fastest and per dollar."""
    table = cells(rows, specs, np.ones(rows.height, dtype=bool), predicted)
    regrets, models = decision_regrets(table, list(predicted))
    out: dict = {"configurations": len(models)}
    for kind in KINDS:
        out[kind] = {name: float(np.mean(r[kind] <= TIE)) for name, r in regrets.items()}
    return out
