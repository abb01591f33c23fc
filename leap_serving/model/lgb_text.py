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
_SPLIT_KEYS = ("split_feature", "threshold", "decision_type", "left_child", "right_child")


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


def _numbers(fields: dict[str, str], key: str, dtype, count: int, where: str) -> np.ndarray:
    try:
        values = np.array(fields[key].split(), dtype=dtype)
    except KeyError:
        raise ModelTextError(f"{where} has no {key}") from None
    except (ValueError, OverflowError) as exc:  # OverflowError: an integer beyond int64
        raise ModelTextError(f"{where}: {key} is not a list of numbers ({exc})") from None
    if len(values) != count:
        raise ModelTextError(f"{where}: {key} holds {len(values)} values, the tree needs {count}")
    # a threshold may be infinite (every present value goes left, missing ones by the flag)
    bad = np.isnan(values) if key == "threshold" else ~np.isfinite(values)
    if dtype is np.float64 and np.any(bad):
        raise ModelTextError(f"{where}: {key} holds {values[bad][0]}")
    return values


def _walk_thresholds(threshold: np.ndarray) -> np.ndarray:
    """The thresholds that send a value in the zero band where LightGBM sends 0.0."""
    walked = threshold.copy()
    walked[(threshold >= 0.0) & (threshold < ZERO_THRESHOLD)] = ZERO_THRESHOLD
    walked[(threshold >= -ZERO_THRESHOLD) & (threshold < 0.0)] = np.nextafter(
        -ZERO_THRESHOLD, -np.inf
    )
    return walked


def _tree_nodes(fields: dict[str, str], n_features: int, where: str) -> np.ndarray:
    """One tree's nodes depth first (a node's left child next to it), ``NODE`` rows."""
    try:
        n_leaves = int(fields["num_leaves"])
    except (KeyError, ValueError):
        raise ModelTextError(f"{where}: num_leaves={fields.get('num_leaves')!r}") from None
    for key, allowed in (("num_cat", "0"), ("is_linear", "0")):
        if fields.get(key, "0") != allowed:
            raise ModelTextError(f"{where}: {key}={fields[key]} is not supported")
    if n_leaves < 1:
        raise ModelTextError(f"{where}: num_leaves={n_leaves}")
    leaf_value = _numbers(fields, "leaf_value", np.float64, n_leaves, where)
    nodes = np.zeros(2 * n_leaves - 1, dtype=NODE)
    if n_leaves == 1:
        nodes[0] = (leaf_value[0], 0, 0, LEAF, 0)
        return nodes
    n_inner = n_leaves - 1
    feature = _numbers(fields, "split_feature", np.int64, n_inner, where)
    threshold = _numbers(fields, "threshold", np.float64, n_inner, where)
    decision = _numbers(fields, "decision_type", np.int64, n_inner, where)
    children = [_numbers(fields, k, np.int64, n_inner, where) for k in _SPLIT_KEYS[3:]]
    if np.any((feature < 0) | (feature >= n_features)):
        raise ModelTextError(f"{where}: split_feature outside 0..{n_features - 1}")
    if np.any(decision & _CATEGORICAL):
        raise ModelTextError(f"{where}: a categorical split (decision_type) is not supported")
    missing = (decision >> 2) & 3
    if np.any((missing != _MISSING_NONE) & (missing != _MISSING_NAN)):
        raise ModelTextError(f"{where}: zero-as-missing splits (decision_type) are not supported")
    for child in children:
        if np.any((child >= n_inner) | (child < -n_leaves)):
            raise ModelTextError(f"{where}: a child index is outside the tree")
    # the depth-first order in plain ints, the rows then written a column at a time: a row
    # written per node was most of a model's load (0.2 s for a night's cascade)
    left, right = (child.tolist() for child in children)
    seen_inner, seen_leaf = [False] * n_inner, [False] * n_leaves
    order: list[int] = []  # the LightGBM node at each position (~leaf for a leaf)
    right_at = [0] * len(nodes)  # an inner node's position -> its right child's
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
    if len(order) != len(nodes) or not (all(seen_inner) and all(seen_leaf)):
        raise ModelTextError(f"{where}: its children do not form one tree")
    at = np.array(order)
    leaves, inner = at < 0, at >= 0
    nodes["value"][leaves] = leaf_value[~at[leaves]]
    nodes["flags"][leaves] = LEAF
    split = at[inner]
    t = threshold[split]
    goes_left = np.where(missing[split] != 0, (decision[split] & _DEFAULT_LEFT) != 0, t >= 0.0)
    nodes["value"][inner] = _walk_thresholds(t)
    nodes["feature"][inner] = feature[split]
    nodes["flags"][inner] = MISSING_LEFT * goes_left
    nodes["right"] = right_at
    return nodes


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
    trees = []
    if sep:
        for index, block in enumerate(body.split("\nTree=")):
            number, _, block = block.partition("\n")
            if number.strip() != str(index):
                raise ModelTextError(f"Tree={number.strip()} where Tree={index} was expected")
            fields = _fields(block, f"Tree={index}")
            trees.append(_tree_nodes(fields, n_features, f"Tree={index}"))
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
