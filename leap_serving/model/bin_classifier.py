"""The bin classifier: which bin's expert a row needs, fitted on a share of each bin's rows, its
probabilities calibrated by a temperature on held-out rows.

The cascade's fitting steps for its classifier, as a mixin of ``BinnedCascade`` (``cascade``),
which holds the parameters these methods read.
"""

from __future__ import annotations

import numpy as np

from .boosters import GBDTClassifier
from .fitting import MIN_VALIDATION_ROWS, FitProgress, fit_booster, fit_rounds
from .gating import bin_probabilities


class BinClassifierFitting:
    """The bin classifier's fit and calibration of ``BinnedCascade``."""

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
            min_data_in_leaf=self.min_data_in_leaf,
            min_data_in_bin=self.min_data_in_bin,
        )
        with fit_rounds(progress, classifier, units, "bin classifier, ", "bin classifier"):
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
