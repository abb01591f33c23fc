"""The folds of a static evaluation: one per decision a launcher faces.

- ``leave-model-out``: a new job. Every type of a model is predicted by one model that never
  saw that model (scikit-learn's ``LeaveOneGroupOut`` over models).
- ``partial-history``: a job with history on some types. For each model, a random half of its
  types is held out in one fold; its other types' measurements stay in the history.
- ``leave-hardware-out``: a new hardware type (``LeaveOneGroupOut`` over types).
- ``leave-model-hardware-out``: each (model, type) group predicted from the same
  configurations on the other types; ``GroupKFold`` into at most ``MAX_GROUP_FOLDS`` folds.
- ``random``: ``KFold`` over rows, the in-distribution reference.

Inside a fold the training rows are cut the same way again. Their history features are
cross-fitted over chunks (``inner_chunks``), and the selection compares its candidates on
validation folds (``validation_folds``), each built as a test fold is.
"""

from __future__ import annotations

import numpy as np
import polars as pl

SPLITS = (
    "leave-model-out",
    "partial-history",
    "leave-hardware-out",
    "leave-model-hardware-out",
    "random",
)
# what a split holds out together
GROUP_KEYS: dict[str, list[str]] = {
    "leave-model-out": ["model_type"],
    "partial-history": ["model_type", "hardware_type"],
    "leave-hardware-out": ["hardware_type"],
    "leave-model-hardware-out": ["model_type", "hardware_type"],
}
MAX_GROUP_FOLDS = 30
RANDOM_FOLDS = 5
# inside a fold: one chunk per group of the split's kind (a model, a type), as the fold itself
# holds one out, up to MAX_INNER_FOLDS; many small groups (model x type) or rows in INNER_FOLDS
MAX_INNER_FOLDS = 10
INNER_FOLDS = 3


def groups(rows: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """A dense integer id per distinct value of ``keys``."""
    return rows.select(pl.struct(keys).rank("dense").alias("g"))["g"].to_numpy()


def _masks(n_rows: int, splitter, X, group=None) -> list[np.ndarray]:
    masks = []
    for _, test in splitter.split(X, groups=group):
        mask = np.zeros(n_rows, dtype=bool)
        mask[test] = True
        masks.append(mask)
    return masks


def folds(rows: pl.DataFrame, split: str, seed: int = 0) -> list[np.ndarray]:
    """Boolean test masks. Every row is in at most one; under ``partial-history`` the rows of a
    model's kept half, and of a model measured on one type only, are in none."""
    from sklearn.model_selection import GroupKFold, KFold, LeaveOneGroupOut  # here: the CLI
    # reads SPLITS without loading scikit-learn

    n = rows.height
    index = np.arange(n)
    if split == "random":
        return _masks(n, KFold(RANDOM_FOLDS, shuffle=True, random_state=seed), index)
    if split not in GROUP_KEYS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    group = groups(rows, GROUP_KEYS[split])
    if split == "partial-history":
        return _partial_history(rows, seed)
    if len(np.unique(group)) < 2:
        raise ValueError(
            f"split={split!r} needs two groups of {GROUP_KEYS[split]} or more; these rows have "
            f"{len(np.unique(group))}"
        )
    if split == "leave-model-hardware-out":
        n_folds = min(MAX_GROUP_FOLDS, len(np.unique(group)))
        return _masks(n, GroupKFold(n_folds, shuffle=True, random_state=seed), index, group)
    return _masks(n, LeaveOneGroupOut(), index, group)


def leave_one_group_out(rows: pl.DataFrame, keys: list[str]) -> list[np.ndarray]:
    """One test mask per distinct value of ``keys`` (scikit-learn's ``LeaveOneGroupOut``)."""
    from sklearn.model_selection import LeaveOneGroupOut

    return _masks(rows.height, LeaveOneGroupOut(), np.arange(rows.height), groups(rows, keys))


def _partial_history(rows: pl.DataFrame, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    model = rows["model_type"].to_numpy()
    hardware = rows["hardware_type"].to_numpy()
    masks = []
    for name in np.unique(model):
        types = np.unique(hardware[model == name])
        if len(types) < 2:
            continue  # no history to keep
        held = rng.choice(types, size=len(types) // 2, replace=False)
        masks.append((model == name) & np.isin(hardware, held))
    return masks


def inner_chunks(train: pl.DataFrame, split: str, seed: int = 0) -> np.ndarray:
    """A chunk id (0..k-1) per training row, cut as the split cuts: one chunk per model or
    type (at most ``MAX_INNER_FOLDS``, ``GroupKFold``); ``INNER_FOLDS`` chunks of (model, type)
    groups for ``leave-model-hardware-out`` and of rows for ``random`` (``KFold``). For
    ``partial-history``, one chunk per model: a random half of each model's types in its
    model's chunk and the other half in the next chunk, so validating a chunk predicts half of
    its models' types with the other half in the history, as the split's test does."""
    from sklearn.model_selection import GroupKFold, KFold

    chunk = np.zeros(train.height, dtype=int)
    index = np.arange(train.height)
    if split == "random":
        splitter, group = KFold(INNER_FOLDS, shuffle=True, random_state=seed), None
    else:
        keys = ["model_type"] if split == "partial-history" else GROUP_KEYS[split]
        group = groups(train, keys)
        most = INNER_FOLDS if split == "leave-model-hardware-out" else MAX_INNER_FOLDS
        n_chunks = min(most, len(np.unique(group)))
        if n_chunks < 2:
            return chunk
        splitter = GroupKFold(n_chunks, shuffle=True, random_state=seed)
    for k, (_, held) in enumerate(splitter.split(index, groups=group)):
        chunk[held] = k
    if split == "partial-history" and chunk.max() > 0:
        n_chunks = chunk.max() + 1
        held_half = np.zeros(train.height, dtype=bool)
        for mask in _partial_history(train, seed):
            held_half |= mask
        chunk = np.where(held_half, chunk, (chunk + 1) % n_chunks)
    return chunk


def validation_folds(train: pl.DataFrame, split: str, seed: int = 0) -> list[np.ndarray]:
    """Boolean masks of a fold's training rows that a selection validates on, each held out as
    the split holds out its test rows: for ``partial-history`` a random half of one model's
    types (of several models' beyond ``MAX_INNER_FOLDS`` models), otherwise one of the
    ``inner_chunks`` (one model or type each up to ``MAX_INNER_FOLDS``, else several; three
    folds of (model, type) groups or of rows). Each is
    then built as a test fold is (``crossval.run_fold``), its features from the rows outside it
    alone: validated on chunks whose features were built once for the whole fold, the single
    GBDT looked worse than the rule on Sia's partial history while it was 15x better on the
    test folds (``benchmarks/selection_study.py``)."""
    if split == "partial-history":
        # one per model, at most MAX_INNER_FOLDS (several models' halves together beyond): the
        # outer folds are one per model too, so uncapped the fits would grow with its square
        masks = _partial_history(train, seed)
        if len(masks) <= MAX_INNER_FOLDS:
            return masks
        order = np.random.default_rng(seed).permutation(len(masks)) % MAX_INNER_FOLDS
        return [
            np.logical_or.reduce([m for m, k in zip(masks, order, strict=True) if k == fold])
            for fold in range(MAX_INNER_FOLDS)
        ]
    chunk = inner_chunks(train, split, seed=seed)
    if chunk.max() == 0:
        return []
    return [chunk == c for c in np.unique(chunk)]


def exclude_groups(attempts: pl.DataFrame, groups: str) -> pl.DataFrame:
    """Rows without the ``MODEL:TYPE,...`` groups of ``groups`` (each must match some rows)."""
    for group in filter(None, (g.strip() for g in groups.split(","))):
        model_type, _, hardware_type = group.partition(":")
        match = (pl.col("model_type") == model_type) & (pl.col("hardware_type") == hardware_type)
        if not hardware_type or attempts.filter(match).height == 0:
            raise ValueError(f"--exclude: {group!r} is not a MODEL:TYPE group of these rows")
        attempts = attempts.filter(~match)
    return attempts
