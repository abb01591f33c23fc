"""LightGBM's text model format, read strictly into the packed nodes the compiled walks take.

A fitted booster is stored as LightGBM's own text (``Booster.model_to_string``), and serving
builds its trees from that text here, never through LightGBM nor any object a file names. The
reader accepts what the night fits (numerical splits, version v4) and refuses anything else by
name, with the line it read: categorical splits, linear trees, zero-as-missing, an unknown
version or a tree whose children do not form a tree.

Two of LightGBM's prediction rules become plain thresholds, so the walk stays one comparison a
node and gives LightGBM's raw scores bit for bit (tests hold it to ``Booster.predict``):

- a value within ``ZERO_THRESHOLD`` of zero is read as 0.0 (LightGBM's predictor drops such
  values from a row): a threshold inside that band moves to its edge, where every value in the
  band falls on the side 0.0 does;
- a missing value goes where 0.0 goes at a split learned without missing values (LightGBM reads
  NaN as 0.0 there), and to the learned side where training had them.
"""

from __future__ import annotations

import numpy as np

from .trees import LEAF, MISSING_LEFT, NODE, CompiledForest

FORMAT_VERSION = "v4"
# LightGBM's kZeroThreshold, a float (1e-35f) compared as a double
ZERO_THRESHOLD = float(np.float32(1e-35))
_CATEGORICAL, _DEFAULT_LEFT = 1, 2
_MISSING_NONE, _MISSING_ZERO, _MISSING_NAN = 0, 1, 2
# outputs a model may have (a classifier's classes): more than any cascade's bins, and few
# enough that a file cannot make the reader allocate a baseline of its choosing
MAX_OUTPUTS = 1024
# trees read at once: their numbers are converted and checked together, and the Python lists
# that takes (a few times their text's size) are held for these trees only, not a whole forest's
TREES_AT_ONCE = 1024


class ModelTextError(ValueError):
    """A text model this reader refuses; the message names the field and value."""


def _fields(block: str, where: str) -> dict[str, str]:
    fields = {}
    for line in block.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ModelTextError(f"{where}: line {line[:60]!r} is not key=value")
        fields[key] = value
    return fields


def _numbers(
    blocks: list[dict[str, str]], key: str, dtype, counts: list[int], first: int
) -> tuple[np.ndarray, np.ndarray]:
    """``key``'s values of every tree with a positive count, in tree order, and where each
    tree's start among them: one conversion for all trees, not one per tree, the first tree at
    fault named (``first``: the number of ``blocks[0]``)."""
    parts: list[str] = []
    for index, (fields, count) in enumerate(zip(blocks, counts, strict=True)):
        if count == 0:  # a one-leaf tree has no split
            continue
        try:
            values = fields[key].split()
        except KeyError:
            raise ModelTextError(f"Tree={first + index} has no {key}") from None
        if len(values) != count:
            raise ModelTextError(
                f"Tree={first + index}: {key} holds {len(values)} values, the tree needs {count}"
            )
        parts.extend(values)
    starts = np.cumsum([0, *counts])[:-1]
    try:
        values = np.array(parts, dtype=dtype)
    except (ValueError, OverflowError):  # OverflowError: an integer beyond int64
        for index, (fields, count) in enumerate(zip(blocks, counts, strict=True)):
            try:
                np.array(fields[key].split() if count else [], dtype=dtype)
            except (ValueError, OverflowError) as exc:
                message = f"Tree={first + index}: {key} is not a list of numbers ({exc})"
                raise ModelTextError(message) from None
        raise ModelTextError(f"{key} is not a list of numbers") from None
    if dtype is np.float64:
        # a threshold may be infinite (every present value goes left, missing ones by the flag)
        bad = np.isnan(values) if key == "threshold" else ~np.isfinite(values)
        if bad.any():
            at = int(np.argmax(bad))
            index = int(np.searchsorted(starts, at, side="right")) - 1
            raise ModelTextError(f"Tree={first + index}: {key} holds {values[at]}")
    return values, starts


def _walk_thresholds(threshold: np.ndarray) -> np.ndarray:
    """The thresholds that send a value in the zero band where LightGBM sends 0.0."""
    walked = threshold.copy()
    walked[(threshold >= 0.0) & (threshold < ZERO_THRESHOLD)] = ZERO_THRESHOLD
    walked[(threshold >= -ZERO_THRESHOLD) & (threshold < 0.0)] = np.nextafter(
        -ZERO_THRESHOLD, -np.inf
    )
    return walked


