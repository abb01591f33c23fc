"""The EM-binned cascade of gradient-boosted trees (paper sections 2.2 and 2.4).

Throughput spans six decades, and one regressor under an absolute-error loss spends its trees on
the bulk. The cascade cuts y = ln q into equal-frequency bins, fits one median expert per bin, and
lets EM move each row to the bin whose expert predicts it best, so bins become groups of rows one
expert models well rather than slices of y. A classifier learns the bin from the features; a
prediction is the argmax bin's expert. Every booster is LightGBM's behind scikit-learn's
estimator conventions (``boosters``): no Dagster or MLflow inside.

``BinnedCascade`` holds the parameters, the order of a fit and the prediction; its parts live
beside it: the profiles (``profiles``), the fit helpers (``fitting``), EM and the experts
(``em``), the bin classifier and its calibration (``bin_classifier``), the gating maths
(``gating``).
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from ..launch.features import cost_log_q, prior_log_q
from .bin_classifier import BinClassifierFitting
from .boosters import EARLY_STOPPING_TOL, MIN_DATA_IN_BIN, MIN_DATA_IN_LEAF, GBDTRegressor
from .em import ExpertFitting
from .fitting import (
    CLASSIFIER_UNITS_PER_BIN,
    EM_ITERATION_UNITS,
    SINGLE_GBDT_UNITS,
    FitProgress,
    cascade_units,
)
from .gating import GATINGS, bin_probabilities, gate
from .profiles import GATING, N_BINS, profile_params


def make_single_gbdt_booster(profile: str = "fast", random_state: int = 0) -> GBDTRegressor:
    """The reference model: one median regressor in log space with the profile's trees and
    early stopping, built as the night's one-bin cascade builds its expert, on every core."""
    params = profile_params(profile) | {"n_bins": 1, "n_threads": None}
    return BinnedCascade(**params, random_state=random_state)._expert()


# What the trees may learn (``BinnedCascade(target=...)``): ln q, its residual over the history's
# prior, or ln efficiency over the per-layer cost prior.
TARGETS = ("log_q", "residual", "efficiency")

# An efficiency model's bound over the cost prior: the 99th percentile of the training rows'
# excess (0 where none beat the roofline), never above ln 4, which a model file may not exceed.
EFFICIENCY_CAP_QUANTILE = 0.99
EFFICIENCY_CAP_MAX = float(np.log(4.0))


