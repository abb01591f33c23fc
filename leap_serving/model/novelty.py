"""Novelty at submission (the paper's future work): is a launch's architecture far from every
model type the model learned from?

A model type the training window never saw gets its throughput from the trees' nearest regions,
which may be far from anything like it. Each model type is a point: its architecture summary
(log1p of each ``NOVELTY_FEATURES`` column, scaled by the column's spread across the known
types). A launch of an unknown model type is ``novel`` when its distance to the nearest known
type exceeds the ``NOVELTY_QUANTILE`` of the known types' distances to their own nearest other
type: it is farther from the fleet than the fleet's own members are from each other. A known
model type is never novel; a launch without a usable architecture cannot be judged and is not
flagged. The reference ships in the model's metadata, so training and serving judge alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..launch.features import FEATURE_COLUMNS

NOVELTY_FEATURES: tuple[str, ...] = (
    "arch_flops_per_sample",
    "arch_dense_params",
    "arch_embedding_params",
    "arch_activation_bytes_per_sample",
    "arch_embedding_bytes_per_sample",
    "arch_arithmetic_intensity",
    "arch_n_layers_total",
    "arch_max_width",
    "arch_n_embedding_tables",
    "arch_n_transformer_layers",
    "arch_n_conv_blocks",
    "arch_num_experts",
)
NOVELTY_QUANTILE = 0.95
_COLUMNS = np.array([FEATURE_COLUMNS.index(c) for c in NOVELTY_FEATURES])


def architecture_points(X: np.ndarray) -> np.ndarray:
    """Unscaled points of feature-matrix rows: log1p of the novelty columns (NaN: unknown)."""
    values = X[:, _COLUMNS]
    with np.errstate(invalid="ignore"):
        return np.log1p(np.where(values >= 0, values, np.nan))


@dataclass(frozen=True)
class Novelty:
    novel: bool
    distance: float
    threshold: float
    nearest_model_type: str


@dataclass(frozen=True)
class NoveltyReference:
    model_types: tuple[str, ...]
    points: np.ndarray  # one scaled point per known model type
    scale: np.ndarray  # per column
    threshold: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "_known", frozenset(self.model_types))  # one look-up per launch

    @classmethod
    def fit(cls, model_types: Sequence[str], X: np.ndarray) -> NoveltyReference:
        """The reference of a training window's rows (their model types and feature rows)."""
        from sklearn.neighbors import NearestNeighbors  # training only: serving never fits

        raw = architecture_points(np.asarray(X, dtype=np.float64))
        usable = ~np.isnan(raw).any(axis=1)
        names, inverse = np.unique(
            np.asarray(model_types, dtype=object)[usable], return_inverse=True
        )
        if not len(names):
            return cls(
                (), np.empty((0, len(NOVELTY_FEATURES))), np.ones(len(NOVELTY_FEATURES)), np.inf
            )
        # one point per model type: its median over its rows (sizes vary with the launch)
        order = np.argsort(inverse, kind="stable")
        starts = np.searchsorted(inverse[order], np.arange(len(names)))
        rows = raw[usable][order]
        points = np.array([np.median(part, axis=0) for part in np.split(rows, starts[1:])])
        spread = points.std(axis=0)
        scale = np.where(spread > 0, spread, 1.0)
        points = points / scale
        if len(names) < 2:
            threshold = np.inf  # no spread to calibrate against: judge nothing novel
        else:
            distances, _ = NearestNeighbors(n_neighbors=2).fit(points).kneighbors(points)
            threshold = float(np.quantile(distances[:, 1], NOVELTY_QUANTILE))
        return cls(tuple(names.tolist()), points, scale, threshold)

    def assess(self, model_type: str, x: np.ndarray) -> Novelty | None:
        """The novelty of one launch from one of its feature rows; None when it cannot be
        judged (no known types, or no usable architecture)."""
        if not self.model_types:
            return None
        if model_type in self._known:
            return Novelty(False, 0.0, self.threshold, model_type)
        point = architecture_points(np.asarray(x, dtype=np.float64)[None, :])[0]
        if np.isnan(point).any():
            return None
        distances = np.sqrt((((point / self.scale) - self.points) ** 2).sum(axis=1))
        nearest = int(np.argmin(distances))
        distance = float(distances[nearest])
        return Novelty(
            distance > self.threshold, distance, self.threshold, self.model_types[nearest]
        )

    def assess_rows(self, model_types: Sequence[str], X: np.ndarray) -> list[Novelty | None]:
        """``assess`` of each feature row (evaluation: one launch per row)."""
        return [self.assess(m, x) for m, x in zip(model_types, X, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(NOVELTY_FEATURES),
            "model_types": list(self.model_types),
            "points": self.points.tolist(),
            "scale": self.scale.tolist(),
            "threshold": self.threshold if np.isfinite(self.threshold) else None,
        }

    @classmethod
    def from_dict(cls, saved: dict[str, Any] | None) -> NoveltyReference | None:
        """The reference a model's metadata holds; None for a model saved without one or with
        other columns."""
        if not saved or saved.get("features") != list(NOVELTY_FEATURES):
            return None
        threshold = saved["threshold"]
        return cls(
            model_types=tuple(saved["model_types"]),
            points=np.array(saved["points"], dtype=np.float64).reshape(
                len(saved["model_types"]), len(NOVELTY_FEATURES)
            ),
            scale=np.array(saved["scale"], dtype=np.float64),
            threshold=np.inf if threshold is None else float(threshold),
        )
