"""Exact, compiled evaluation of the cascade's trees for the serving path.

A library's ``predict`` pays per call and per tree (LightGBM's took 26 ms for 20 rows of the
paper-scale single GBDT, docs/results.md section 7): a paper-profile cascade holds thousands of
trees, so one ranking of 20 rows would take tens of milliseconds. Here the classifier and the
experts walk their packed trees (``trees``), and each row walks only the experts its gating
needs.
"""

from __future__ import annotations

import numba
import numpy as np

from .cascade import BinnedCascade
from .gating import bin_probabilities, combine, gate_bins
from .trees import (
    GROUP_ROWS,
    ROW_BLOCK,
    bit_index,
    group_buffers,
    group_width,
    leaf_value,
    on_threads,
    sort_group,
    walk_group,
)


@numba.njit(cache=True, nogil=True)
def _expert_predict(X, top, nodes, roots, tree_start, tree_end, baseline, width, stack_size):
    """ln q of expert ``top[r, j]`` on row r, walking only that expert's trees, summed in
    LightGBM's order (baseline, then tree by tree). A group of rows at a time
    (``trees.walk_group``): each expert's trees are walked once by all the group's rows that
    need it."""
    n_rows, k = top.shape
    n_features = X.shape[1]
    out = np.empty((n_rows, k))
    ordered, below, missing, counts, values, stack_node, stack_rows = group_buffers(
        n_features, width, stack_size
    )
    n_experts = baseline.shape[0]
    rows_of = np.zeros(n_experts, dtype=np.uint64)  # per expert, the mask of rows needing it
    slot = np.empty((GROUP_ROWS, n_experts), dtype=np.int64)  # where row r keeps expert b
    for first in range(0, n_rows, GROUP_ROWS):
        n = min(GROUP_ROWS, n_rows - first)
        sort_group(X, first, n, ordered, below, missing, counts)
        rows_of[:] = 0
        for r in range(n):
            for j in range(k):
                b = top[first + r, j]
                rows_of[b] |= np.uint64(1) << np.uint64(r)
                slot[r, b] = j
                out[first + r, j] = 0.0 + baseline[b]
        for b in range(n_experts):
            if rows_of[b] == 0:
                continue
            for t in range(tree_start[b], tree_end[b]):
                walk_group(
                    X,
                    first,
                    nodes,
                    roots[t],
                    rows_of[b],
                    ordered,
                    below,
                    missing,
                    counts,
                    values,
                    stack_node,
                    stack_rows,
                )
                rows = rows_of[b]
                while rows:
                    r = bit_index(rows)
                    out[first + r, slot[r, b]] += values[r]
                    rows &= rows - np.uint64(1)
        for r in range(n):  # an expert a row names twice was walked into one of its slots
            for j in range(k):
                out[first + r, j] = out[first + r, slot[r, top[first + r, j]]]
    return out


@numba.njit(cache=True, nogil=True)
def _expert_predict_rows(X, top, first, last, nodes, roots, tree_start, tree_end, baseline, out):
    """``_expert_predict`` for rows ``first`` to ``last`` into ``out``, each row walked on its
    own, a block of rows at a time (``trees._predict_block_rows``): for rows of many launches."""
    k = top.shape[1]
    pair_row = np.empty(ROW_BLOCK * k, dtype=np.int64)
    pair_slot = np.empty(ROW_BLOCK * k, dtype=np.int64)
    for start in range(first, last, ROW_BLOCK):
        stop = min(start + ROW_BLOCK, last)
        for r in range(start, stop):
            for j in range(k):
                out[r, j] = 0.0 + baseline[top[r, j]]
        for b in range(baseline.shape[0]):
            m = 0
            for r in range(start, stop):
                for j in range(k):
                    if top[r, j] == b:
                        pair_row[m] = r
                        pair_slot[m] = j
                        m += 1
            if m == 0:
                continue
            for t in range(tree_start[b], tree_end[b]):
                root = roots[t]
                for i in range(m):
                    out[pair_row[i], pair_slot[i]] += leaf_value(X, pair_row[i], root, nodes)