class BinnedCascade(ExpertFitting, BinClassifierFitting, RegressorMixin, BaseEstimator):
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
    target : {"log_q", "residual", "efficiency"}
        What the trees learn. "log_q": ln q (the paper). "residual": ln q minus the history's
        prior (``launch.features.prior_log_q``, the training median where a row has none),
        served as prior plus prediction, so trees learn corrections to a level they cannot
        extrapolate, as a type new to a job needs. "efficiency": ln efficiency, ln q minus the
        per-layer cost model's prior (``cost_model``; the history's prior, then the training
        median, where a row has no architecture), its ln q bounded by the cost prior plus
        ``efficiency_cap_`` so it never promises more than the roofline (cap 0), or than the
        99th percentile of the training rows' excess where the spec table understates a type
        (an fp32 job on TF32 cores) or the prior a pipeline's overlap. A bounded efficiency
        times a physical prior carries to a type faster than any in training; trees on ln q
        clamp to the fastest they saw. (One parameter, where two booleans once let one
        override the other.)
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
    min_data_in_leaf, min_data_in_bin : int
        Rows a leaf and a histogram bin need, in every booster (LightGBM's parameters; 20 and
        3 unless a fit on few rows lowers them, ``small_data.fit_to_rows``).

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
        target: str = "log_q",
        random_state: int = 0,
        n_jobs: int | None = None,
        em_sample: float = 1.0,
        classifier_sample: float = 1.0,
        subsample: float = 1.0,
        feature_fraction: float = 1.0,
        early_stopping_tol: float = EARLY_STOPPING_TOL,
        min_data_in_leaf: int = MIN_DATA_IN_LEAF,
        min_data_in_bin: int = MIN_DATA_IN_BIN,
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
        self.target = target
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.em_sample = em_sample
        self.classifier_sample = classifier_sample
        self.subsample = subsample
        self.feature_fraction = feature_fraction
        self.early_stopping_tol = early_stopping_tol
        self.min_data_in_leaf = min_data_in_leaf
        self.min_data_in_bin = min_data_in_bin

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
            min_data_in_leaf=self.min_data_in_leaf,
            min_data_in_bin=self.min_data_in_bin,
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
        if self.target not in TARGETS:
            raise ValueError(f"target={self.target!r} is not one of {TARGETS}")
        if self.gating not in GATINGS:
            raise ValueError(f"gating={self.gating!r} is not one of {GATINGS}")
        if self.gate_top_k < 1:
            raise ValueError(f"gate_top_k={self.gate_top_k!r} must be at least 1")
        if self.oof_folds < 0 or self.oof_folds == 1:
            raise ValueError(f"oof_folds={self.oof_folds!r} must be 0 (off) or at least 2")
        if not 0.0 <= self.expert_overlap <= 1.0:
            raise ValueError(f"expert_overlap={self.expert_overlap!r} must be in [0, 1]")
        for name in ("min_data_in_leaf", "min_data_in_bin"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be at least 1")
        if not self.early_stopping_tol >= 0.0:
            raise ValueError(f"early_stopping_tol={self.early_stopping_tol!r} must be >= 0")
        for name in ("em_sample", "classifier_sample", "subsample", "feature_fraction"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be in (0, 1]")
        if n_rows is not None and n_rows < self.min_bin_rows:
            raise ValueError(
                f"{n_rows} training rows are fewer than min_bin_rows={self.min_bin_rows}"
            )

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
        if self.target != "log_q":
            self.prior_fallback_ = float(np.median(y))
        if self.target == "efficiency":
            over_roofline = y - cost_log_q(np.asarray(X, dtype=np.float64))
            known = over_roofline[np.isfinite(over_roofline)]
            # the 99th percentile: one outlier row must not lift the bound for every launch
            excess = float(np.quantile(known, EFFICIENCY_CAP_QUANTILE)) if len(known) else 0.0
            self.efficiency_cap_ = min(max(0.0, excess), EFFICIENCY_CAP_MAX)
        y = y - self._offset(X)
        with threadpool_limits(self.n_threads):
            edges, bins, merged = self._initial_bins(y)
            n_bins = len(edges) + 1
            planned = cascade_units(
                self.max_em_iter, self.n_bins, self.expert_overlap, self.em_sample
            )
            done_before = progress.done if progress is not None else 0.0
            em_units = EM_ITERATION_UNITS if n_bins > 1 else SINGLE_GBDT_UNITS
            start = time.perf_counter()
            bins, n_bins, experts, moved, rescued_log = self._em(
                X, y, bins, n_bins, validation, progress, em_units
            )
            seconds["em"] = time.perf_counter() - start
            start = time.perf_counter()
            unchanged = experts is not None and moved and moved[-1] == 0.0
            if unchanged and (not self.expert_overlap or n_bins == 1):
                self.experts_ = experts  # nothing moved: the last experts already fit the bins
            else:
                self.experts_ = self._fit_experts(
                    X,
                    y,
                    bins,
                    n_bins,
                    validation,
                    self.expert_overlap,
                    progress,
                    "refit, ",
                    EM_ITERATION_UNITS * (1.0 + 2.0 * self.expert_overlap),
                )
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
        """What the experts' predictions are added to: the history's prior for the
        "residual" target, the cost prior for "efficiency" (the training median where a row
        has neither), else 0."""
        check_is_fitted(self)
        return self._offset(X)

    def _offset(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if self.target == "log_q":
            return np.zeros(len(X))
        prior = prior_log_q(X)
        if self.target == "efficiency":
            prior = np.where(np.isnan(cost_log_q(X)), prior, cost_log_q(X))
        return np.where(np.isnan(prior), self.prior_fallback_, prior)

    def predict(self, X) -> np.ndarray:
        """Predicted ln q, the experts combined by ``gating`` (exponentiate for throughput)."""
        proba = self.predict_proba_bins(X)
        X = np.asarray(X, dtype=np.float64)
        correction = gate(
            proba, lambda b, rows: self.experts_[b].predict(X[rows]), self.gating, self.gate_top_k
        )
        return self.bounded(X, self.offset(X) + correction)

    def bounded(self, X: np.ndarray, log_q: np.ndarray) -> np.ndarray:
        """``log_q`` held under the cost prior plus ``efficiency_cap_`` (an efficiency model's
        bound; unchanged otherwise). Every prediction path calls it, compiled or not."""
        check_is_fitted(self)
        if self.target != "efficiency":
            return log_q
        bound = cost_log_q(np.asarray(X, dtype=np.float64)) + self.efficiency_cap_
        return np.where(np.isfinite(bound), np.minimum(log_q, bound), log_q)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags
