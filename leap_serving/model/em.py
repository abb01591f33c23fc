"""EM over the bins (paper section 2.2): fit one median expert per bin, move each row to the
bin whose expert predicts it best, repeat until few rows move.

The cascade's fitting steps for its experts, as a mixin of ``BinnedCascade`` (``cascade``), which
holds the parameters these methods read (``n_bins``, ``min_bin_rows``, ``em_sample``,
``oof_folds``, ...). Out-of-fold EM scores each row with experts that did not train on it;
sampled EM fits the experts on a share of the rows until its last iteration.
"""

from __future__ import annotations

import os

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs

from .boosters import GBDTRegressor
from .fitting import EM_ITERATION_UNITS, FitProgress, fit_booster, fit_rounds, identical_row_folds


def _compact(bins: np.ndarray, n_bins: int) -> tuple[np.ndarray, int, int]:
    """Renumber the bins that still hold rows 0..m-1; returns (bins, m, bins dropped)."""
    used = np.flatnonzero(np.bincount(bins, minlength=n_bins))
    return np.searchsorted(used, bins), len(used), n_bins - len(used)


class ExpertFitting:
    """EM and the experts' fits of ``BinnedCascade``."""

    def _em(
        self, X, y, bins, n_bins, validation, progress, em_units
    ) -> tuple[np.ndarray, int, list | None, list[float], list[int]]:
        """EM from the initial ``bins``: the bins, their number, the experts when the last
        iteration's still fit the bins (else None), and per iteration the share of rows moved
        and the rows rescued from bins left too small."""
        experts = None
        moved, rescued_log = [], []
        folds = (
            identical_row_folds(X, self.oof_folds, self.random_state) if self.oof_folds else None
        )
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
                    X,
                    y,
                    bins,
                    n_bins,
                    validation,
                    sample,
                    iteration == self.max_em_iter - 1,
                    progress,
                    step,
                    em_units,
                )
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
        return bins, n_bins, experts, moved, rescued_log

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
            with fit_rounds(progress, args[0], shares[b], prefix, what(b)):
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
                X[train],
                y[train],
                bins[train],
                n_bins,
                None if validation is None else validation[train],
                0.0,
                progress,
                f"{step}fold {f + 1}/{self.oof_folds}, ",
                units / self.oof_folds,
            )
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
            X[sample],
            y[sample],
            bins[sample],
            n_bins,
            None if validation is None else validation[sample],
            0.0,
            progress,
            step,
            units * self.em_sample,
        )
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
