"""One model prepared to serve: its cascade compiled and warmed, its spec table by type, and its
identity (the registry version, or the folder manifest's sha256). A Ranker swaps one in as a
whole, so a call never sees half of one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..model.compiled import CompiledCascade
from ..model.published import LeapModel
from ..registry.registered import load_registered


@dataclass(frozen=True)
class Loaded:
    """One model, fully prepared: swapped in as a whole, so a call never sees half of one."""

    model: LeapModel
    compiled: CompiledCascade
    version: str | None
    specs: dict[str, dict[str, Any]]
    stamp: str | None  # the registry version, or the folder manifest's sha256

    @property
    def name(self) -> str | None:
        return self.version or self.stamp


def prepare(source: str | Path | LeapModel, stamp: str | None) -> Loaded:
    """The model ``source`` names (a model in memory, a ``models:/`` URI at registry version
    ``stamp``, or a published folder), loaded, compiled and warmed."""
    if isinstance(source, LeapModel):
        model, version = source, None
    elif isinstance(source, str):
        model, version = load_registered(source, version=stamp)
    else:
        model, version = LeapModel.load(source), None
    compiled = CompiledCascade(model.cascade)
    specs = {row["hardware_type"]: row for row in model.hardware_specs.iter_rows(named=True)}
    # compile and warm the tree walk before the model serves a launch
    compiled.predict(np.zeros((1, model.cascade.n_features_in_)))
    return Loaded(model, compiled, version, specs, stamp)
