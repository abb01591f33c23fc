"""Launch rows by column, as feature extraction reads them.

Training reads a frame of attempts; serving reads one launch's fields repeated over its candidate
types. Both go through ``LaunchRows``, so one extraction (``features``, ``history``) serves both
without serving building a frame on every call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

# Launch-config columns extraction reads; anything else a caller passes is ignored.
LAUNCH_COLUMNS: tuple[str, ...] = (
    "job_name",
    "model_type",
    "ds",
    "hardware_type",
    "num_trainers",
    "batch_size",
    "requested_devices_per_host",
    "num_readers",
    "precision",
    "tensor_parallel",
    "pipeline_parallel",
    "embedding_sharding",
    "num_sparse_features",
    "num_dense_features",
    "hash_size",
    "seq_len",
    "training_days",
    "optimizer",
    "activation_checkpointing",
    "package_version",
    "model_definition",
)


class LaunchRows(ABC):
    """Launch rows by column, as extraction reads them: a frame's columns (training, where a
    column may be absent: an optional field no row has) or, on the serving path, each launch's
    contract-typed fields repeated over its candidate types (``CandidateRows``)."""

    height: int

    @abstractmethod
    def values(self, name: str) -> list:
        """The column as Python values, None where missing."""

    @abstractmethod
    def numbers(self, name: str) -> np.ndarray:
        """The column as float64, NaN where missing."""

    @abstractmethod
    def __contains__(self, name: str) -> bool:
        """Whether the rows carry the column (an absent one reads as missing)."""


class FrameRows(LaunchRows):
    """A frame's columns; one it lacks reads as missing on every row."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame, self.height = frame, frame.height

    def values(self, name: str) -> list:
        if name not in self.frame.columns:
            return [None] * self.height
        return self.frame[name].to_list()

    def numbers(self, name: str) -> np.ndarray:
        if name not in self.frame.columns:
            return np.full(self.height, np.nan)
        return self.frame[name].cast(pl.Float64).to_numpy()

    def __contains__(self, name: str) -> bool:
        return name in self.frame.columns


class CandidateRows(LaunchRows):
    """One row per candidate type of each launch, without building a frame: serving ranks a
    launch's candidates on every call, and a frame's construction and column casts cost about
    as much as the arithmetic. ``launches`` hold contract-typed values (``int``, ``bool``,
    ``str``, ``date``) as the ranker checks them; ``hardware_type`` is each candidate."""

    def __init__(self, launches: Sequence[tuple[Mapping[str, Any], Sequence[str]]]) -> None:
        self.launches = [(launch, list(types)) for launch, types in launches]
        self.height = sum(len(types) for _, types in self.launches)

    def values(self, name: str) -> list:
        if name == "hardware_type":
            return [t for _, types in self.launches for t in types]
        out: list = []
        for launch, types in self.launches:
            out += [launch.get(name)] * len(types)
        return out

    def numbers(self, name: str) -> np.ndarray:
        if name == "hardware_type":
            return np.array(self.values(name), dtype=np.float64)
        # one value per launch, repeated over its candidates: a fill per launch, not per row
        parts = [
            np.full(len(types), np.nan if (v := launch.get(name)) is None else v, np.float64)
            for launch, types in self.launches
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts or [np.empty(0)])

    def __contains__(self, name: str) -> bool:
        return name in LAUNCH_COLUMNS


def launch_rows(launches: pl.DataFrame | LaunchRows) -> LaunchRows:
    """``launches`` as ``LaunchRows``: a frame is wrapped, not copied."""
    return launches if isinstance(launches, LaunchRows) else FrameRows(launches)
