"""Novelty at submission: a launch far from every known model type is flagged, a known one never."""

import numpy as np

from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.novelty import NOVELTY_FEATURES, NoveltyReference


def _rows(points: dict[str, list[float]]) -> tuple[list[str], np.ndarray]:
    """Feature rows whose novelty columns hold ``exp(value) - 1`` (a log1p point of ``value``)."""
    names, X = [], np.full((len(points), len(FEATURE_COLUMNS)), np.nan)
    columns = [FEATURE_COLUMNS.index(c) for c in NOVELTY_FEATURES]
    for i, (name, point) in enumerate(points.items()):
        names.append(name)
        X[i, columns] = np.expm1(np.resize(point, len(NOVELTY_FEATURES)))
    return names, X


# a line of model types one apart: each known type's nearest neighbour is at the same distance
KNOWN = {f"m{i}": [float(i)] for i in range(10)}


def test_a_known_model_type_is_never_novel():
    reference = NoveltyReference.fit(*_rows(KNOWN))
    _, X = _rows({"far": [100.0]})
    novelty = reference.assess("m3", X[0])  # whatever its architecture says
    assert not novelty.novel and novelty.distance == 0.0 and novelty.nearest_model_type == "m3"


def test_a_new_type_is_novel_only_when_farther_than_the_known_types_are_apart():
    reference = NoveltyReference.fit(*_rows(KNOWN))
    _, X = _rows({"near": [4.4], "far": [30.0]})
    near = reference.assess("new-near", X[0])
    assert not near.novel and near.nearest_model_type == "m4"
    assert near.distance < near.threshold
    far = reference.assess("new-far", X[1])
    assert far.novel and far.nearest_model_type == "m9"
    assert far.distance > far.threshold


def test_a_launch_without_an_architecture_is_not_judged():
    reference = NoveltyReference.fit(*_rows(KNOWN))
    assert reference.assess("new", np.full(len(FEATURE_COLUMNS), np.nan)) is None
    empty = NoveltyReference.fit([], np.empty((0, len(FEATURE_COLUMNS))))
    assert empty.assess("new", _rows({"x": [1.0]})[1][0]) is None


def test_the_reference_survives_the_model_metadata():
    reference = NoveltyReference.fit(*_rows(KNOWN))
    restored = NoveltyReference.from_dict(reference.to_dict())
    _, X = _rows({"far": [30.0]})
    assert restored.assess("new", X[0]) == reference.assess("new", X[0])
    # a model saved before novelty existed, or with other columns, has no reference
    assert NoveltyReference.from_dict(None) is None
    assert NoveltyReference.from_dict({**reference.to_dict(), "features": ["other"]}) is None


def test_one_known_type_judges_nothing_novel():
    reference = NoveltyReference.fit(*_rows({"only": [1.0]}))
    assert not reference.assess("new", _rows({"far": [50.0]})[1][0]).novel


def test_novelty_scores_say_how_often_the_flag_is_right():
    from leap_pipeline.modeling.evaluation import novelty_scores

    reference = NoveltyReference.fit(*_rows(KNOWN))
    _, X = _rows({"near": [4.4], "far": [30.0], "unknown": [np.nan]})
    flags = reference.assess_rows(["new-near", "new-far", "new-unknown"], X)
    measured = np.array([100.0, 100.0, 100.0])
    # the near launch predicted within 20%, the far one missed: the flag is right on both
    scores = novelty_scores(flags, np.array([110.0, 200.0, 100.0]), measured)
    assert scores["launches"] == 3 and scores["judged"] == 2
    assert scores["flagged_share"] == 1 / 3
    assert scores["w20_flagged"] == 0.0 and scores["w20_unflagged"] == 1.0
    assert scores["flag_right"] == 1.0
    # the far launch predicted well after all: the flag was wrong there
    assert novelty_scores(flags, np.array([110.0, 100.0, 100.0]), measured)["flag_right"] == 2 / 3
