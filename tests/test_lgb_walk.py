"""The compiled walks read LightGBM's text model and give LightGBM's own raw scores, bit for bit;
the reader refuses a text it does not understand, naming the field."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest

from leap_serving.model.boosters import GBDTClassifier, GBDTRegressor
from leap_serving.model.compiled import CompiledExperts
from leap_serving.model.lgb_text import (
    ZERO_THRESHOLD,
    ModelTextError,
    forest_from_text,
    read_model_text,
)


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    # missing values meaning "high" in one column and "low" in another, so splits learn to send
    # them both ways; column 3 has none in training, and zeros
    X[rng.random(n) < 0.2, 0] = np.nan
    X[rng.random(n) < 0.2, 1] = np.nan
    X[rng.random(n) < 0.1, 3] = 0.0
    y = (np.where(np.isnan(X[:, 0]), 3.0, np.nan_to_num(X[:, 0]))
         + np.where(np.isnan(X[:, 1]), -3.0, np.nan_to_num(X[:, 1]))
         + np.where(X[:, 3] == 0.0, 2.0, 0.3 * X[:, 3]) + 0.5 * X[:, 4] * X[:, 5])  # fmt: skip
    return X, y


def _new_rows(n: int, seed: int, thresholds: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    X[rng.random(n) < 0.3] = np.nan  # missing everywhere, also where training had none
    X[rng.random(n) < 0.3, 0] = np.nan
    band = [0.0, -0.0, ZERO_THRESHOLD, -ZERO_THRESHOLD, 5e-36, -5e-36, 1e-30, -1e-30]
    X[: n // 4, 3] = rng.choice(band, n // 4)  # the zero band LightGBM reads as 0.0
    X[n // 4 : n // 2, 4] = rng.choice(thresholds, n // 2 - n // 4)  # exactly on a split
    return X


def _thresholds(text: str) -> np.ndarray:
    lines = [line for line in text.splitlines() if line.startswith("threshold=")]
    return np.array([float(v) for line in lines for v in line[10:].split()])


@pytest.fixture(scope="module")
def fitted():
    X, y = _data(3000, 0)
    regressor = GBDTRegressor(max_iter=60, max_leaf_nodes=31, early_stopping=False).fit(X, y)
    binary = GBDTClassifier(max_iter=20, early_stopping=False).fit(X, (y > 0.5).astype(int) * 4)
    multi = GBDTClassifier(max_iter=20, early_stopping=False).fit(X, np.digitize(y, [-1, 0, 2]))
    return regressor, binary, multi


def test_every_walk_gives_lightgbm_raw_scores_bit_for_bit(fitted):
    regressor, binary, multi = fitted
    decisions = {
        int(v)
        for line in regressor.model_text_.splitlines()
        if line.startswith("decision_type=")
        for v in line[14:].split()
    }
    assert {(d >> 2) & 3 for d in decisions} == {0, 2}  # splits with and without missing values
    assert {d & 2 for d in decisions if (d >> 2) & 3 == 2} == {0, 2}  # NaN sent both ways
    for model in fitted:
        booster = lgb.Booster(model_str=model.model_text_)
        X = _new_rows(5000, 1, _thresholds(model.model_text_))
        expected = booster.predict(X, raw_score=True).reshape(len(X), -1)
        forest = forest_from_text(model.model_text_)
        for threads in (1, 2):
            assert np.array_equal(forest.raw_predict_many(X, threads), expected)
        if expected.shape[1] == 1:
            assert np.array_equal(forest.predict_many(X, 2), expected[:, 0])
        for n in (1, 2, 20, 64, 65, 130):  # a ranking's rows as groups, a lone row, > 64 rows
            assert np.array_equal(forest.raw_predict(X[:n]), expected[:n])
    raw = binary.decision_function(X)
    assert raw.ndim == 1 and np.array_equal(binary.predict(X), np.where(raw > 0, 4, 0))
    assert multi.decision_function(X).shape == (len(X), 4)


def test_the_experts_walk_gives_each_needed_expert_as_lightgbm_does(fitted):
    X, y = _data(2000, 2)
    regressor = fitted[0]
    other = GBDTRegressor(max_iter=15, early_stopping=False).fit(X, -y)
    experts = CompiledExperts([regressor, other])
    rng = np.random.default_rng(3)
    launch = rng.normal(size=6)
    for n in (1, 20, 65):
        rows = np.tile(launch, (n, 1))  # columns shared, as a launch's candidates share them
        rows[:, 3:] = rng.normal(size=(n, 3))
        rows[rng.random(n) < 0.3, 0] = np.nan
        by_expert = np.column_stack(
            [lgb.Booster(model_str=m.model_text_).predict(rows, raw_score=True)
             for m in (regressor, other)]
        )  # fmt: skip
        top = rng.integers(0, 2, size=(n, 1))
        top = np.hstack([top, 1 - top, top])  # both, in either order, one named twice
        expected = np.take_along_axis(by_expert, top, axis=1)
        assert np.array_equal(experts.predict(rows, top), expected)
        assert np.array_equal(experts.predict_many(rows, top, 2), expected)


def _tree_field(text: str, key: str) -> list[int]:
    """One integer field of Tree=0."""
    lines = text.split("\n")
    start = lines.index("Tree=0")
    line = next(x for x in lines[start:] if x.startswith(f"{key}="))
    return [int(v) for v in line[len(key) + 1 :].split()]


def _with_tree_field(text: str, key: str, values: list[int]) -> str:
    """The text with one field of Tree=0 replaced, as many values as before."""
    lines = text.split("\n")
    start = lines.index("Tree=0")
    at = next(i for i in range(start, len(lines)) if lines[i].startswith(f"{key}="))
    assert len(lines[at].split()) == len(values), "a case must keep the value count"
    lines[at] = f"{key}=" + " ".join(map(str, values))
    return "\n".join(lines)


def _children_cases(text: str) -> dict[str, tuple[str, str]]:
    """Tree=0's children broken one way per case, each keeping the value count (and, but for
    the two range cases, every index in range), so each reaches the check it names."""
    left, right = _tree_field(text, "left_child"), _tree_field(text, "right_child")
    n_inner = len(left)
    assert n_inner >= 3 and min(left[0], right[0]) >= 0  # the root's children are inner nodes
    # a node with a leaf on its left
    i = next(i for i in range(n_inner) if left[i] < 0)
    # the root's right subtree replaced by one of its own leaves: nothing is reached twice,
    # and the rest of that subtree is never reached
    leaf = right[0]
    while leaf >= 0:
        leaf = left[leaf]
    cases = {}
    cases["child past the inner nodes"] = (
        _with_tree_field(text, "left_child", [n_inner, *left[1:]]),
        r"Tree=0: a child index is outside the tree",
    )
    cases["child before the first leaf"] = (
        _with_tree_field(text, "right_child", [-(n_inner + 2), *right[1:]]),
        r"Tree=0: a child index is outside the tree",
    )
    both_left = right.copy()
    both_left[i] = left[i]  # both children of node i are the same leaf
    cases["leaf reached twice"] = (
        _with_tree_field(text, "right_child", both_left),
        rf"Tree=0: leaf {~left[i]} is reached twice",
    )
    cycle = left.copy()
    cycle[i] = 0  # node i's left child is the root: a cycle
    cases["cycle"] = (
        _with_tree_field(text, "left_child", cycle),
        r"Tree=0: node 0 is reached twice",
    )
    cases["not one tree"] = (
        _with_tree_field(text, "right_child", [leaf, *right[1:]]),
        r"Tree=0: its children do not form one tree",
    )
    return cases


@pytest.fixture(scope="module")
def malformed(fitted) -> dict[str, tuple[str, str]]:
    """The regressor's text broken one way per case, with the message of the check it names."""
    text = fitted[0].model_text_
    line = next(x for x in text.splitlines() if x.startswith("decision_type="))
    first = int(line[14:].split()[0])
    features = _tree_field(text, "split_feature")
    return {
        "version": (text.replace("version=v4", "version=v5", 1), r"version='v5'"),
        "categorical": (
            text.replace(line, line.replace(f"={first}", f"={first | 1}", 1), 1),
            r"Tree=0: a categorical split \(decision_type\) is not supported",
        ),
        "zero-as-missing": (
            text.replace(line, line.replace(f"={first}", f"={(first & ~12) | 4}", 1), 1),
            r"Tree=0: zero-as-missing splits \(decision_type\) are not supported",
        ),
        "truncated": (text[: len(text) // 2], r"no 'end of trees' line: it is truncated"),
        "leaf_value count": (
            text.replace("leaf_value=", "leaf_value=1 ", 1),
            r"Tree=0: leaf_value holds \d+ values, the tree needs \d+",
        ),
        "tree numbers": (text.replace("Tree=1\n", "Tree=7\n", 1), r"Tree=7 where Tree=1"),
        "left_child count": (
            text.replace("left_child=", "left_child=0 ", 1),
            r"Tree=0: left_child holds \d+ values, the tree needs \d+",
        ),
        "split_feature": (
            _with_tree_field(text, "split_feature", [99, *features[1:]]),
            r"Tree=0: split_feature outside 0\.\.5",
        ),
        **_children_cases(text),
    }


MALFORMED = [
    "version", "categorical", "zero-as-missing", "truncated", "leaf_value count", "tree numbers",
    "left_child count", "split_feature", "child past the inner nodes",
    "child before the first leaf", "leaf reached twice", "cycle", "not one tree",
]  # fmt: skip


def test_the_reader_reads_the_fitted_text(fitted, malformed):
    trees, per_iteration, n_features = read_model_text(fitted[0].model_text_)
    assert (len(trees), per_iteration, n_features) == (60, 1, 6)
    assert sorted(malformed) == sorted(MALFORMED)


@pytest.mark.parametrize("case", MALFORMED)
def test_the_reader_refuses_what_it_does_not_understand(fitted, malformed, case):
    """Each malformed text is refused by the check its case names (the message says which): a
    case that broke a value count instead fails its match."""
    bad, message = malformed[case]
    assert bad != fitted[0].model_text_
    with pytest.raises(ModelTextError, match=message):
        read_model_text(bad)


def test_trees_read_a_few_at_a_time_make_the_same_nodes_and_name_the_tree_at_fault(
    fitted, monkeypatch
):
    """The reader converts and checks its trees in batches of ``TREES_AT_ONCE``: a batch
    boundary changes no node, and a fault in a later batch names its own tree."""
    from leap_serving.model import lgb_text

    texts = [model.model_text_ for model in fitted]
    whole = [read_model_text(text)[0] for text in texts]
    monkeypatch.setattr(lgb_text, "TREES_AT_ONCE", 7)
    for text, trees in zip(texts, whole, strict=True):
        batched = read_model_text(text)[0]
        assert [t.tobytes() for t in batched] == [t.tobytes() for t in trees]
    text = texts[0]
    lines = text.split("\n")
    start = lines.index("Tree=45")
    at = next(i for i in range(start, len(lines)) if lines[i].startswith("leaf_value="))
    lines[at] = lines[at].replace("=", "=nan ", 1).rsplit(" ", 1)[0]  # as many values, one NaN
    with pytest.raises(ModelTextError, match=r"^Tree=45: leaf_value holds nan"):
        read_model_text("\n".join(lines))


def test_boosters_early_stop_on_the_held_out_rows():
    X, y = _data(3000, 4)
    rng = np.random.default_rng(4)
    y_noise = rng.normal(size=3000)  # nothing to learn: the held-out loss stops improving
    model = GBDTRegressor(max_iter=500, learning_rate=0.3).fit(
        X[:2500], y_noise[:2500], X_val=X[2500:], y_val=y_noise[2500:]
    )
    assert model.n_iter_ < 100
    assert len(read_model_text(model.model_text_)[0]) == model.n_iter_
    full = GBDTRegressor(max_iter=40, early_stopping=False).fit(X, y)
    assert full.n_iter_ == 40
