"""Gating: how the bin classifier's scores become bin probabilities, and how the experts of the
bins a row needs combine into one prediction (paper section 2.2, and the soft gatings measured
beside it). Shared by the cascade's own ``predict`` and the compiled serving walk (``compiled``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

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
