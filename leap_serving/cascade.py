"""The EM-binned cascade of gradient-boosted trees (paper sections 2.2 and 2.4).

Throughput spans six decades, and one regressor under an absolute-error loss spends its trees on
the bulk. The cascade cuts y = ln q into equal-frequency bins, fits one median expert per bin, and
lets EM move each row to the bin whose expert predicts it best, so bins become groups of rows one
expert models well rather than slices of y. A classifier learns the bin from the features; a
prediction is the argmax bin's expert. Every booster is LightGBM's behind scikit-learn's
estimator conventions (``boosters``): no Dagster or MLflow inside.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from sklearn.base import BaseEstimator, RegressorMixin, is_classifier
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from .boosters import EARLY_STOPPING_TOL, GBDTClassifier, GBDTRegressor
from .features import prior_log_q

# Work units of a fit, for a caller that reports progress. Measured on a demo night (scale 0.1,
# fast profile, K = 6): one EM iteration (every expert once on all rows) 14 s, the refit 13 s,
# the classifier 18 s, a single GBDT 11 s.
EM_ITERATION_UNITS = 1.0
CLASSIFIER_UNITS_PER_BIN = 0.2
SINGLE_GBDT_UNITS = 0.75


def cascade_units(
    max_em_iter: int, n_bins: int, expert_overlap: float = 0.0, em_sample: float = 1.0
) -> float:
    """An upper bound on a cascade fit's work (EM may stop early: ``FitProgress.drop``)."""
    if n_bins == 1:
        return SINGLE_GBDT_UNITS
    refit = EM_ITERATION_UNITS * (1.0 + 2.0 * expert_overlap)
    em = max_em_iter * EM_ITERATION_UNITS * em_sample
    return em + refit + CLASSIFIER_UNITS_PER_BIN * n_bins


class FitProgress(Protocol):
    """What ``BinnedCascade.fit`` tells a caller that shows progress (the pipeline's
    ``modeling.progress.Progress``); the runtime never fits, so it carries no reporter."""

    done: float

    def advance(self, what: str, units: float = 1.0) -> None: ...

    def drop(self, units: float) -> None: ...

    def rounds(
        self, estimator: Any, units: float, step: str = "", done: str = ""
    ) -> AbstractContextManager: ...


def _rounds(progress: FitProgress | None, estimator, units: float, step: str, done: str):
    """The boosting rounds of one fit as steps of ``progress``, if there is one."""
    return nullcontext() if progress is None else progress.rounds(estimator, units, step, done)


# The defaults are the best cascade of the backtest (`benchmarks/cascade_settings.py`, 10 nights,
# docs/results.md): 6 bins and probability-weighted mean gating. The paper's own choices are one
# setting among those measured.
N_BINS = 6
GATING = "mean"
PAPER_CASCADE: dict[str, Any] = {
    "n_bins": 13, "gating": "argmax", "oof_folds": 0, "expert_overlap": 0.0,
}  # fmt: skip

# Hyperparameter profiles: ``paper`` as section 2.4 describes it, ``fast`` for the demo and the
# report, ``quick`` for tests. The paper does not size the bin classifier: 31 leaves at rate 0.1
# scored as 63 at 0.05 over three nights (49.9% against 49.8% w20) with 14% fewer trees, fitted
# 3.3x faster and ranked 1.6x faster (benchmarks/classifier_size.py, docs/results.md).
# ``paper`` keeps the paper's trees (3,000 of 255 leaves) but not its rate 0.03: to fit a night
# at the paper's scale within 20 minutes on 2 cores it learns at 0.1, grows each tree on half
# the features, stops an expert once 20 rounds gain less than 3e-5 of held-out error, runs EM on
# 20% of the rows (the final experts refit on all) and the classifier on 15% of each bin's; its
# published w20 stays within a point of the paper's settings (docs/results.md section 3 has the
# night's time and w20, the changelog what each lever bought).
PROFILES: dict[str, dict[str, Any]] = {
    "paper": {
        "max_iter": 3000,
        "max_leaf_nodes": 255,
        "learning_rate": 0.1,
        "early_stopping_tol": 3e-5,
        "em_sample": 0.2,
        "classifier_sample": 0.15,
        "feature_fraction": 0.5,
        "classifier_max_iter": 1000,
        "classifier_max_leaf_nodes": 31,
        "classifier_learning_rate": 0.1,
    },
    "quick": {  # tests and `leap report --quick`: seconds, not accuracy
        "max_iter": 40,
        "max_leaf_nodes": 15,
        "learning_rate": 0.2,
        "classifier_max_iter": 20,
        "classifier_max_leaf_nodes": 15,
        "classifier_learning_rate": 0.2,
        "min_bin_rows": 60,
    },
    "fast": {
        "max_iter": 300,
        "max_leaf_nodes": 31,
        "learning_rate": 0.1,
        "classifier_max_iter": 100,
        "classifier_max_leaf_nodes": 31,
        "classifier_learning_rate": 0.1,
    },
}