class CompiledExperts:
    """Every expert's trees in one node array, so one call evaluates, per row, only the
    experts the gating needs."""

    def __init__(self, experts: list) -> None:
        forests = [e.forest() for e in experts]
        offsets = np.cumsum([0] + [len(f.nodes) for f in forests])[:-1]
        counts = np.array([f.n_trees for f in forests], dtype=np.int64)
        self.nodes = np.concatenate([f.nodes for f in forests])
        self.roots = np.concatenate([f.roots + o for f, o in zip(forests, offsets, strict=True)])
        self.tree_end = np.cumsum(counts)
        self.tree_start = self.tree_end - counts
        self.baseline = np.array([f.baseline[0] for f in forests], dtype=np.float64)
        self.n_trees = int(counts.sum())
        self.stack_size = max([f.stack_size for f in forests], default=1)

    def predict(self, X: np.ndarray, top: np.ndarray) -> np.ndarray:
        return _expert_predict(
            np.ascontiguousarray(X, dtype=np.float64),
            np.ascontiguousarray(top, dtype=np.int64),
            self.nodes,
            self.roots,
            self.tree_start,
            self.tree_end,
            self.baseline,
            group_width(len(X)),
            self.stack_size,
        )

    def predict_many(self, X: np.ndarray, top: np.ndarray, n_threads: int = 1) -> np.ndarray:
        """``predict`` for many rows of many launches: each row on its own, on threads."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        top = np.ascontiguousarray(top, dtype=np.int64)
        out = np.empty(top.shape)
        args = (self.nodes, self.roots, self.tree_start, self.tree_end, self.baseline, out)
        on_threads(len(X), n_threads, lambda a, b: _expert_predict_rows(X, top, a, b, *args))
        return out


class CompiledCascade:
    """``BinnedCascade.predict`` and ``predict_bins`` through compiled trees, same results."""

    def __init__(self, cascade: BinnedCascade) -> None:
        self.classes = (
            cascade.classifier_.classes_.astype(int) if cascade.classifier_ is not None else None
        )
        self.classifier = cascade.classifier_.forest() if cascade.classifier_ is not None else None
        self.experts = CompiledExperts(cascade.experts_)
        self.n_bins = len(cascade.experts_)
        self.temperature = getattr(cascade, "temperature_", 1.0)
        self.gating = cascade.gating
        self.gate_top_k = cascade.gate_top_k
        self.offset = cascade.offset  # the prior a residual cascade's experts are added to
        self.bounded = cascade.bounded  # and an efficiency cascade's bound
        self.n_trees = self.experts.n_trees + (self.classifier.n_trees if self.classifier else 0)

    def predict_proba_bins(self, X: np.ndarray, n_threads: int | None = None) -> np.ndarray:
        """The bin probabilities; ``n_threads`` set: through the many-row walk."""
        if self.classifier is None:
            return np.ones((len(X), 1))
        if n_threads is None:
            raw = self.classifier.raw_predict(X)
        else:
            raw = self.classifier.raw_predict_many(X, n_threads)
        return bin_probabilities(raw, self.classes, self.n_bins, self.temperature)

    def predict_bins(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        proba = self.predict_proba_bins(np.ascontiguousarray(X, dtype=np.float64))
        best = np.argmax(proba, axis=1)
        return best, proba[np.arange(len(proba)), best]

    def predict(
        self, X: np.ndarray, n_threads: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Predicted ln q, the most probable bin and its probability, in one pass over the
        trees each row needs. A ranking's rows (one launch's candidates share most of their
        paths) walk the trees as groups; with ``n_threads`` set, rows of many launches, which
        share few (a day's attempts: 23,391 rows, ours, 3.3-3.6 s as groups, 1.2 s so on two
        threads), walk each on its own, blocks of rows on ``n_threads`` threads."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        proba = self.predict_proba_bins(X, n_threads)
        best = np.argmax(proba, axis=1)
        top, weight = gate_bins(proba, self.gating, self.gate_top_k)
        experts = (
            self.experts.predict(X, top)
            if n_threads is None
            else self.experts.predict_many(X, top, n_threads)
        )
        log_q = self.bounded(X, self.offset(X) + combine(experts, weight, self.gating))
        return log_q, best, proba[np.arange(len(X)), best]
