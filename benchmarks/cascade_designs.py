"""Cascade designs that lean on the single GBDT, for ``cascade_settings.py --group designs``.

At the paper profile the night's cascade loses about 8 points of w20 to the single GBDT, and the
levers (``--group levers``) point at its gating: a bin classifier that must find, from the
features alone, the bin whose expert suits a row. Each design here changes where the bins come
from or what gates them:

- ``gbdt_gated``: equal-frequency bins of ln q with one expert per bin (no EM); a row goes to the
  bin its single-GBDT prediction falls in. No classifier.
- ``gbdt_corrections``: bins of the single GBDT's own prediction; each bin's expert learns a
  correction to it (the residual ln q - g(x), where LightGBM's ``init_score`` would start it), and
  a row gets g(x) plus its bin's correction. No classifier.
- ``classifier_all_rows``: the night's cascade with its classifier on every row; gated over the
  most probable bin and its two neighbours in level (``neighbours``), weighted by their
  probabilities, beside the shipped gatings.
- ``em_on_residuals``: EM's bins, experts and classifier on the single GBDT's residuals; a row
  gets g(x) plus the gated correction.

g is the night's single GBDT (the profile's one-bin cascade), fitted once per night on the same
rows and kept by the caller; its residuals are in-sample, as a boosting continuation sees them.
Every design's fit time includes g's. Each design returns its day-D predictions (ln q) by gating.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.gating import GATINGS, combine
from leap_serving.model.profiles import N_BINS

# what a design is given: the profile's cascade parameters, the window's X and ln q, its
# validation mask, g on the window and on day D, day D's X, and each fit's experts at once
Design = Callable[..., dict[str, np.ndarray]]


def _bin_experts(params: dict, X, target, bins, validation, n_jobs) -> list:
    """One expert per bin (the cascade's own expert fit: its trees, early stopping, threads)."""
    fitter = BinnedCascade(**params, n_jobs=n_jobs)
    return fitter._fit_experts(X, target, bins, int(bins.max()) + 1, validation)


def _predict_by_bin(experts: list, X: np.ndarray, bins: np.ndarray) -> np.ndarray:
    out = np.zeros(len(X))
    for b, expert in enumerate(experts):
        rows = bins == b
        if rows.any() and expert is not None:
            out[rows] = expert.predict(X[rows])
    return out


def gbdt_gated(params, X, y, validation, g_train, X_day, g_day, n_jobs) -> dict:
    edges = np.unique(np.quantile(y, np.linspace(0, 1, N_BINS + 1)[1:-1]))
    experts = _bin_experts(params, X, y, np.searchsorted(edges, y), validation, n_jobs)
    return {"argmax": _predict_by_bin(experts, X_day, np.searchsorted(edges, g_day))}


def gbdt_corrections(params, X, y, validation, g_train, X_day, g_day, n_jobs) -> dict:
    edges = np.unique(np.quantile(g_train, np.linspace(0, 1, N_BINS + 1)[1:-1]))
    bins = np.searchsorted(edges, g_train)
    experts = _bin_experts(params, X, y - g_train, bins, validation, n_jobs)
    return {"argmax": g_day + _predict_by_bin(experts, X_day, np.searchsorted(edges, g_day))}


def neighbour_gating(model: BinnedCascade, X: np.ndarray, X_levels: np.ndarray) -> np.ndarray:
    """The most probable bin and its two neighbours in level (each expert's median prediction on
    ``X_levels``), weighted by their renormalized probabilities."""
    proba = model.predict_proba_bins(X)
    levels = [np.median(expert.predict(X_levels)) for expert in model.experts_]
    order = np.argsort(levels, kind="stable")  # bins by level
    position = np.argsort(order, kind="stable")
    best = position[np.argmax(proba, axis=1)]
    slots = np.clip(best[:, None] + np.array([-1, 0, 1]), 0, len(order) - 1)
    bins = order[slots]
    weight = np.take_along_axis(proba, bins, axis=1)
    weight[:, 0] *= slots[:, 0] != slots[:, 1]  # an end bin is not its own neighbour
    weight[:, 2] *= slots[:, 2] != slots[:, 1]
    weight /= np.maximum(weight.sum(axis=1, keepdims=True), 1e-300)
    value = np.column_stack([model.experts_[b].predict(X) for b in range(len(order))])
    return combine(np.take_along_axis(value, bins, axis=1), weight, "mean")


def _gatings(model: BinnedCascade, X_day: np.ndarray, X_levels: np.ndarray) -> dict:
    predictions = {g: model.set_params(gating=g).predict(X_day) for g in GATINGS}
    predictions["neighbours"] = neighbour_gating(model, X_day, X_levels)
    return predictions


def _level_rows(X: np.ndarray, n: int = 20_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return X[rng.choice(len(X), size=min(n, len(X)), replace=False)]


def classifier_all_rows(params, X, y, validation, g_train, X_day, g_day, n_jobs) -> dict:
    model = BinnedCascade(**(params | {"classifier_sample": 1.0}), n_jobs=n_jobs)
    model.fit(X, y, validation=validation)
    return _gatings(model, X_day, _level_rows(X))


def em_on_residuals(params, X, y, validation, g_train, X_day, g_day, n_jobs) -> dict:
    model = BinnedCascade(**params, n_jobs=n_jobs).fit(X, y - g_train, validation=validation)
    return {g: g_day + p for g, p in _gatings(model, X_day, _level_rows(X)).items()}


def single_gbdt(params, X, y, validation, g_train, X_day, g_day, n_jobs) -> dict:
    return {"argmax": g_day}  # g itself: the reference every design is measured against


DESIGNS: dict[str, Design] = {
    "single_gbdt": single_gbdt,
    "gbdt_gated": gbdt_gated,
    "gbdt_corrections": gbdt_corrections,
    "classifier_all_rows": classifier_all_rows,
    "em_on_residuals": em_on_residuals,
}
# the designs that build on g: the one whose fit does not use it (classifier_all_rows) is timed
# without g's seconds
USES_SINGLE_GBDT = {"single_gbdt", "gbdt_gated", "gbdt_corrections", "em_on_residuals"}
