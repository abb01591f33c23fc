"""The paper's studies of one held-out day: the ablation ladder (Table 2), permutation importance
(Figure 4) and the hold-outs of a hardware type and a model type (Table 4).

Each takes the night's window, the held-out day's rows and the night's models. What a study refits
trains on the rows the night's models trained on (``split_window``: the window without its
selection day) at the night's parameters, so a difference measures the features or the data, never
a change of tree budget or of training days; and where a rung is one of the night's models, the
study scores that model rather than fitting it again.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from sklearn.base import clone

from leap_pipeline.data.feature_table import HISTORY_LOOKBACK_DAYS, build_feature_table
from leap_pipeline.data.warehouse import Warehouse, open_warehouse
from leap_pipeline.modeling.evaluation import novelty_scores
from leap_pipeline.modeling.progress import Progress
from leap_pipeline.modeling.selection import split_window, validation_rows
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS, FEATURE_GROUPS
from leap_serving.launch.snapshot import SNAPSHOT_INPUT_COLUMNS, history_snapshot
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.compiled import CompiledCascade
from leap_serving.model.fitting import SINGLE_GBDT_UNITS, cascade_units, fit_booster
from leap_serving.model.novelty import NoveltyReference


def _w20_log(predicted_log_q: np.ndarray, rows: pl.DataFrame) -> float:
    return metrics.within(np.exp(predicted_log_q), rows["throughput"].to_numpy(), 20)


def ablation(
    window: pl.DataFrame,
    rows: pl.DataFrame,
    profile: str,
    single: object,
    cascade: BinnedCascade,
) -> list[dict]:
    """Table 2's ladder on one held-out day: add feature groups, then the cascade. The rungs with
    fewer features are single GBDTs refitted at the report's profile on the night's training
    rows; the all-feature rung is the night's own single GBDT (``single``) and the last the night's
    cascade, both fitted on those rows, so the ladder's top two rungs are the night's figures.
    ``profile`` only names the rungs: the refits take ``single``'s parameters."""
    groups = [
        ("single GBDT: launch config + hardware specs", ("job", "cfg", "hw")),
        ("+ job history", ("job", "cfg", "hw", "hist")),
        ("+ throughput-ratio features", ("job", "cfg", "hw", "hist", "ratio")),
        ("+ architecture features", ("job", "cfg", "hw", "hist", "ratio", "arch")),
        ("+ per-layer cost model", ("job", "cfg", "hw", "hist", "ratio", "arch", "cost")),
    ]
    training, _ = split_window(window)
    y = training["log_q"].to_numpy()
    held_out = validation_rows(training)
    rungs = [(name, _columns(chosen)) for name, chosen in groups]
    refits = sum(columns != list(FEATURE_COLUMNS) for _, columns in rungs)
    ladder = []
    progress = Progress("ablation ladder", SINGLE_GBDT_UNITS * max(refits, 1))
    for rung, (name, columns) in enumerate(rungs, start=1):
        if columns == list(FEATURE_COLUMNS):
            model = single  # the night's single GBDT: every feature, the same rows
        else:
            model = clone(single)  # the night's parameters, unfitted
            with progress.rounds(model, SINGLE_GBDT_UNITS, f"rung {rung}/{len(groups)}, "):
                model = fit_booster(model, training.select(columns).to_numpy(), y, held_out)
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


def _columns(groups: tuple[str, ...]) -> list[str]:
    """The feature columns of ``groups``, in ``FEATURE_COLUMNS``' order (a model's column order)."""
    return [c for g, columns in FEATURE_GROUPS.items() if g in groups for c in columns]


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


@dataclass(frozen=True)
class Unseen:
    """Days' feature rows as if one value (a hardware type, a model type) had never run
    (``features_without``), and the history snapshot as of the day before the last of them."""

    rows: pl.DataFrame
    snapshot: pl.DataFrame


# builds ``Unseen`` for (column, value) over the night's window and day (``unseen_in``)
RebuildUnseen = Callable[[str, str], Unseen]
# what a rebuilt row keeps: enough to match it to its attempt and to fit and score on it
UNSEEN_COLUMNS = ("attempt_id", "ds", "model_type", "hardware_type", *FEATURE_COLUMNS)


def unseen_in(warehouse: Path, window: pl.DataFrame, day: dt.date) -> RebuildUnseen:
    """``features_without`` over ``window``'s days and ``day`` in the warehouse file, opened
    read-only for each rebuild (the studies run after the report closed it)."""

    def rebuild(column: str, value: str) -> Unseen:
        with open_warehouse(warehouse, read_only=True) as wh:
            return features_without(wh, window["ds"].min(), day, column, value)

    return rebuild


def features_without(
    wh: Warehouse, first: dt.date, last: dt.date, column: str, value: str
) -> Unseen:
    """The feature rows of days ``first`` .. ``last`` (every attempt of each day), each day's
    history from a snapshot of the attempts before it whose ``column`` is not ``value``, built
    as the pipeline builds them (``history_snapshot``, ``build_feature_table``).

    Leaving the held-out rows out of training is not enough for Table 4: the feature table's
    history comes from snapshots of every earlier attempt, so a row of a held-out hardware type
    still carries its family's measured level there, the lookup key's level and the type's
    fleet ratios, and training rows carry levels transferred from it. A type just bought, or a
    model never run, has none of that."""
    lookback = dt.timedelta(days=HISTORY_LOOKBACK_DAYS)
    past = wh.read(
        "job_attempts", first - lookback, last - dt.timedelta(days=1), SNAPSHOT_INPUT_COLUMNS
    ).filter(pl.col(column) != value)
    tables, snapshot = [], None
    for offset in range((last - first).days + 1):
        day = first + dt.timedelta(days=offset)
        before = day - dt.timedelta(days=1)
        recent = past.filter(pl.col("ds").is_between(day - lookback, before))
        snapshot = history_snapshot(recent, as_of=before)
        tables.append(
            build_feature_table(
                wh.read("job_attempts", day, day),
                wh.read("allocations", day, day),
                wh.read("hardware_specs", day, day).drop("ds"),
                snapshot,
            ).select(UNSEEN_COLUMNS)
        )
    return Unseen(pl.concat(tables), snapshot)


