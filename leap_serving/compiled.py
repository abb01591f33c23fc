"""Exact, compiled evaluation of the cascade's trees for the serving path.

scikit-learn's histogram-GBDT ``predict`` costs about 7 microseconds per tree whatever the batch
size, and starts an OpenMP pool per call: a paper-profile cascade holds thousands of trees, so one
ranking of 20 rows would take tens of milliseconds. Here each model's trees are packed once into
one array of 16-byte nodes, and a numba-compiled walk sums leaf values in scikit-learn's order
(baseline, then tree by tree), which gives the same float64 results; tests hold it to equality.
"""

from __future__ import annotations

import numba
import numpy as np

from .cascade import BinnedCascade, bin_probabilities, combine, gate_bins

# One node in 16 bytes, so a tree's walk touches one cache line per level: the split threshold
# (or, at a leaf, the leaf's value), the right child (the left child is always the next node:
# scikit-learn stores trees depth first), the split feature and two flags.
NODE = np.dtype(
    [("value", np.float64), ("right", np.int32), ("feature", np.int16), ("flags", np.uint8),
     ("pad", np.uint8)]
)  # fmt: skip
LEAF, MISSING_LEFT = 1, 2


@numba.njit(cache=True, nogil=True, inline="always")
def _leaf_value(X, r, root, nodes):
    """The leaf value row r of X reaches in the tree starting at ``root`` (scikit-learn's
    routing: missing values go where the split learned to send them)."""
    node = root
    while True:
        n = nodes[node]
        if n.flags & LEAF:
            return n.value
        x = X[r, n.feature]
        if x <= n.value or (x != x and n.flags & MISSING_LEFT):
            node += 1
        else:
            node = root + n.right


@numba.njit(cache=True, nogil=True)
def _raw_predict(X, nodes, roots, columns, baseline):
    """Every row through every tree, summed in scikit-learn's order (baseline, then tree by
    tree). The rows walk each tree in lockstep, a level at a time (routed as in
    ``_leaf_value``): their loads are independent, so the processor overlaps them."""
    n_rows = X.shape[0]
    out = np.empty((n_rows, baseline.shape[0]))
    for r in range(n_rows):
        for c in range(baseline.shape[0]):
            out[r, c] = 0.0 + baseline[c]
    at = np.empty(n_rows, dtype=np.int64)
    for t in range(roots.shape[0]):
        root = roots[t]
        at[:] = root
        walking = n_rows
        while walking:
            walking = 0
            for r in range(n_rows):
                n = nodes[at[r]]
                if n.flags & LEAF:
                    continue
                x = X[r, n.feature]
                if x <= n.value or (x != x and n.flags & MISSING_LEFT):
                    at[r] += 1
                else:
                    at[r] = root + n.right
                walking += 1
        column = columns[t]
        for r in range(n_rows):
            out[r, column] += nodes[at[r]].value
    return out