def _first_fault(faults: list[tuple[np.ndarray, str]], starts: np.ndarray, first: int) -> None:
    """Raise the fault of the first tree with one (``faults``: a mask over the split values
    and its message, in the order a tree is checked)."""
    found = []
    for order, (mask, message) in enumerate(faults):
        if mask.any():
            index = int(np.searchsorted(starts, int(np.argmax(mask)), side="right")) - 1
            found.append((index, order, message))
    if found:
        index, _, message = min(found)
        raise ModelTextError(f"Tree={first + index}: {message}")


def _depth_first(left: list[int], right: list[int], n_leaves: int, where: str):
    """One tree's LightGBM nodes depth first (a node's left child next to it; ~leaf for a
    leaf), and each position's right child's position (0 for a leaf)."""
    n_inner = n_leaves - 1
    seen_inner, seen_leaf = [False] * n_inner, [False] * n_leaves
    order: list[int] = []
    right_at = [0] * (2 * n_leaves - 1)
    stack = [(0, -1)]  # (LightGBM node, position of the parent whose right child it is)
    while stack:
        node, parent = stack.pop()
        if parent >= 0:
            right_at[parent] = len(order)
        if node < 0:  # a leaf, ~node
            if seen_leaf[~node]:
                raise ModelTextError(f"{where}: leaf {~node} is reached twice")
            seen_leaf[~node] = True
            order.append(node)
            continue
        if seen_inner[node]:
            raise ModelTextError(f"{where}: node {node} is reached twice")
        seen_inner[node] = True
        stack.append((right[node], len(order)))  # right, after the left subtree
        stack.append((left[node], -1))
        order.append(node)
    if len(order) != len(right_at) or not (all(seen_inner) and all(seen_leaf)):
        raise ModelTextError(f"{where}: its children do not form one tree")
    return order, right_at


def _forest_nodes(blocks: list[dict[str, str]], n_features: int, first: int) -> list[np.ndarray]:
    """Each tree's nodes depth first (a node's left child next to it), ``NODE`` rows. The
    numbers of all trees are converted and checked a key at a time, the nodes written a column
    at a time: per tree and per node, they were most of a model's load."""
    leaves = []
    for index, fields in enumerate(blocks):
        where = f"Tree={first + index}"
        try:
            n_leaves = int(fields["num_leaves"])
        except (KeyError, ValueError):
            raise ModelTextError(f"{where}: num_leaves={fields.get('num_leaves')!r}") from None
        for key, allowed in (("num_cat", "0"), ("is_linear", "0")):
            if fields.get(key, "0") != allowed:
                raise ModelTextError(f"{where}: {key}={fields[key]} is not supported")
        if n_leaves < 1:
            raise ModelTextError(f"{where}: num_leaves={n_leaves}")
        leaves.append(n_leaves)
    inner = [n - 1 for n in leaves]
    leaf_value, leaf_starts = _numbers(blocks, "leaf_value", np.float64, leaves, first)
    feature, starts = _numbers(blocks, "split_feature", np.int64, inner, first)
    threshold, _ = _numbers(blocks, "threshold", np.float64, inner, first)
    decision, _ = _numbers(blocks, "decision_type", np.int64, inner, first)
    left, _ = _numbers(blocks, "left_child", np.int64, inner, first)
    right, _ = _numbers(blocks, "right_child", np.int64, inner, first)
    missing = (decision >> 2) & 3
    inner_of = np.repeat(np.array(inner, dtype=np.int64), inner)  # each split's tree's
    leaves_of = inner_of + 1

    def outside(child: np.ndarray) -> np.ndarray:
        return (child >= inner_of) | (child < -leaves_of)

    _first_fault(
        [
            ((feature < 0) | (feature >= n_features), f"split_feature outside 0..{n_features - 1}"),
            (
                (decision & _CATEGORICAL) != 0,
                "a categorical split (decision_type) is not supported",
            ),
            (
                (missing != _MISSING_NONE) & (missing != _MISSING_NAN),
                "zero-as-missing splits (decision_type) are not supported",
            ),
            (outside(left) | outside(right), "a child index is outside the tree"),
        ],
        starts,
        first,
    )
    # the depth-first order in plain ints, tree by tree
    lefts, rights = left.tolist(), right.tolist()
    order: list[int] = []
    right_at: list[int] = []
    for index, (n_leaves, start) in enumerate(zip(leaves, starts.tolist(), strict=True)):
        if n_leaves == 1:
            order.append(-1)
            right_at.append(0)
            continue
        last = start + n_leaves - 1
        tree_order, tree_right = _depth_first(
            lefts[start:last], rights[start:last], n_leaves, f"Tree={first + index}"
        )
        order.extend(tree_order)
        right_at.extend(tree_right)
    sizes = [2 * n - 1 for n in leaves]
    tree_of = np.repeat(np.arange(len(leaves)), sizes)
    at = np.array(order, dtype=np.int64)
    nodes = np.zeros(len(at), dtype=NODE)
    is_leaf, is_inner = at < 0, at >= 0
    nodes["value"][is_leaf] = leaf_value[leaf_starts[tree_of[is_leaf]] + ~at[is_leaf]]
    nodes["flags"][is_leaf] = LEAF
    split = starts[tree_of[is_inner]] + at[is_inner]
    t = threshold[split]
    goes_left = np.where(missing[split] != 0, (decision[split] & _DEFAULT_LEFT) != 0, t >= 0.0)
    nodes["value"][is_inner] = _walk_thresholds(t)
    nodes["feature"][is_inner] = feature[split]
    nodes["flags"][is_inner] = MISSING_LEFT * goes_left
    nodes["right"] = right_at
    return np.split(nodes, np.cumsum(sizes[:-1])) if sizes else []


