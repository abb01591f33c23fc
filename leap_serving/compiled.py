"""Exact, compiled evaluation of the cascade's trees for the serving path.

scikit-learn's histogram-GBDT ``predict`` costs about 7 microseconds per tree whatever the batch
size, and starts an OpenMP pool per call: a paper-profile cascade holds thousands of trees, so one
ranking of 20 rows would take tens of milliseconds. Here each model's trees are flattened into a
few arrays once, and a numba-compiled walk sums leaf values in scikit-learn's order (baseline,
then tree by tree), which gives the same float64 results; tests hold it to equality.
"""

from __future__ import annotations

import numba
import numpy as np

from .cascade import BinnedCascade, bin_probabilities, gate


@numba.njit(cache=True, nogil=True)
def _raw_predict(X, feature, threshold, missing_left, left, right, is_leaf, value,
                 roots, columns, baseline):  # fmt: skip
    n_rows = X.shape[0]
    out = np.empty((n_rows, baseline.shape[0]))
    for r in range(n_rows):
        for c in range(baseline.shape[0]):
            out[r, c] = 0.0 + baseline[c]
    for t in range(roots.shape[0]):
        root = roots[t]
        column = columns[t]
        for r in range(n_rows):
            node = root
            while not is_leaf[node]:
                x = X[r, feature[node]]
                if x != x:
                    child = left[node] if missing_left[node] else right[node]
                elif x <= threshold[node]:
                    child = left[node]
                else:
                    child = right[node]
                node = root + child
            out[r, column] += value[node]
    return out


class CompiledForest:
    """The trees of one fitted HistGradientBoosting model, flattened for ``_raw_predict``."""

    def __init__(self, model) -> None:
        nodes, roots, columns = [], [], []
        offset = 0
        for iteration in model._predictors:
            for column, predictor in enumerate(iteration):
                tree = predictor.nodes
                if tree["is_categorical"].any():
                    raise ValueError("categorical splits are not supported by the compiled path")
                nodes.append(tree)
                roots.append(offset)
                columns.append(column)
                offset += len(tree)
        flat = np.concatenate(nodes) if nodes else np.zeros(0, dtype=np.float64)
        self.feature = np.ascontiguousarray(flat["feature_idx"], dtype=np.int64)
        self.threshold = np.ascontiguousarray(flat["num_threshold"], dtype=np.float64)
        self.missing_left = np.ascontiguousarray(flat["missing_go_to_left"], dtype=np.bool_)
        self.left = np.ascontiguousarray(flat["left"], dtype=np.int64)
        self.right = np.ascontiguousarray(flat["right"], dtype=np.int64)
        self.is_leaf = np.ascontiguousarray(flat["is_leaf"], dtype=np.bool_)
        self.value = np.ascontiguousarray(flat["value"], dtype=np.float64)
        self.roots = np.asarray(roots, dtype=np.int64)
        self.columns = np.asarray(columns, dtype=np.int64)
        self.baseline = np.ascontiguousarray(model._baseline_prediction, dtype=np.float64).ravel()
        self.n_trees = len(roots)

    def raw_predict(self, X: np.ndarray) -> np.ndarray:
        return _raw_predict(
            np.ascontiguousarray(X, dtype=np.float64), self.feature, self.threshold,
            self.missing_left, self.left, self.right, self.is_leaf, self.value,
            self.roots, self.columns, self.baseline,
        )  # fmt: skip


class CompiledCascade:
    """``BinnedCascade.predict`` and ``predict_bins`` through compiled trees, same results."""

    def __init__(self, cascade: BinnedCascade) -> None:
        self.classes = (
            cascade.classifier_.classes_.astype(int) if cascade.classifier_ is not None else None
        )
        self.classifier = (
            CompiledForest(cascade.classifier_) if cascade.classifier_ is not None else None
        )
        self.experts = [CompiledForest(expert) for expert in cascade.experts_]
        self.n_bins = len(self.experts)
        self.temperature = getattr(cascade, "temperature_", 1.0)
        self.gating = cascade.gating
        self.gate_top_k = cascade.gate_top_k
        self.n_trees = sum(e.n_trees for e in self.experts) + (
            self.classifier.n_trees if self.classifier else 0
        )

    def predict_proba_bins(self, X: np.ndarray) -> np.ndarray:
        if self.classifier is None:
            return np.ones((len(X), 1))
        raw = self.classifier.raw_predict(X)
        return bin_probabilities(raw, self.classes, self.n_bins, self.temperature)

    def predict_bins(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        proba = self.predict_proba_bins(np.ascontiguousarray(X, dtype=np.float64))
        best = np.argmax(proba, axis=1)
        return best, proba[np.arange(len(proba)), best]

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Predicted ln q, the most probable bin and its probability; each needed expert runs
        once over its rows."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        proba = self.predict_proba_bins(X)
        best = np.argmax(proba, axis=1)
        log_q = gate(
            proba,
            lambda b, rows: self.experts[b].raw_predict(X[rows])[:, 0],
            self.gating,
            self.gate_top_k,
        )
        return log_q, best, proba[np.arange(len(X)), best]
