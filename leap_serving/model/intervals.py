"""Calibrated intervals on a prediction: split conformal, by hardware type and history class.

A point prediction cannot say whether it is a confident estimate for a family with 200 runs on
the type or a guess for a new architecture on a new GPU. Split conformal prediction turns the
absolute log errors of the published model on rows it never trained on (the selection day the
night already holds out) into an interval with a stated coverage: if those rows are
exchangeable with tomorrow's, at least ``level`` of tomorrow's throughputs fall inside
``exp(ln q_hat +- half_width)``. One quantile for every row would be too wide for a family the
fleet runs daily and too narrow for a new one, so the quantile is taken per Mondrian class
(Vovk et al., 2003): per hardware type and history class (``history_class``). A class with
fewer than ``MIN_CLASS_ROWS`` calibration rows borrows its history class's quantile, then the
overall one, so a thin class is never calibrated on a handful of rows.

This is a short step of our own rather than MAPIE or crepes: it is a quantile per class over
residuals the night already computes, and a library would bring an estimator wrapper and a
dependency into the serving path for the same ~60 lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..launch.features import FEATURE_COLUMNS

LEVEL = 0.8  # the Ranker's throughput_low / throughput_high: an 80% interval
# a night's coverage of the LEVEL interval on day D must stay within this band (the nightly
# check warns outside it; the report counts each busy hardware type's nights under its floor)
COVERAGE_BAND = (0.75, 0.85)
# a row's history: a family never seen (cold), a known family on a type it never ran on (the
# routing question), or a family with 1-9 or 10 and more runs on this type
HISTORY_CLASSES: tuple[str, ...] = ("cold", "new type", "1-9 runs", "10+ runs")
MANY_RUNS = 10
MIN_CLASS_ROWS = 30  # fewer calibration rows than this: the class borrows a coarser quantile
_COLD_START = FEATURE_COLUMNS.index("hist_cold_start")
_HW_COUNT = FEATURE_COLUMNS.index("hist_hw_count")


def history_class(X: np.ndarray) -> np.ndarray:
    """Per feature row, the index in ``HISTORY_CLASSES`` of its family's history on the row's
    type (an unknown count is no run)."""
    X = np.asarray(X, dtype=float)
    runs = np.nan_to_num(X[:, _HW_COUNT], nan=0.0)
    return np.where(
        X[:, _COLD_START] == 1.0, 0, np.where(runs == 0, 1, np.where(runs < MANY_RUNS, 2, 3))
    )


def interval_metric_name(level: float) -> str:
    """The MLflow metric an interval's coverage is logged under: ``coverage_80`` for 80%.

    The name predates the split of "coverage" into ``predicted_share`` (rows predicted) and
    ``interval_coverage`` (measured inside the interval); it stays, as every logged run has it."""
    return f"coverage_{round(level * 100)}"


def conformal_quantile(scores: np.ndarray, level: float) -> float:
    """The split-conformal quantile: the ceil((n + 1) level)-th smallest score, infinite when
    there are too few scores for that level."""
    n = len(scores)
    k = math.ceil((n + 1) * level)
    if n == 0 or k > n:
        return math.inf
    return float(np.partition(np.asarray(scores, dtype=float), k - 1)[k - 1])


@dataclass(frozen=True)
class ConformalIntervals:
    """Half-widths on ln throughput at ``level``: per (hardware type, history class) where the
    calibration day had enough rows, per history class, and overall."""

    level: float
    overall: float
    by_history: dict[str, float] = field(default_factory=dict)
    by_cell: dict[str, dict[str, float]] = field(default_factory=dict)
    calibration_rows: int = 0

    @classmethod
    def calibrate(
        cls,
        predicted_log_q: np.ndarray,
        measured_log_q: np.ndarray,
        hardware_types: np.ndarray,
        X: np.ndarray,
        level: float = LEVEL,
    ) -> ConformalIntervals:
        """Quantiles of |ln q - ln q_hat| on rows the model never trained on."""
        if not 0 < level < 1:
            raise ValueError(f"level={level!r} must be between 0 and 1")
        scores = np.abs(np.asarray(measured_log_q, float) - np.asarray(predicted_log_q, float))
        keep = np.isfinite(scores)
        scores, types = scores[keep], np.asarray(hardware_types, dtype=object)[keep]
        classes = history_class(np.asarray(X)[keep])
        by_history, by_cell = {}, {}
        for c, name in enumerate(HISTORY_CLASSES):
            in_class = classes == c
            if in_class.sum() >= MIN_CLASS_ROWS:
                by_history[name] = conformal_quantile(scores[in_class], level)
            for hardware_type in np.unique(types[in_class]):
                cell = in_class & (types == hardware_type)
                if cell.sum() >= MIN_CLASS_ROWS:
                    by_cell.setdefault(str(hardware_type), {})[name] = conformal_quantile(
                        scores[cell], level
                    )
        return cls(level, conformal_quantile(scores, level), by_history, by_cell, len(scores))

    def half_width(self, hardware_types, X: np.ndarray) -> np.ndarray:
        """Per row: its class's half-width, the history class's for a thin class, else the
        overall one."""
        classes = history_class(X)
        out = np.empty(len(classes))
        for i, (hardware_type, c) in enumerate(zip(hardware_types, classes, strict=True)):
            name = HISTORY_CLASSES[c]
            cell = self.by_cell.get(hardware_type, {})
            out[i] = cell.get(name, self.by_history.get(name, self.overall))
        return out

    def bounds(
        self, predicted_log_q: np.ndarray, hardware_types, X: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) throughput: exp(ln q_hat -+ half-width)."""
        width = self.half_width(hardware_types, X)
        log_q = np.asarray(predicted_log_q, dtype=float)
        return np.exp(log_q - width), np.exp(log_q + width)

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "overall": self.overall,
            "by_history": self.by_history,
            "by_cell": self.by_cell,
            "calibration_rows": self.calibration_rows,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ConformalIntervals | None:
        """None for a model saved before intervals existed: it serves no interval."""
        if not data:
            return None
        return cls(
            level=float(data["level"]),
            overall=float(data["overall"]),
            by_history={k: float(v) for k, v in data["by_history"].items()},
            by_cell={t: {k: float(v) for k, v in c.items()} for t, c in data["by_cell"].items()},
            calibration_rows=int(data.get("calibration_rows", 0)),
        )


def interval_coverage(
    low: np.ndarray, high: np.ndarray, measured: np.ndarray, groups: np.ndarray | None = None
) -> dict[str, Any]:
    """Share of ``measured`` inside [low, high], overall and per value of ``groups``: the
    interval coverage, not ``metrics.predicted_share`` (the share of rows given a prediction).
    The per-group key stays ``"coverage"``: evaluation JSON written before the rename has it."""
    inside = (np.asarray(measured) >= low) & (np.asarray(measured) <= high)
    out: dict[str, Any] = {"overall": float(inside.mean()) if len(inside) else None}
    if groups is not None:
        groups = np.asarray(groups, dtype=object)
        out["groups"] = {}
        for g in np.unique(groups):
            member = groups == g
            out["groups"][str(g)] = {
                "coverage": float(inside[member].mean()),
                "rows": int(member.sum()),
            }
    return out