def profile_params(profile: str) -> dict[str, Any]:
    try:
        return dict(PROFILES[profile])
    except KeyError:
        raise ValueError(f"profile={profile!r} is not one of {sorted(PROFILES)}") from None


MIN_PRESENT = 20
# fewest held-out rows early stopping is judged on; with fewer, a fit runs its full max_iter
MIN_VALIDATION_ROWS = 20


def fit_booster(
    estimator,
    X: np.ndarray,
    y: np.ndarray,
    validation: np.ndarray | None = None,
    sample_weight: np.ndarray | None = None,
):
    """Fit a histogram GBDT, early-stopped on the ``validation`` rows when given.

    ``validation`` is a row mask of held-out rows, in time order (the window's last day), so
    retries of one job, which carry identical features, cannot sit on both sides of the split
    as they would in scikit-learn's random ``validation_fraction``. Those rows are not trained
    on. With fewer than ``MIN_VALIDATION_ROWS`` of them (a thin bin), the fit trains on every
    row without early stopping rather than on a random split.

    A column with fewer than ``MIN_PRESENT`` values (or 1% of the rows) is given a constant for
    the fit: such a column cannot be binned in the part a fit trains on, and
    then holds no split, so predictions do not depend on it. ``sample_weight`` weighs
    rows in training and in early stopping alike."""
    present = np.sum(~np.isnan(X), axis=0)
    empty = present < max(MIN_PRESENT, 0.01 * len(X))
    if empty.any():
        X = X.copy()
        X[:, empty] = 0.0
    if validation is None:
        return estimator.fit(X, y, sample_weight=sample_weight)
    train = ~validation
    held_out = validation.copy()
    if is_classifier(estimator):
        held_out &= np.isin(y, np.unique(y[train]))  # a class unseen in training cannot score
    if held_out.sum() < MIN_VALIDATION_ROWS or train.sum() < MIN_VALIDATION_ROWS:
        return estimator.set_params(early_stopping=False).fit(X, y, sample_weight=sample_weight)
    if sample_weight is None:
        return estimator.set_params(early_stopping=True).fit(
            X[train], y[train], X_val=X[held_out], y_val=y[held_out]
        )
    return estimator.set_params(early_stopping=True).fit(
        X[train], y[train], sample_weight[train], X_val=X[held_out], y_val=y[held_out],
        sample_weight_val=sample_weight[held_out],
    )  # fmt: skip


def single_gbdt(profile: str = "fast", random_state: int = 0) -> GBDTRegressor:
    """The reference model: one median regressor in log space with the profile's trees and
    early stopping, built as the night's one-bin cascade builds its expert, on every core."""
    params = profile_params(profile) | {"n_bins": 1, "n_threads": None}
    return BinnedCascade(**params, random_state=random_state)._expert()


GATINGS: tuple[str, ...] = ("argmax", "mean", "median")


def bin_probabilities(
    raw: np.ndarray, classes: np.ndarray, n_bins: int, temperature: float
) -> np.ndarray:
    """The classifier's raw scores (one column for two classes, as scikit-learn keeps them) as
    probabilities over every bin, tempered by ``temperature``; a bin the classifier never saw
    gets 0."""
    raw = np.ascontiguousarray(raw, dtype=np.float64)  # one memory order: the same sums
    if raw.ndim == 1 or raw.shape[1] == 1:  # binary: the score is class 1's logit against 0
        raw = np.column_stack([np.zeros(len(raw)), raw.reshape(len(raw))])
    scaled = raw / temperature
    scaled -= scaled.max(axis=1, keepdims=True)
    proba = np.exp(scaled)
    proba /= proba.sum(axis=1, keepdims=True)
    out = np.zeros((len(raw), n_bins))
    out[:, classes] = proba
    return out


def gate_bins(proba: np.ndarray, gating: str, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Which bins' experts each row needs, and their weights: the most probable bin for
    ``argmax`` (the paper); for ``mean`` and ``median`` the ``top_k`` most probable bins,
    weighted by their renormalized probability. Shapes (rows, k)."""
    n, n_bins = proba.shape
    if gating == "argmax" or n_bins == 1:
        return np.argmax(proba, axis=1)[:, None], np.ones((n, 1))
    k = min(top_k, n_bins)
    top = np.argsort(-proba, axis=1, kind="stable")[:, :k]
    weight = np.take_along_axis(proba, top, axis=1)
    return top, weight / np.maximum(weight.sum(axis=1, keepdims=True), 1e-300)


def combine(value: np.ndarray, weight: np.ndarray, gating: str) -> np.ndarray:
    """One ln q per row from the needed experts' predictions (``gate_bins``' shapes): their
    weighted mean, or their weighted median, which suits the experts' absolute-error loss."""
    if value.shape[1] == 1:
        return value[:, 0].copy()
    if gating == "mean":
        return np.sum(weight * value, axis=1)
    order = np.argsort(value, axis=1, kind="stable")
    value = np.take_along_axis(value, order, axis=1)
    weight = np.take_along_axis(weight, order, axis=1)
    median = np.argmax(np.cumsum(weight, axis=1) >= 0.5 - 1e-12, axis=1)
    return value[np.arange(len(value)), median]


def gate(
    proba: np.ndarray,
    predict_expert: Callable[[int, np.ndarray], np.ndarray],
    gating: str,
    top_k: int,
) -> np.ndarray:
    """Combine the experts into one ln q per row from the bin probabilities.

    ``predict_expert(b, rows)`` returns expert b's ln q for the rows of a boolean mask, in row
    order; every needed expert runs once over its rows."""
    top, weight = gate_bins(proba, gating, top_k)
    value = np.empty(top.shape)
    for b in np.unique(top):
        rows, slot = np.nonzero(top == b)  # rows ascending, each at most once
        mask = np.zeros(len(top), dtype=bool)
        mask[rows] = True
        value[rows, slot] = predict_expert(int(b), mask)
    return combine(value, weight, gating)


