"""The paper's studies of one held-out day: the ablation ladder (Table 2), permutation importance
(Figure 4) and the hold-outs of a hardware type and a model type (Table 4).

Each takes the night's window, the held-out day's rows and the night's cascade, and refits what it
varies at the report's profile, so a difference measures the features or the data, never a change
of tree budget.
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from leap_pipeline.modeling.evaluation import novelty_scores
from leap_pipeline.modeling.progress import Progress
from leap_pipeline.modeling.selection import validation_rows
from leap_serving import metrics
from leap_serving.cascade import (
    SINGLE_GBDT_UNITS,
    BinnedCascade,
    cascade_units,
    fit_booster,
    profile_params,
    single_gbdt,
)
from leap_serving.compiled import CompiledCascade
from leap_serving.features import FEATURE_COLUMNS, FEATURE_GROUPS
from leap_serving.novelty import NoveltyReference


def _holdout_cascade(profile: str) -> BinnedCascade:
    """A hold-out's cascade, on every core as the nights' are (at scale 1.0 the four fits took
    42 minutes on one)."""
    return BinnedCascade(**profile_params(profile), n_jobs=-1)


def _w20_log(predicted_log_q: np.ndarray, rows: pl.DataFrame) -> float:
    return metrics.within(np.exp(predicted_log_q), rows["throughput"].to_numpy(), 20)


def ablation(
    window: pl.DataFrame, rows: pl.DataFrame, profile: str, cascade: BinnedCascade
) -> list[dict]:
    """Table 2's ladder on one held-out day: add feature groups, then the cascade (``cascade``:
    the night's model, already fitted on ``window``). Every rung is fitted at the report's profile,
    so a step up the ladder measures the features or the model, never a change of tree budget."""
    groups = [
        ("single GBDT: launch config + hardware specs", ("job", "cfg", "hw")),
        ("+ job history", ("job", "cfg", "hw", "hist")),
        ("+ throughput-ratio features", ("job", "cfg", "hw", "hist", "ratio")),
        ("+ architecture features", ("job", "cfg", "hw", "hist", "ratio", "arch")),
    ]
    y = window["log_q"].to_numpy()
    held_out = validation_rows(window)
    ladder = []
    progress = Progress("ablation ladder", SINGLE_GBDT_UNITS * len(groups))
    for rung, (name, chosen) in enumerate(groups, start=1):
        columns = [c for g in chosen for c in FEATURE_GROUPS[g]]
        X = window.select(columns).to_numpy()
        model = single_gbdt(profile)  # on every core: LightGBM's trees do not depend on them
        with progress.rounds(model, SINGLE_GBDT_UNITS, f"rung {rung}/{len(groups)}, "):
            model = fit_booster(model, X, y, held_out)
        ladder.append(
            {
                "configuration": f"{name} ({profile} profile)",
                "w20": _w20_log(model.predict(rows.select(columns).to_numpy()), rows),
            }
        )
    ladder.append(
        {
            "configuration": f"+ binned cascade ({profile} profile)",
            "w20": _w20_log(cascade.predict(rows.select(FEATURE_COLUMNS).to_numpy()), rows),
        }
    )
    return ladder


def permutation_importance(cascade: BinnedCascade, rows: pl.DataFrame, shuffles: int) -> dict:
    """Drop in w20 when one feature (or one group together) is shuffled on the held-out day.
    A day's rows of many launches, scored (features + groups) x shuffles times: through the
    compiled trees' many-row walk, one thread per core."""
    compiled = CompiledCascade(cascade)
    X = rows.select(FEATURE_COLUMNS).to_numpy()
    threads = os.cpu_count() or 1
    base = _w20_log(compiled.predict(X, threads)[0], rows)
    rng = np.random.default_rng(0)
    progress = Progress("permutation importance", len(FEATURE_COLUMNS) + len(FEATURE_GROUPS))

    def drop(name: str, columns: list[int]) -> float:
        losses = []
        for _ in range(shuffles):
            shuffled = X.copy()
            order = rng.permutation(len(X))
            shuffled[:, columns] = X[order][:, columns]
            losses.append(base - _w20_log(compiled.predict(shuffled, threads)[0], rows))
        progress.advance(f"{name} shuffled {shuffles}x")
        return float(np.mean(losses))

    index = {name: i for i, name in enumerate(FEATURE_COLUMNS)}
    per_feature = {name: drop(name, [index[name]]) for name in FEATURE_COLUMNS}
    per_group = {
        g: drop(f"group {g}", [index[c] for c in cols]) for g, cols in FEATURE_GROUPS.items()
    }
    top = sorted(per_feature.items(), key=lambda item: -item[1])[:15]
    return {
        "base_w20": base,
        "per_group": per_group,
        "top_features": dict(top),
        "per_feature": per_feature,
    }


def holdouts(
    window: pl.DataFrame, rows: pl.DataFrame, profile: str, cascade: BinnedCascade
) -> dict:
    """Table 4: remove one hardware type, or one model type, from training; the same number of
    random rows removed is the control. Scored on the held-out day's rows of that type; the
    full model is ``cascade``, the night's model fitted on all of ``window``."""
    X_all, y_all = window.select(FEATURE_COLUMNS).to_numpy(), window["log_q"].to_numpy()
    held_out = validation_rows(window)
    rng = np.random.default_rng(0)
    model = _holdout_cascade(profile)
    progress = Progress(
        "hold-outs",
        4 * cascade_units(model.max_em_iter, model.n_bins, model.expert_overlap, model.em_sample),
    )
    out = {}
    for key, column in (("hardware", "hardware_type"), ("family", "model_type")):
        counts = rows.group_by(column).len().sort(["len", column], descending=[True, False])
        target = counts[column][0]
        scored = rows.filter(pl.col(column) == target)
        removed = (window[column] == target).to_numpy()
        control = np.zeros(len(y_all), dtype=bool)
        control[rng.choice(len(y_all), size=int(removed.sum()), replace=False)] = True
        X_day = scored.select(FEATURE_COLUMNS).to_numpy()
        w20 = {"full": _w20_log(cascade.predict(X_day), scored)}
        predicted = {}
        for name, drop in (("held_out", removed), ("control", control)):
            progress.phase = (f"{column} {target} held out" if name == "held_out"
                              else f"{column} control: as many random rows out")  # fmt: skip
            fitted = _holdout_cascade(profile).fit(
                X_all[~drop], y_all[~drop], validation=held_out[~drop], progress=progress
            )
            predicted[name] = np.exp(fitted.predict(X_day))
            w20[name] = _w20_log(np.log(predicted[name]), scored)
        out[f"holdout_{key}"] = {
            "target": target,  # (the w20 below named "held_out" is the refit's)
            "rows_removed": int(removed.sum()),
            "rows_scored": scored.height,
            **w20,
        }
        if key == "family":  # the novelty flag where the model type really is new to the model
            reference = NoveltyReference.fit(window.filter(~removed)["model_type"].to_list(),
                                             X_all[~removed])  # fmt: skip
            out["holdout_family"]["novelty"] = novelty_scores(
                reference.assess_rows(scored["model_type"].to_list(), X_day),
                predicted["held_out"], scored["throughput"].to_numpy(),
            )  # fmt: skip
        out[f"holdout_{key}_delta_w20"] = w20["held_out"] - w20["full"]
        out[f"holdout_{key}_control_delta_w20"] = w20["control"] - w20["full"]
    return out