@numba.njit(cache=True, nogil=True)
def _expert_predict(X, top, nodes, roots, tree_start, tree_end, baseline):
    """ln q of expert ``top[r, j]`` on row r, walking only that expert's trees, summed in
    scikit-learn's order (baseline, then tree by tree). Tree-major: each tree is walked by all
    the rows that need it while its nodes are in cache."""
    n_rows, k = top.shape
    out = np.empty((n_rows, k))
    flat = top.ravel()
    pairs = np.argsort(flat, kind="mergesort")
    for p in range(pairs.shape[0]):
        out[pairs[p] // k, pairs[p] % k] = 0.0 + baseline[flat[pairs[p]]]
    first = 0
    while first < pairs.shape[0]:
        b = flat[pairs[first]]
        last = first
        while last < pairs.shape[0] and flat[pairs[last]] == b:
            last += 1
        for t in range(tree_start[b], tree_end[b]):
            root = roots[t]
            for p in range(first, last):
                r = pairs[p] // k
                out[r, pairs[p] % k] += _leaf_value(X, r, root, nodes)
        first = last
    return out


def _packed(tree: np.ndarray) -> np.ndarray:
    """One scikit-learn predictor's nodes as ``NODE`` rows."""
    leaf = tree["is_leaf"].astype(bool)
    inner = np.flatnonzero(~leaf)
    if not np.array_equal(tree["left"][inner], inner + 1):
        raise ValueError("a tree is not stored depth first: the compiled path cannot walk it")
    if tree["is_categorical"].any():
        raise ValueError("categorical splits are not supported by the compiled path")
    nodes = np.zeros(len(tree), dtype=NODE)
    nodes["value"] = np.where(leaf, tree["value"], tree["num_threshold"])
    nodes["right"] = tree["right"]
    nodes["feature"] = tree["feature_idx"]
    nodes["flags"] = leaf * LEAF + tree["missing_go_to_left"].astype(bool) * MISSING_LEFT
    return nodes


class CompiledForest:
    """The trees of one fitted HistGradientBoosting model, packed for ``_raw_predict``."""

    def __init__(self, model) -> None:
        nodes, roots, columns = [], [], []
        offset = 0
        for iteration in model._predictors:
            for column, predictor in enumerate(iteration):
                nodes.append(_packed(predictor.nodes))
                roots.append(offset)
                columns.append(column)
                offset += len(predictor.nodes)
        self.nodes = np.concatenate(nodes) if nodes else np.zeros(0, dtype=NODE)
        self.roots = np.asarray(roots, dtype=np.int64)
        self.columns = np.asarray(columns, dtype=np.int64)
        self.baseline = np.ascontiguousarray(model._baseline_prediction, dtype=np.float64).ravel()
        self.n_trees = len(roots)

    def raw_predict(self, X: np.ndarray) -> np.ndarray:
        return _raw_predict(
            np.ascontiguousarray(X, dtype=np.float64), self.nodes, self.roots, self.columns,
            self.baseline,
        )  # fmt: skip


class CompiledExperts:
    """Every expert's trees in one node array, so one call evaluates, per row, only the
    experts the gating needs."""

    def __init__(self, experts: list) -> None:
        forests = [CompiledForest(e) for e in experts]
        offsets = np.cumsum([0] + [len(f.nodes) for f in forests])[:-1]
        counts = np.array([f.n_trees for f in forests], dtype=np.int64)
        self.nodes = np.concatenate([f.nodes for f in forests])
        self.roots = np.concatenate([f.roots + o for f, o in zip(forests, offsets, strict=True)])
        self.tree_end = np.cumsum(counts)
        self.tree_start = self.tree_end - counts
        self.baseline = np.array([f.baseline[0] for f in forests], dtype=np.float64)
        self.n_trees = int(counts.sum())

    def predict(self, X: np.ndarray, top: np.ndarray) -> np.ndarray:
        return _expert_predict(
            X, np.ascontiguousarray(top, dtype=np.int64), self.nodes, self.roots,
            self.tree_start, self.tree_end, self.baseline,
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
        self.experts = CompiledExperts(cascade.experts_)
        self.n_bins = len(cascade.experts_)
        self.temperature = getattr(cascade, "temperature_", 1.0)
        self.gating = cascade.gating
        self.gate_top_k = cascade.gate_top_k
        self.offset = cascade.offset  # the prior a residual cascade's experts are added to
        self.n_trees = self.experts.n_trees + (self.classifier.n_trees if self.classifier else 0)

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
        """Predicted ln q, the most probable bin and its probability, in one pass over the
        trees each row needs."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        proba = self.predict_proba_bins(X)
        best = np.argmax(proba, axis=1)
        top, weight = gate_bins(proba, self.gating, self.gate_top_k)
        log_q = self.offset(X) + combine(self.experts.predict(X, top), weight, self.gating)
        return log_q, best, proba[np.arange(len(X)), best]
