"""Fit helpers every booster of the cascade goes through, and the work a fit reports.

``fit_booster`` fits one booster early-stopped on held-out rows in time order;
``identical_row_folds`` keeps a job's retries in one fold; ``cascade_units`` and ``FitProgress``
are how a fit tells a caller (the pipeline's progress) how far it is.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import numpy as np
from sklearn.base import is_classifier

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


def fit_rounds(progress: FitProgress | None, estimator, units: float, step: str, done: str):
    """The boosting rounds of one fit as steps of ``progress``, if there is one."""
    return nullcontext() if progress is None else progress.rounds(estimator, units, step, done)


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
        X[train],
        y[train],
        sample_weight[train],
        X_val=X[held_out],
        y_val=y[held_out],
        sample_weight_val=sample_weight[held_out],
    )


def identical_row_folds(X: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
    """A fold per row, identical rows (a job's retries) always in the same fold."""
    rows = np.ascontiguousarray(np.nan_to_num(X, nan=np.inf))
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, inverse = np.unique(keys, return_inverse=True)
    groups = np.random.default_rng(seed).permutation(int(inverse.max()) + 1)
    return groups[inverse.ravel()] % n_folds