def identical_row_folds(X: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
    """A fold per row, identical rows (a job's retries) always in the same fold."""
    rows = np.ascontiguousarray(np.nan_to_num(X, nan=np.inf))
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, inverse = np.unique(keys, return_inverse=True)
    groups = np.random.default_rng(seed).permutation(int(inverse.max()) + 1)
    return groups[inverse.ravel()] % n_folds


def _compact(bins: np.ndarray, n_bins: int) -> tuple[np.ndarray, int, int]:
    """Renumber the bins that still hold rows 0..m-1; returns (bins, m, bins dropped)."""
    used = np.flatnonzero(np.bincount(bins, minlength=n_bins))
    return np.searchsorted(used, bins), len(used), n_bins - len(used)


class BinnedCascade(RegressorMixin, BaseEstimator):
    """EM-binned cascade of median experts behind a bin classifier; predicts y = ln q.

    Parameters
    ----------
    n_bins : int
        K, the number of equal-frequency bins of y.
    max_em_iter : int
        Most EM iterations (fit experts, move rows).
    move_tol : float
        EM stops once fewer than this share of rows moves in an iteration.
    min_bin_rows : int
        A bin with fewer rows cannot hold an expert: at the start it merges into its smaller
        neighbour; during EM its rows move to their next-best bin.
    max_iter, max_leaf_nodes, learning_rate : experts' boosting settings.
    classifier_max_iter, classifier_max_leaf_nodes, classifier_learning_rate : the classifier's.
    validation_fraction, n_iter_no_change : early stopping of every booster (the fraction only
        when ``fit`` is given no ``validation`` rows).
    n_threads : int or None
        OpenMP threads per fit (None: the library default). One is fastest on a shared 2-core box
        when ``n_jobs`` experts fit at once; a fit that runs alone (one bin, the classifier)
        and EM's scoring take ``n_jobs`` threads.
    gating : {"argmax", "mean", "median"}
        How experts combine at prediction: the most probable bin's expert (the paper), or the
        probability-weighted mean or median of the ``gate_top_k`` most probable bins' experts.
    gate_top_k : int
        Bins a soft gating combines (the rest carry little probability and cost an expert run).
    oof_folds : int
        0: EM scores each expert on the rows it trained on (the paper). k >= 2: out-of-fold EM,
        rows are reassigned, and the classifier's labels chosen, by experts fitted on the other
        folds (identical rows share a fold); the final experts then train on every row.
    expert_overlap : float
        0: each final expert trains on its bin's rows only (the paper). w > 0: also on the rows of
        the bins next to it in level (median y), weighted w, so a near miss of the classifier
        lands on an expert that has seen such rows instead of one that clamps to its slice.
    residual_on_prior : bool
        False: the model predicts ln q (the paper). True: it predicts ln q minus the history's
        prior (``features.prior_log_q``, the training median where a row has none) and serves
        prior plus prediction, so trees learn corrections to a level they cannot extrapolate,
        as a type new to a job needs.
    random_state : int
    n_jobs : int or None
        Experts fitted at once, through joblib: None is one unless a ``joblib.parallel_config``
        says otherwise, so the same code spreads the fits over a Dask or Ray cluster with
        ``joblib.parallel_config(backend="dask")``. Every fit is seeded: the model is the same
        whatever runs it.
    em_sample : float
        Share of the rows (a seeded random subset, the same in every iteration) the experts
        train on during EM. Until EM ends only those rows are scored and moved (bins that
        would keep fewer than ``min_bin_rows * em_sample`` of them close); the last iteration
        scores and moves every row, and the final experts refit on all rows. 1.0: all rows
        (the paper).
    classifier_sample : float
        Share of each bin's rows the bin classifier trains on (every row of a bin that would
        keep fewer than ``min_bin_rows``). 1.0: all rows (the paper).
    subsample, feature_fraction : float
        Share of the rows and of the columns each tree of every booster (experts, classifier)
        is grown on, drawn anew per tree with the seed (``boosters``). 1.0: all (the paper).
    early_stopping_tol : float
        An expert stops once ``n_iter_no_change`` rounds improve its held-out absolute error by
        less than this (the classifier keeps ``boosters.EARLY_STOPPING_TOL``, scikit-learn's).

    Attributes
    ----------
    bin_edges_ : ndarray of the inner edges of y that made the initial bins (after merges).
    n_bins_ : number of bins holding an expert.
    bins_merged_ : initial bins merged away for having fewer than ``min_bin_rows`` rows.
    em_iterations_ : EM iterations run.
    rows_moved_ : share of rows that changed bin, per iteration (of the sampled rows with
        ``em_sample``).
    rows_rescued_ : rows moved out of bins that EM left too small, per iteration.
    bin_rows_ : rows per final bin.
    experts_ : the fitted median regressor of each bin.
    classifier_ : the bin classifier.
    n_trees_per_expert_ : trees each expert kept after early stopping.
    temperature_ : the classifier's probabilities are calibrated by this temperature, fitted on
        the ``validation`` rows (1.0 without them).
    fit_seconds_ : wall time per phase (``em``, ``refit``, ``classifier``).

    Examples
    --------
    >>> model = BinnedCascade(**profile_params("fast")).fit(X, np.log(throughput))
    >>> np.exp(model.predict(X_new))  # predicted throughput
    """

    def __init__(
        self,
        n_bins: int = N_BINS,
        max_em_iter: int = 3,
        move_tol: float = 0.02,
        min_bin_rows: int = 200,
        max_iter: int = 300,
        max_leaf_nodes: int = 31,
        learning_rate: float = 0.1,
        classifier_max_iter: int = 100,
        classifier_max_leaf_nodes: int = 31,
        classifier_learning_rate: float = 0.1,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 20,
        n_threads: int | None = 1,
        gating: str = GATING,
        gate_top_k: int = 3,
        oof_folds: int = 0,
        expert_overlap: float = 0.0,
        residual_on_prior: bool = False,
        random_state: int = 0,
        n_jobs: int | None = None,
        em_sample: float = 1.0,
        classifier_sample: float = 1.0,
        subsample: float = 1.0,
        feature_fraction: float = 1.0,
        early_stopping_tol: float = EARLY_STOPPING_TOL,
    ) -> None:
        self.n_bins = n_bins
        self.max_em_iter = max_em_iter
        self.move_tol = move_tol
        self.min_bin_rows = min_bin_rows
        self.max_iter = max_iter
        self.max_leaf_nodes = max_leaf_nodes
        self.learning_rate = learning_rate
        self.classifier_max_iter = classifier_max_iter
        self.classifier_max_leaf_nodes = classifier_max_leaf_nodes
        self.classifier_learning_rate = classifier_learning_rate
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.n_threads = n_threads
        self.gating = gating
        self.gate_top_k = gate_top_k
        self.oof_folds = oof_folds
        self.expert_overlap = expert_overlap
        self.residual_on_prior = residual_on_prior
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.em_sample = em_sample
        self.classifier_sample = classifier_sample
        self.subsample = subsample
        self.feature_fraction = feature_fraction
        self.early_stopping_tol = early_stopping_tol

    # -- fitting ---------------------------------------------------------------------------------

    def _expert(self) -> GBDTRegressor:
        return GBDTRegressor(
            max_iter=self.max_iter,
            max_leaf_nodes=self.max_leaf_nodes,
            learning_rate=self.learning_rate,
            early_stopping=True,
            validation_fraction=self.validation_fraction,
            n_iter_no_change=self.n_iter_no_change,
            random_state=self.random_state,
            n_threads=self.n_threads,
            subsample=self.subsample,
            feature_fraction=self.feature_fraction,
            early_stopping_tol=self.early_stopping_tol,
        )

    def _check_params(self, n_rows: int | None = None) -> None:
        """Refuse a parameter out of its range, naming it (before a fit, and when a model file
        is loaded: ``n_rows`` None, the rows are not checked)."""
        if self.n_bins < 1:
            raise ValueError(f"n_bins={self.n_bins!r} must be at least 1")
        if self.max_em_iter < 0:
            raise ValueError(f"max_em_iter={self.max_em_iter!r} must be at least 0")
        if not 0 <= self.move_tol < 1:
            raise ValueError(f"move_tol={self.move_tol!r} must be in [0, 1)")
        if self.min_bin_rows < 2:
            raise ValueError(f"min_bin_rows={self.min_bin_rows!r} must be at least 2")
        if self.gating not in GATINGS:
            raise ValueError(f"gating={self.gating!r} is not one of {GATINGS}")
        if self.gate_top_k < 1:
            raise ValueError(f"gate_top_k={self.gate_top_k!r} must be at least 1")
        if self.oof_folds < 0 or self.oof_folds == 1:
            raise ValueError(f"oof_folds={self.oof_folds!r} must be 0 (off) or at least 2")
        if not 0.0 <= self.expert_overlap <= 1.0:
            raise ValueError(f"expert_overlap={self.expert_overlap!r} must be in [0, 1]")
        if not self.early_stopping_tol >= 0.0:
            raise ValueError(f"early_stopping_tol={self.early_stopping_tol!r} must be >= 0")
        for name in ("em_sample", "classifier_sample", "subsample", "feature_fraction"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be in (0, 1]")
        if n_rows is not None and n_rows < self.min_bin_rows:
            raise ValueError(
                f"{n_rows} training rows are fewer than min_bin_rows={self.min_bin_rows}"
            )

    def _initial_bins(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Equal-frequency bins of y; bins below ``min_bin_rows`` merge into a smaller neighbour."""
        edges = np.unique(np.quantile(y, np.linspace(0, 1, self.n_bins + 1)[1:-1]))
        merged = self.n_bins - 1 - len(edges)  # tied quantiles: bins that were empty
        while len(edges):
            counts = np.bincount(np.searchsorted(edges, y, side="right"), minlength=len(edges) + 1)
            small = np.flatnonzero(counts < self.min_bin_rows)
            if not len(small):
                break
            b = small[np.argmin(counts[small])]
            if b == 0:
                drop = 0
            elif b == len(counts) - 1:
                drop = b - 1
            else:  # merge into the smaller neighbour: drop the edge between them
                drop = b - 1 if counts[b - 1] <= counts[b + 1] else b
            edges = np.delete(edges, drop)
            merged += 1
        return edges, np.searchsorted(edges, y, side="right"), merged

    def _fit_experts(
        self,
        X: np.ndarray,
        y: np.ndarray,
        bins: np.ndarray,
        n_bins: int,
        validation: np.ndarray | None,
        overlap: float = 0.0,
        progress: FitProgress | None = None,
        step: str = "",
        units: float = EM_ITERATION_UNITS,
    ) -> list[GBDTRegressor | None]:
        """One expert per bin (None for a bin without rows here); with ``overlap``, each also
        trains on its neighbours in level, weighted ``overlap``. Each expert advances
        ``progress`` by its share of ``units``."""
        if overlap > 0 and n_bins > 1:
            levels = [
                np.median(y[bins == b]) if np.any(bins == b) else np.inf for b in range(n_bins)
            ]
            position = np.argsort(np.argsort(levels, kind="stable"), kind="stable")
            row_position = position[bins]
        fits, shares = {}, {}
        for b in range(n_bins):
            own = bins == b
            if not own.any():
                continue
            weight = None
            rows = own
            if overlap > 0 and n_bins > 1:
                rows = np.abs(row_position - position[b]) <= 1
                weight = np.where(own[rows], 1.0, overlap)
            held_out = None if validation is None else validation[rows]
            fits[b] = delayed(fit_booster)(self._expert(), X[rows], y[rows], held_out, weight)
            shares[b] = units * own.sum() / len(y)
        experts: list[GBDTRegressor | None] = [None] * n_bins

        def what(b: int) -> str:
            return f"{step}expert {b + 1}/{n_bins}" if n_bins > 1 else "fitted"

        if len(fits) == 1:  # nothing to run beside it: the fit gets every thread n_jobs allows
            ((b, (function, args, kwargs)),) = fits.items()  # args[0]: the expert to fit
            prefix = f"{what(b)}, " if n_bins > 1 else step
            args[0].set_params(n_threads=self._threads())
            with _rounds(progress, args[0], shares[b], prefix, what(b)):
                experts[b] = function(*args, **kwargs)
            return experts
        done = Parallel(n_jobs=self.n_jobs, return_as="generator")(fits.values())
        for b, expert in zip(fits, done, strict=True):  # in bin order, each once it is fitted
            experts[b] = expert
            if progress is not None:
                progress.advance(what(b), shares[b])
        return experts

    def _threads(self) -> int | None:
        """Threads for work that runs alone (a lone fit, the classifier, EM's scoring): as
        many as ``n_jobs`` experts would take, at least ``n_threads``."""
        if self.n_threads is None:
            return None
        return max(self.n_threads, min(effective_n_jobs(self.n_jobs), os.cpu_count() or 1))

    def _errors(self, experts: list, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Every row's absolute error under every expert (inf for a bin without one), through
        the packed trees on ``n_jobs`` threads."""
        threads = self._threads() or os.cpu_count() or 1
        errors = np.full((len(y), len(experts)), np.inf)
        for b, expert in enumerate(experts):
            if expert is not None:
                errors[:, b] = np.abs(expert.forest().predict_many(X, threads) - y)
        return errors

    def _em_errors(
        self,
        X,
        y,
        bins,
        n_bins,
        validation,
        folds,
        progress=None,
        step="",
        units=1.0,
        sample=None,
    ) -> tuple[np.ndarray, list | None]:
        """Every row's error under every bin's expert, and the experts when they fit all rows.
        With a ``sample`` mask (out-of-fold EM) the experts fit the sampled rows of the other
        folds."""
        if folds is None:
            experts = self._fit_experts(X, y, bins, n_bins, validation, 0.0, progress, step, units)
            return self._errors(experts, X, y), experts
        errors = np.empty((len(y), n_bins))
        for f in range(self.oof_folds):
            train, score = folds != f, folds == f
            if sample is not None:
                train = train & sample
            experts = self._fit_experts(
                X[train], y[train], bins[train], n_bins,
                None if validation is None else validation[train], 0.0, progress,
                f"{step}fold {f + 1}/{self.oof_folds}, ", units / self.oof_folds,
            )  # fmt: skip
            errors[score] = self._errors(experts, X[score], y[score])
        return errors, None

    def _sampled_em_step(
        self, X, y, bins, n_bins, validation, sample, last, progress, step, units
    ) -> tuple[np.ndarray, int, float, int, bool]:
        """One EM iteration with the experts fitted on the ``sample`` rows. Only those rows are
        scored and moved until EM ends (``last``, or fewer than ``move_tol`` of them moved):
        then every row is scored once, under these experts, and moved to its best one. Returns
        the bins, their number, the share of sampled rows moved, the rows rescued and whether
        EM has ended."""
        experts = self._fit_experts(
            X[sample], y[sample], bins[sample], n_bins,
            None if validation is None else validation[sample], 0.0, progress, step,
            units * self.em_sample,
        )  # fmt: skip
        if not last:
            min_rows = max(2, round(self.min_bin_rows * self.em_sample))
            errors = self._errors(experts, X[sample], y[sample])
            sample_bins, rescued = self._reassign(errors, min_rows)
            share = float(np.mean(sample_bins != bins[sample]))
            if share >= self.move_tol:
                bins = bins.copy()
                bins[sample] = sample_bins
                return bins, n_bins, share, rescued, False
        new_bins, rescued = self._reassign(self._errors(experts, X, y))
        if last:
            share = float(np.mean(new_bins[sample] != bins[sample]))
        bins, n_bins, _ = _compact(new_bins, n_bins)
        return bins, n_bins, share, rescued, True

    def _reassign(self, errors: np.ndarray, min_rows: int | None = None) -> tuple[np.ndarray, int]:
        """Each row to its best expert; rows of bins left with fewer than ``min_rows`` (default
        ``min_bin_rows``) go to their next best."""
        min_rows = self.min_bin_rows if min_rows is None else min_rows
        n_bins = errors.shape[1]
        errors = errors.copy()
        bins = np.argmin(errors, axis=1)
        rescued = 0
        while True:
            counts = np.bincount(bins, minlength=n_bins)
            small = np.flatnonzero((counts > 0) & (counts < min_rows))
            if not len(small):
                return bins, rescued
            b = small[np.argmin(counts[small])]
            rows = bins == b
            errors[:, b] = np.inf  # the bin is closed for this iteration
            bins[rows] = np.argmin(errors[rows], axis=1)
            rescued += int(rows.sum())

    def fit(self, X, y, validation=None, progress: FitProgress | None = None) -> BinnedCascade:
        """Fit on ``X``, ``y``; ``validation`` optionally marks the rows every booster early-stops
        on (in time order: the window's last day), which none of them trains on. ``progress``
        (``cascade_units`` of work) is advanced as each expert and the classifier finish, and
        by the rounds of a fit that runs alone in this process (``FitProgress.rounds``)."""
        X, y = validate_data(self, X, y, ensure_all_finite="allow-nan", dtype=np.float64)
        self._check_params(len(y))
        if validation is not None:
            validation = np.asarray(validation, dtype=bool)
            if validation.shape != y.shape:
                raise ValueError(f"validation has shape {validation.shape}, the rows are {y.shape}")
        seconds = {"em": 0.0, "refit": 0.0, "classifier": 0.0}
        if self.residual_on_prior:
            self.prior_fallback_ = float(np.median(y))
        y = y - self.offset(X)
        with threadpool_limits(self.n_threads):
            edges, bins, merged = self._initial_bins(y)
            n_bins = len(edges) + 1
            experts = None
            moved, rescued_log = [], []
            folds = (
                identical_row_folds(X, self.oof_folds, self.random_state)
                if self.oof_folds
                else None
            )
            planned = cascade_units(
                self.max_em_iter, self.n_bins, self.expert_overlap, self.em_sample
            )
            done_before = progress.done if progress is not None else 0.0
            em_units = EM_ITERATION_UNITS if n_bins > 1 else SINGLE_GBDT_UNITS
            start = time.perf_counter()
            sample = None
            if self.em_sample < 1.0 and n_bins > 1:
                rng = np.random.default_rng(self.random_state)
                sample = rng.random(len(y)) < self.em_sample
            for iteration in range(self.max_em_iter):
                step = f"EM iteration {iteration + 1}/{self.max_em_iter}, " if n_bins > 1 else ""
                if n_bins == 1:  # one bin (a single GBDT): no row can move, so none is scored
                    experts = self._fit_experts(
                        X, y, bins, n_bins, validation, 0.0, progress, step, em_units
                    )
                    moved.append(0.0)
                    rescued_log.append(0)
                    break
                if sample is not None and folds is None:
                    bins, n_bins, share, rescued, ended = self._sampled_em_step(
                        X, y, bins, n_bins, validation, sample,
                        iteration == self.max_em_iter - 1, progress, step, em_units,
                    )  # fmt: skip
                    moved.append(share)
                    rescued_log.append(rescued)
                    if ended:
                        break
                    continue
                errors, experts = self._em_errors(
                    X, y, bins, n_bins, validation, folds, progress, step, em_units, sample
                )
                new_bins, rescued = self._reassign(errors)
                share = float(np.mean(new_bins != bins))
                moved.append(share)
                rescued_log.append(rescued)
                bins, n_bins, dropped = _compact(new_bins, n_bins)
                if dropped:  # a bin lost every row: its expert is gone with it
                    experts = None
                if share < self.move_tol:
                    break
            seconds["em"] = time.perf_counter() - start
            start = time.perf_counter()
            unchanged = experts is not None and moved and moved[-1] == 0.0
            if unchanged and (not self.expert_overlap or n_bins == 1):
                self.experts_ = experts  # nothing moved: the last experts already fit the bins
            else:
                self.experts_ = self._fit_experts(
                    X, y, bins, n_bins, validation, self.expert_overlap, progress, "refit, ",
                    EM_ITERATION_UNITS * (1.0 + 2.0 * self.expert_overlap),
                )  # fmt: skip
            seconds["refit"] = time.perf_counter() - start
            classifier_units = CLASSIFIER_UNITS_PER_BIN * n_bins if n_bins > 1 else 0.0
            if progress is not None:  # EM converged early, or bins merged: less work left
                progress.drop(planned - (progress.done - done_before) - classifier_units)
            start = time.perf_counter()
            self.classifier_ = self._fit_classifier(
                X, bins, n_bins, validation, progress, classifier_units
            )
            self.n_bins_ = n_bins
            self.temperature_ = self._calibrate(X, bins, validation)
            seconds["classifier"] = time.perf_counter() - start
        self.bin_edges_ = edges
        self.bins_merged_ = merged
        self.em_iterations_ = len(moved)
        self.rows_moved_ = moved
        self.rows_rescued_ = rescued_log
        self.bin_rows_ = np.bincount(bins, minlength=n_bins)
        self.n_trees_per_expert_ = [int(e.n_iter_) for e in self.experts_]
        self.fit_seconds_ = seconds
        return self

    def _fit_classifier(
        self,
        X: np.ndarray,
        bins: np.ndarray,
        n_bins: int,
        validation: np.ndarray | None,
        progress: FitProgress | None = None,
        units: float = 0.0,
    ) -> GBDTClassifier | None:
        """The bin classifier; its rounds advance ``progress`` by ``units`` in all."""
        if n_bins == 1:
            return None  # one bin: nothing to choose
        if self.classifier_sample < 1.0:
            keep = self._classifier_rows(bins, n_bins)
            X, bins = X[keep], bins[keep]
            validation = None if validation is None else validation[keep]
        classifier = GBDTClassifier(
            max_iter=self.classifier_max_iter,
            max_leaf_nodes=self.classifier_max_leaf_nodes,
            learning_rate=self.classifier_learning_rate,
            early_stopping=True,
            validation_fraction=self.validation_fraction,
            n_iter_no_change=self.n_iter_no_change,
            random_state=self.random_state,
            n_threads=self._threads(),
            subsample=self.subsample,
            feature_fraction=self.feature_fraction,
        )
        with _rounds(progress, classifier, units, "bin classifier, ", "bin classifier"):
            return fit_booster(classifier, X, bins, validation)

    def _classifier_rows(self, bins: np.ndarray, n_bins: int) -> np.ndarray:
        """A seeded share of each bin's rows, all of a bin that would keep too few."""
        rng = np.random.default_rng(self.random_state + 1)
        keep = rng.random(len(bins)) < self.classifier_sample
        counts = np.bincount(bins, minlength=n_bins)
        small = counts * self.classifier_sample < self.min_bin_rows
        return keep | small[bins]

    def _calibrate(self, X: np.ndarray, bins: np.ndarray, validation: np.ndarray | None) -> float:
        """The temperature that minimizes the log loss of the bin probabilities on the held-out
        rows, whose bins were chosen by experts that did not train on them."""
        if self.classifier_ is None or validation is None or validation.sum() < MIN_VALIDATION_ROWS:
            return 1.0
        raw = self.classifier_.decision_function(X[validation])
        truth = bins[validation]
        classes = self.classifier_.classes_.astype(int)

        def log_loss(temperature: float) -> float:
            proba = bin_probabilities(raw, classes, self.n_bins_, temperature)
            return float(-np.mean(np.log(np.maximum(proba[np.arange(len(truth)), truth], 1e-12))))

        grid = np.geomspace(0.25, 4.0, 41)
        return float(grid[np.argmin([log_loss(t) for t in grid])])

    # -- prediction ------------------------------------------------------------------------------

    def predict_proba_bins(self, X) -> np.ndarray:
        """Calibrated probability of every bin per row (columns are bins 0 .. n_bins_ - 1)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, ensure_all_finite="allow-nan", dtype=np.float64)
        if self.classifier_ is None:
            return np.ones((len(X), 1))
        raw = self.classifier_.decision_function(X)
        classes = self.classifier_.classes_.astype(int)
        return bin_probabilities(raw, classes, self.n_bins_, getattr(self, "temperature_", 1.0))

    def predict_bins(self, X) -> tuple[np.ndarray, np.ndarray]:
        """The most probable bin per row and its (calibrated) probability."""
        proba = self.predict_proba_bins(X)
        best = np.argmax(proba, axis=1)
        return best, proba[np.arange(len(proba)), best]

    def offset(self, X: np.ndarray) -> np.ndarray:
        """What the experts' predictions are added to: the prior with ``residual_on_prior``
        (the training median where a row has none), else 0."""
        if not self.residual_on_prior:
            return np.zeros(len(X))
        prior = prior_log_q(np.asarray(X, dtype=np.float64))
        return np.where(np.isnan(prior), self.prior_fallback_, prior)

    def predict(self, X) -> np.ndarray:
        """Predicted ln q, the experts combined by ``gating`` (exponentiate for throughput)."""
        proba = self.predict_proba_bins(X)
        X = np.asarray(X, dtype=np.float64)
        return self.offset(X) + gate(
            proba, lambda b, rows: self.experts_[b].predict(X[rows]), self.gating, self.gate_top_k
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags
