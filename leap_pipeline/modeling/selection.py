"""The night's candidate models: fit on the 30 days before day D, select the one to publish.

Pure functions over feature-table frames (paper sections 2.4 and 3.1). The cascade, the single
GBDT and the lookup table are fitted on the same window; the selection compares them on the
window's last day, which none of them trains on, and publishes one.
"""

from __future__ import annotations

import copy
import datetime as dt
import time
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np
import polars as pl

from leap_pipeline.modeling.lookup_table import HEAD_MODEL_TYPES, LookupTable, build_lookup_table
from leap_pipeline.modeling.parallel import lone_fits
from leap_pipeline.modeling.progress import Progress
from leap_pipeline.settings import MIN_SUPPORT, MIN_WINDOW_DAYS, WINDOW_DAYS
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.boosters import GBDTRegressor
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.fitting import cascade_units
from leap_serving.model.gating import GATINGS
from leap_serving.model.intervals import MIN_CLASS_ROWS, ConformalIntervals
from leap_serving.model.novelty import NoveltyReference
from leap_serving.model.profiles import profile_params
from leap_serving.model.published import LeapModel


def training_window(day: dt.date, window_days: int = WINDOW_DAYS) -> tuple[dt.date, dt.date]:
    """First and last training day for evaluation day ``day``: the ``window_days`` before it."""
    if window_days < 1:
        raise ValueError(f"window_days={window_days!r} must be at least 1")
    return day - dt.timedelta(days=window_days), day - dt.timedelta(days=1)


# The cascade must beat the single GBDT on the selection day by this many standard errors of the
# paired difference in w20 (the rows where exactly one of the two lands within 20%): a day is
# about a thousand attempts at the report's scale, where a 1.5-point lead is chance as often as
# not, and the simpler model is the safer bet on a tie. At full scale the bar is a fraction of a
# point, so a cascade that is really better still ships.
SELECTION_Z = 2.0


def challenger_bar(
    best: np.ndarray, incumbent: np.ndarray, challengers: int, z: float = SELECTION_Z
) -> tuple[float, float]:
    """The best challenger's lead in w20 over the incumbent (``best`` and ``incumbent``: whether
    each selection row lands within 20%) and the lead it must clear: ``z`` standard errors of
    the paired difference for one challenger, more for several. The best of ``challengers``
    beats the incumbent by chance more often than one does, so the one-sided chance ``z`` allows
    is split among them (Bonferroni): at ``z`` = 2 the bar is 2.0 standard errors for one
    challenger, 2.61 for five, 2.76 for eight."""
    difference = best.astype(float) - incumbent.astype(float)
    standard_error = (
        float(difference.std(ddof=1) / np.sqrt(len(difference))) if len(difference) > 1 else 1.0
    )
    normal = NormalDist()
    corrected = -normal.inv_cdf(normal.cdf(-z) / max(1, challengers))
    return float(best.mean() - incumbent.mean()) if len(best) else 0.0, corrected * standard_error


@dataclass
class TrainedModels:
    """A night's models. ``published`` is what ships: the selection's winner, as trained (a
    one-bin cascade when the single GBDT won, so the artifact and the serving path are one)."""

    cascade: BinnedCascade
    single_gbdt_booster: GBDTRegressor  # the one-bin cascade's expert, scored as "single_gbdt"
    published: BinnedCascade
    selection: dict
    lookup: LookupTable
    window: tuple[dt.date, dt.date]
    training_rows: int
    model_type_ranks: pl.DataFrame  # model_type, rank (1 = most attempts in the window)
    novelty: NoveltyReference | None = None  # the window's model types, to flag new ones
    seconds: dict[str, float] = field(default_factory=dict)
    # the published model's conformal intervals, calibrated on the selection day
    intervals: ConformalIntervals | None = None


def check_window(window: pl.DataFrame, day: dt.date, min_days: int = MIN_WINDOW_DAYS) -> None:
    """Refuse a window that reaches the evaluation day or has too few days to learn from."""
    if window.height and window["ds"].max() >= day:
        raise ValueError(f"training rows reach {window['ds'].max()}, not before {day}")
    days = window["ds"].n_unique() if window.height else 0
    if days < min_days:
        raise ValueError(
            f"the training window before {day} has {days} day(s) of feature table; at least "
            f"{min_days} are needed: materialize earlier partitions first"
        )


def validation_rows(window: pl.DataFrame) -> np.ndarray:
    """The rows early stopping judges on: the window's last day. A split in time, so the
    retries of one job (identical features, one day) never straddle it."""
    return (window["ds"] == window["ds"].max()).to_numpy()


def split_window(window: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The night's training rows and its selection day: the window's last day is held out to
    choose the model to publish, and every model of the night (and every study's refit of one)
    trains on the days before it."""
    selection_day = window["ds"].max()
    return window.filter(pl.col("ds") < selection_day), window.filter(pl.col("ds") == selection_day)


def window_lookup(window: pl.DataFrame, min_support: int = MIN_SUPPORT) -> LookupTable:
    """The night's lookup table: the window's head model types, each cell measured at least
    ``min_support`` times. The one part of a night's models the lookup setting changes."""
    return build_lookup_table(window, top_model_types=HEAD_MODEL_TYPES, min_support=min_support)


def fit_models(
    window: pl.DataFrame,
    day: dt.date,
    profile: str = "fast",
    random_state: int = 0,
    lookup_min_support: int = MIN_SUPPORT,
    cascade_params: dict | None = None,
) -> TrainedModels:
    """Fit the cascade, the single GBDT, the single GBDT on the history's prior
    (``target="residual"``), the efficiency GBDT on the per-layer cost prior
    (``target="efficiency"``) and the lookup table on a window of feature-table rows, and select
    the model to publish.

    The window's last day is held out for the selection (``select_model``); the models train on
    the days before it and early-stop on the last of those. The winner is published as trained,
    not refitted: what ships is exactly what the selection scored, at the cost of one day of
    rows, and a refit would double the night's training whenever the cascade wins."""
    check_window(window, day)
    training, selection_rows = split_window(window)
    X = training.select(FEATURE_COLUMNS).to_numpy()
    y = training["log_q"].to_numpy()
    held_out = validation_rows(training)
    params = profile_params(profile) | (cascade_params or {})
    models = {
        "cascade": BinnedCascade(**params, random_state=random_state),
        "single_gbdt": BinnedCascade(**(params | {"n_bins": 1}), random_state=random_state),
        "single_gbdt_prior": BinnedCascade(
            **(params | {"n_bins": 1, "target": "residual"}), random_state=random_state
        ),
        "efficiency_gbdt": BinnedCascade(
            **(params | {"n_bins": 1, "target": "efficiency"}), random_state=random_state
        ),
    }
    units = {
        name: cascade_units(m.max_em_iter, m.n_bins, m.expert_overlap, m.em_sample)
        for name, m in models.items()
    }
    progress = Progress(f"night {day}", sum(units.values()))
    # with a Dask cluster (parallel.expert_backend) the lone fits run there, beside the cascade
    remote = lone_fits(models, X, y, held_out)
    seconds = {}
    for name, model in models.items():
        if name in remote:
            continue
        start = time.perf_counter()
        progress.phase = name
        model.fit(X, y, validation=held_out, progress=progress)
        seconds[name] = time.perf_counter() - start
    for name, model, fit_seconds in remote.results():
        models[name], seconds[name] = model, fit_seconds
        progress.phase = name
        progress.advance("fitted on the cluster", units[name])
    cascade, one_bin, on_prior, efficiency = models.values()
    selection = select_model(
        cascade,
        one_bin,
        selection_rows.select(FEATURE_COLUMNS).to_numpy(),
        selection_rows["throughput"].to_numpy(),
        challengers={"single_gbdt_prior": on_prior, "efficiency_gbdt": efficiency},
    )
    selection["selection_day"] = selection_rows["ds"].max().isoformat()
    ranks = (
        window.group_by("model_type")
        .len()
        .sort(["len", "model_type"], descending=[True, False])
        .with_row_index("rank", offset=1)
        .select("model_type", "rank")
    )
    published = selection.pop("model")
    return TrainedModels(
        cascade=cascade,
        single_gbdt_booster=one_bin.experts_[0],
        published=published,
        selection=selection,
        lookup=window_lookup(window, lookup_min_support),
        window=(window["ds"].min(), window["ds"].max()),
        training_rows=window.height,
        model_type_ranks=ranks,
        novelty=NoveltyReference.fit(
            window["model_type"].to_list(), window.select(FEATURE_COLUMNS).to_numpy()
        ),
        seconds=seconds,
        intervals=calibrate_intervals(published, selection_rows),
    )


def serving_model(
    models: TrainedModels,
    snapshot: pl.DataFrame,
    specs: pl.DataFrame,
    metadata: dict | None = None,
) -> LeapModel:
    """The night's published model as the Ranker serves it: its history snapshot and spec table,
    its novelty reference and intervals (in its metadata too, as a saved model carries them)."""
    return LeapModel(
        cascade=models.published,
        history_snapshot=snapshot,
        hardware_specs=specs,
        metadata={
            "novelty": models.novelty.to_dict() if models.novelty else None,
            "intervals": models.intervals.to_dict() if models.intervals else None,
            **(metadata or {}),
        },
        novelty=models.novelty,
        intervals=models.intervals,
    )


def calibrate_intervals(model: BinnedCascade, rows: pl.DataFrame) -> ConformalIntervals | None:
    """The published model's conformal intervals (``leap_serving.model.intervals``), calibrated on
    ``rows`` it never trained on: the selection day. None on a day too thin to calibrate.

    The same day chose the model, so its errors there are the winner's and may run a little
    small; the nightly evaluation measures the coverage this gives on day D."""
    if rows.height < MIN_CLASS_ROWS:
        return None
    X = rows.select(FEATURE_COLUMNS).to_numpy()
    return ConformalIntervals.calibrate(
        model.predict(X), rows["log_q"].to_numpy(), rows["hardware_type"].to_numpy(), X
    )


def select_model(
    cascade: BinnedCascade,
    one_bin_cascade: BinnedCascade,
    X: np.ndarray,
    measured: np.ndarray,
    z: float = SELECTION_Z,
    challengers: dict[str, BinnedCascade] | None = None,
) -> dict:
    """Score the single GBDT (``one_bin_cascade``, named ``"single_gbdt"``), the cascade under
    every gating and any other ``challengers`` on rows no model trained on, and pick the one to
    publish: the best challenger if its w20 beats the single GBDT's by more than the bar
    (``challenger_bar``: ``z`` standard errors of the paired difference, corrected for the
    number of challengers), else the single GBDT. Returns the model, its name, every
    candidate's w20, the best challenger's margin and the bar it had to clear."""

    def hits(model: BinnedCascade) -> np.ndarray:
        return metrics.within_mask(np.exp(model.predict(X)), measured, 20)

    candidates = {"single_gbdt": one_bin_cascade}
    for gating in GATINGS:
        candidates[f"cascade_{gating}"] = copy.copy(cascade).set_params(gating=gating)
    candidates |= challengers or {}
    landed = {name: hits(model) for name, model in candidates.items()}
    scores = {name: float(hit.mean()) if len(hit) else 0.0 for name, hit in landed.items()}
    best = max((n for n in scores if n != "single_gbdt"), key=lambda n: scores[n])
    margin, bar = challenger_bar(landed[best], landed["single_gbdt"], len(candidates) - 1, z)
    name = best if margin > bar else "single_gbdt"
    return {
        "model": candidates[name],
        "published": name,
        "scores": scores,
        "margin": margin,
        "required_margin": bar,
        "selection_rows": len(measured),
        "refit": False,
    }


def predictions(models: TrainedModels, rows: pl.DataFrame) -> pl.DataFrame:
    """Predicted throughput of every model per row (null where a model gives no estimate)."""
    X = rows.select(FEATURE_COLUMNS).to_numpy()
    bins, probability = models.cascade.predict_bins(X)
    return pl.DataFrame(
        {
            "published": np.exp(models.published.predict(X)),
            "cascade": np.exp(models.cascade.predict(X)),
            "single_gbdt": np.exp(models.single_gbdt_booster.predict(X)),
            "lookup": models.lookup.predict(rows).cast(pl.Float64),
            "cascade_bin": bins,
            "cascade_bin_probability": probability,
        }
    )


def hyperparameters(models: TrainedModels) -> dict[str, str]:
    """Every hyperparameter of every model the night fitted, as MLflow params: the cascade's,
    the single GBDT's and the published model's ``get_params()`` (scikit-learn's convention),
    prefixed by the model, and the lookup table's size."""
    params = {
        f"{name}.{key}": str(value)
        for name, model in (
            ("cascade", models.cascade),
            ("single_gbdt", models.single_gbdt_booster),
            ("published", models.published),
        )
        for key, value in sorted(model.get_params().items())
    }
    params["lookup.top_model_types"] = str(len(models.lookup.model_types))
    params["lookup.entries"] = str(models.lookup.entries.height)
    return params
