"""Accuracy metrics as the paper defines them, pooled over attempts (section 3.1).

w_k is the share of attempts whose prediction is within k% of the measured throughput,
|q_hat - q| / q <= k / 100. A missing prediction counts as a miss; coverage says how many
there were.
"""

from __future__ import annotations

import numpy as np

TOLERANCES: tuple[int, ...] = (5, 10, 15, 20)


def _arrays(predicted, measured) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(predicted, dtype=float)
    q = np.asarray(measured, dtype=float)
    if p.shape != q.shape:
        raise ValueError(f"predicted has shape {p.shape} but measured has shape {q.shape}")
    if np.any(~(q > 0)):
        raise ValueError("measured throughput must be positive everywhere (drop missing/zero rows)")
    return p, q


def relative_error(predicted, measured) -> np.ndarray:
    """|q_hat - q| / q per attempt; NaN where there is no prediction."""
    p, q = _arrays(predicted, measured)
    return np.abs(p - q) / q


def within_mask(predicted, measured, k: float) -> np.ndarray:
    """Per attempt: predicted within k percent (a missing prediction is a miss)."""
    err = relative_error(predicted, measured)
    return np.where(np.isnan(err), False, err <= k / 100.0 + 1e-12)


def within(predicted, measured, k: float, weights=None) -> float:
    """w_k: the (optionally weighted) share of attempts predicted within k percent."""
    hit = within_mask(predicted, measured, k)
    if len(hit) == 0:
        return float("nan")
    w = np.ones(len(hit)) if weights is None else np.asarray(weights, dtype=float)
    return float(np.sum(w * hit) / np.sum(w))


def mdape(predicted, measured) -> float:
    """Median absolute percentage error over the attempts that got a prediction (in percent)."""
    err = relative_error(predicted, measured)
    err = err[~np.isnan(err)]
    return float(np.median(err) * 100.0) if len(err) else float("nan")


def median_ratio(predicted, measured) -> float:
    """Median of predicted / measured over the attempts that got a prediction."""
    p, q = _arrays(predicted, measured)
    ok = ~np.isnan(p)
    return float(np.median(p[ok] / q[ok])) if ok.any() else float("nan")


def predicted_share(predicted) -> float:
    """Share of attempts that got a prediction (not an interval's coverage: see
    ``intervals.interval_coverage``). Evaluations keep it under the key ``"coverage"``, the name
    their JSON has always carried."""
    p = np.asarray(predicted, dtype=float)
    return float(np.mean(~np.isnan(p))) if len(p) else float("nan")