def holdouts(
    window: pl.DataFrame,
    rows: pl.DataFrame,
    published: BinnedCascade,
    rebuild: RebuildUnseen | None = None,
) -> tuple[dict, dict[str, tuple[BinnedCascade, pl.DataFrame | None]]]:
    """Table 4: remove one hardware type, or one model type, from the night's training rows and
    refit the published model (what ships) at its own parameters; the same number of random rows
    removed is the control. Scored on the held-out day's rows of that type beside ``published``
    itself. With ``rebuild`` the refit and its day-D rows also lose the held-out value's history
    (``features_without``), as for a type just bought; without it (tests of the mechanics) only
    the training rows go. Returns the table's entries and, keyed ``hardware`` and ``family``,
    each refit with the snapshot it ranks from (None: the night's), which ``holdout_regret``
    scores as decisions."""
    training, _ = split_window(window)
    X_all, y_all = training.select(FEATURE_COLUMNS).to_numpy(), training["log_q"].to_numpy()
    held_out = validation_rows(training)
    rng = np.random.default_rng(0)
    progress = Progress(
        "hold-outs",
        4
        * cascade_units(
            published.max_em_iter,
            published.n_bins,
            published.expert_overlap,
            published.em_sample,
        ),
    )
    out, refits = {}, {}
    for key, column in (("hardware", "hardware_type"), ("family", "model_type")):
        counts = rows.group_by(column).len().sort(["len", column], descending=[True, False])
        target = counts[column][0]
        scored = rows.filter(pl.col(column) == target)
        removed = (training[column] == target).to_numpy()
        control = np.zeros(len(y_all), dtype=bool)
        control[rng.choice(len(y_all), size=int(removed.sum()), replace=False)] = True
        X_day = scored.select(FEATURE_COLUMNS).to_numpy()
        w20 = {"full": _w20_log(published.predict(X_day), scored)}
        unseen = rebuild(column, target) if rebuild is not None else None
        predicted = {}
        for name, drop in (("held_out", removed), ("control", control)):
            progress.phase = (
                f"{column} {target} held out"
                if name == "held_out"
                else f"{column} control: as many random rows out"
            )
            X_fit, X_scored = X_all[~drop], X_day
            if name == "held_out" and unseen is not None:
                X_fit, X_scored = _unseen_matrices(unseen.rows, training, scored, ~drop)
            fitted = clone(published).fit(
                X_fit, y_all[~drop], validation=held_out[~drop], progress=progress
            )
            if name == "held_out":
                refits[key] = (fitted, None if unseen is None else unseen.snapshot)
                if key == "family":  # for the novelty flag below
                    X_unseen, X_new = X_fit, X_scored
            predicted[name] = np.exp(fitted.predict(X_scored))
            w20[name] = _w20_log(np.log(predicted[name]), scored)
        unseen = X_fit = X_scored = None  # the next hold-out's rebuild need not sit beside these
        out[f"holdout_{key}"] = {
            "target": target,  # (the w20 below named "held_out" is the refit's)
            "rows_removed": int(removed.sum()),
            "rows_scored": scored.height,
            **w20,
        }
        if key == "family":  # the novelty flag where the model type really is new to the model
            reference = NoveltyReference.fit(
                training.filter(~removed)["model_type"].to_list(), X_unseen
            )
            out["holdout_family"]["novelty"] = novelty_scores(
                reference.assess_rows(scored["model_type"].to_list(), X_new),
                predicted["held_out"],
                scored["throughput"].to_numpy(),
            )
        out[f"holdout_{key}"]["history_removed"] = rebuild is not None
        out[f"holdout_{key}_delta_w20"] = w20["held_out"] - w20["full"]
        out[f"holdout_{key}_control_delta_w20"] = w20["control"] - w20["full"]
    return out, refits


def _unseen_matrices(
    unseen: pl.DataFrame, training: pl.DataFrame, scored: pl.DataFrame, kept: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The kept training rows' and the scored rows' features from ``unseen``, row for row with
    ``training[kept]`` and ``scored`` (matched by attempt and day: the same attempts, other
    history)."""
    rebuilt = unseen.unique(["attempt_id", "ds"], keep="first").with_columns(_found=pl.lit(True))

    def matrix(frame: pl.DataFrame) -> np.ndarray:
        found = frame.select("attempt_id", "ds").join(
            rebuilt, on=["attempt_id", "ds"], how="left", maintain_order="left"
        )
        if found["_found"].null_count():
            missing = found.filter(pl.col("_found").is_null())["attempt_id"].head(3).to_list()
            raise ValueError(f"attempts {missing} have no rebuilt features: other days' rows?")
        return found.select(FEATURE_COLUMNS).to_numpy()

    return matrix(training.filter(pl.Series(kept))), matrix(scored)