def read_model_text(text: str) -> tuple[list[np.ndarray], int, int]:
    """LightGBM text -> (each tree's ``NODE`` rows in tree order, trees per iteration (one per
    class for softmax, else one), feature count). Tree t adds to output ``t % per_iteration``."""
    if not isinstance(text, str):
        raise ModelTextError(f"a model text must be a str, not {type(text).__name__}")
    head, sep, body = text.partition("\nTree=")
    header = _fields("\n".join(head.splitlines()[1:]), "the model header")
    if not head.startswith("tree\n"):
        raise ModelTextError("the text does not start with LightGBM's 'tree' line")
    if header.get("version") != FORMAT_VERSION:
        version = header.get("version")
        raise ModelTextError(f"version={version!r}: this reader takes {FORMAT_VERSION}")
    if "average_output" in header:
        raise ModelTextError("average_output (random-forest mode) is not supported")
    try:
        per_iteration = int(header["num_tree_per_iteration"])
        n_features = int(header["max_feature_idx"]) + 1
    except (KeyError, ValueError) as exc:
        raise ModelTextError(f"the model header lacks a valid {exc}") from None
    if not 0 < per_iteration <= MAX_OUTPUTS or not 0 < n_features <= np.iinfo(np.int16).max:
        raise ModelTextError(
            f"num_tree_per_iteration={per_iteration}, max_feature_idx={n_features - 1}"
        )
    body, end, _ = body.partition("\nend of trees")
    if not end:
        raise ModelTextError("the text has no 'end of trees' line: it is truncated")
    trees: list[np.ndarray] = []
    blocks: list[dict[str, str]] = []
    texts = body.split("\nTree=") if sep else []
    for index, block in enumerate(texts):
        number, _, block = block.partition("\n")
        if number.strip() != str(index):
            raise ModelTextError(f"Tree={number.strip()} where Tree={index} was expected")
        blocks.append(_fields(block, f"Tree={index}"))
        if len(blocks) == TREES_AT_ONCE or index == len(texts) - 1:
            trees += _forest_nodes(blocks, n_features, index + 1 - len(blocks))
            blocks = []
    if len(trees) % per_iteration:
        raise ModelTextError(f"{len(trees)} trees is not a multiple of {per_iteration} a round")
    return trees, per_iteration, n_features


def forest_from_text(text: str, n_rounds: int | None = None) -> CompiledForest:
    """The trees of LightGBM's text model packed for the walks, the first ``n_rounds`` rounds
    of them if given (a shorter model, for the trade-off between trees and speed)."""
    trees, per_iteration, n_features = read_model_text(text)
    if n_rounds is not None:
        trees = trees[: n_rounds * per_iteration]
    return CompiledForest(trees, per_iteration, n_features)
