"""The kernel-composed cost prior a fold of ``leap crossval`` may use: the per-layer cost
prior with each layer class's time divided by its operator's efficiency, learned from measured
kernels (``leap_serving.launch.kernel_efficiency``), never from the job-level rows scored.

A GPU a split holds out is held out of the kernels too: under leave-hardware-out, a fold (and
each of its validation folds) fits the kernel model without every measured GPU of a held type's
chip (``kernel_sets.kernel_devices_held``), as NeuSight's out-of-distribution GPUs were left out
of its training. The other splits hold out no GPU, so their folds share one fit.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np
import polars as pl

from leap_pipeline.data.kernel_sets import KERNEL_SET, kernel_devices_held, read_kernel_set
from leap_serving.launch.kernel_efficiency import KernelEfficiency, composed_log_q

# a fold's kernel model: a fixed sample of the measured kernels, small trees, one thread (the
# folds already run in parallel); 3.9 s a fit, and 25.3% MdAPE on the L4's kernels held out,
# against 23.9% fitted on all 255,223 other kernels with 400 trees (12 s)
FOLD_SAMPLE = 80_000
FOLD_SETTINGS = {"n_estimators": 200, "num_leaves": 63, "seed": 0}
# splits that hold a GPU type out of a fold
HOLDS_TYPES_OUT = ("leave-hardware-out",)


@lru_cache(maxsize=1)
def _kernels() -> tuple[pl.DataFrame, pl.DataFrame]:
    return read_kernel_set()


@lru_cache(maxsize=64)
def kernel_model(excluded: frozenset[str]) -> KernelEfficiency:
    """The kernel model fitted on a fixed sample of every measured kernel but those of the
    GPUs ``excluded``; one fit per set, kept for the process."""
    ops, specs = _kernels()
    kept = ops.filter(~pl.col("hardware_type").is_in(sorted(excluded)))
    if kept.height > FOLD_SAMPLE:
        kept = kept.sample(FOLD_SAMPLE, seed=0)
    return KernelEfficiency(**FOLD_SETTINGS, threads=1).fit(kept, specs)


def held_devices(split: str, held_types: Iterable[str]) -> frozenset[str]:
    """The measured GPUs a fold of ``split`` holding ``held_types`` out must not learn from."""
    return kernel_devices_held(held_types) if split in HOLDS_TYPES_OUT else frozenset()


def kernel_log_q(
    X: np.ndarray, rows: pl.DataFrame, specs: pl.DataFrame, excluded: frozenset[str]
) -> np.ndarray:
    """ln throughput of ``rows`` (features ``X``) by the kernel-composed cost prior, the kernel
    model fitted without ``excluded``. NaN (no estimate: the candidate ranks last) where the
    kernel set is not installed: it lives in the repository's ``public-data/``, which a wheel
    does not carry."""
    if not available():
        return np.full(len(X), np.nan)
    return composed_log_q(kernel_model(excluded), X, rows["hardware_type"].to_list(), specs)


def available() -> bool:
    """Whether the measured kernels are here to learn from."""
    return (KERNEL_SET / "kernels.parquet").exists() and (KERNEL_SET / "devices.csv").exists()
