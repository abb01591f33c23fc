"""A fitted cascade or booster as one JSON file: its parameters, its fitted figures, and each
booster's trees as LightGBM's own text model.

Loading reads JSON (dicts, lists, strings and numbers only) and each tree text through the strict
reader (``lgb_text``): no object is built from anything a file names, so a file can refuse to
load but cannot run code. Every key is checked against what this code writes, and a refusal names
the file and the field. A saved model predicts bit for bit as it did before saving (tests hold
it): floats go through JSON's shortest round-trip repr, trees through LightGBM's ``%.17g`` text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .boosters import GBDTClassifier, GBDTRegressor
from .cascade import BinnedCascade
from .lgb_text import ModelTextError

FORMAT = "leap-model"
FORMAT_VERSION = 1
_BOOSTERS = {cls.__name__: cls for cls in (GBDTRegressor, GBDTClassifier)}
# the fitted attributes of a cascade, each with what JSON holds for it
_CASCADE_FITTED: dict[str, type] = {
    "n_features_in_": int, "n_bins_": int, "temperature_": float, "bin_edges_": list,
    "bins_merged_": int, "em_iterations_": int, "rows_moved_": list, "rows_rescued_": list,
    "bin_rows_": list, "n_trees_per_expert_": list, "fit_seconds_": dict,
}  # fmt: skip


class ModelFileError(ValueError):
    """A model file this code refuses; the message names the file and the field."""


def booster_dict(booster: GBDTRegressor | GBDTClassifier) -> dict[str, Any]:
    fitted = {"n_iter_": int(booster.n_iter_), "n_features_in_": int(booster.n_features_in_)}
    if isinstance(booster, GBDTClassifier):
        fitted["classes_"] = [int(c) for c in booster.classes_]
    return {
        "kind": type(booster).__name__,
        "params": booster.get_params(),
        "fitted": fitted,
        "model_text": booster.model_text_,
    }


# fitting settings added after FORMAT_VERSION 1 was written: a file saved before them lacks
# them and loads with their default (they change how a model fits, not what it predicts)
_LATER_PARAMS = frozenset({"early_stopping_tol"})


def _params(cls: type, params: Any, where: str) -> dict[str, Any]:
    expected = cls().get_params()
    if isinstance(params, dict) and set(expected) - set(params) <= _LATER_PARAMS:
        params = {**{k: expected[k] for k in _LATER_PARAMS if k in expected}, **params}
    if not isinstance(params, dict) or set(params) != set(expected):
        keys = sorted(params) if isinstance(params, dict) else params
        raise ModelFileError(f"{where}: params {keys!r}, a {cls.__name__} has {sorted(expected)}")
    for key, value in params.items():
        if value is not None and not isinstance(value, bool | int | float | str):
            raise ModelFileError(f"{where}: params.{key}={value!r} is not a plain value")
    return params


def _number(value: Any, kind: type, where: str) -> Any:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        ok = (ok or isinstance(value, float)) and math.isfinite(value)
    if not ok:
        raise ModelFileError(f"{where}={value!r} is not a finite {kind.__name__}")
    return value


def booster_from_dict(data: Any, where: str) -> GBDTRegressor | GBDTClassifier:
    """A booster from ``booster_dict``'s output, its trees read (and checked) at once."""
    if not isinstance(data, dict) or set(data) != {"kind", "params", "fitted", "model_text"}:
        raise ModelFileError(f"{where} is not a booster record")
    cls = _BOOSTERS.get(data["kind"])
    if cls is None:
        raise ModelFileError(f"{where}: kind={data['kind']!r} is not one of {sorted(_BOOSTERS)}")
    booster = cls(**_params(cls, data["params"], where))
    fitted = data["fitted"]
    keys = {"n_iter_", "n_features_in_"} | ({"classes_"} if cls is GBDTClassifier else set())
    if not isinstance(fitted, dict) or set(fitted) != keys:
        raise ModelFileError(f"{where}: fitted holds {fitted!r}, a {cls.__name__} has {keys}")
    booster.n_iter_ = _number(fitted["n_iter_"], int, f"{where}.n_iter_")
    booster.n_features_in_ = _number(fitted["n_features_in_"], int, f"{where}.n_features_in_")
    if cls is GBDTClassifier:
        classes = fitted["classes_"]
        if not isinstance(classes, list) or len(classes) < 2:
            raise ModelFileError(f"{where}.classes_={classes!r}")
        booster.classes_ = np.array([_number(c, int, f"{where}.classes_") for c in classes])
    booster.model_text_ = data["model_text"]
    try:
        forest = booster.forest()
    except ModelTextError as exc:
        raise ModelFileError(f"{where}.model_text: {exc}") from None
    outputs = len(booster.classes_) if cls is GBDTClassifier and len(booster.classes_) > 2 else 1
    if forest.n_features != booster.n_features_in_ or len(forest.baseline) != outputs:
        raise ModelFileError(
            f"{where}.model_text has {forest.n_features} features and {len(forest.baseline)} "
            f"outputs, the record says {booster.n_features_in_} and {outputs}"
        )
    return booster


def cascade_dict(cascade: BinnedCascade) -> dict[str, Any]:
    fitted: dict[str, Any] = {}
    for key in _CASCADE_FITTED:
        value = getattr(cascade, key)
        fitted[key] = value.tolist() if isinstance(value, np.ndarray) else value
    if hasattr(cascade, "prior_fallback_"):
        fitted["prior_fallback_"] = float(cascade.prior_fallback_)
    return {
        "kind": "BinnedCascade",
        "params": cascade.get_params(),
        "fitted": json.loads(json.dumps(fitted, default=_plain)),
        "experts": [None if e is None else booster_dict(e) for e in cascade.experts_],
        "classifier": None if cascade.classifier_ is None else booster_dict(cascade.classifier_),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def cascade_from_dict(data: Any, where: str) -> BinnedCascade:
    keys = {"kind", "params", "fitted", "experts", "classifier"}
    if not isinstance(data, dict) or set(data) != keys or data["kind"] != "BinnedCascade":
        raise ModelFileError(f"{where} is not a cascade record")
    cascade = BinnedCascade(**_params(BinnedCascade, data["params"], where))
    fitted = data["fitted"]
    optional = {"prior_fallback_"} if cascade.residual_on_prior else set()
    if not isinstance(fitted, dict) or set(fitted) != set(_CASCADE_FITTED) | optional:
        raise ModelFileError(f"{where}: fitted keys {sorted(fitted)!r} are not a cascade's")
    for key, kind in (_CASCADE_FITTED | dict.fromkeys(optional, float)).items():
        value = fitted[key]
        if kind in (int, float):
            value = _number(value, kind, f"{where}.fitted.{key}")
        elif not isinstance(value, kind):
            raise ModelFileError(f"{where}.fitted.{key} is not a {kind.__name__}")
        setattr(cascade, key, value)
    for key, kind in (("bin_edges_", float), ("bin_rows_", int)):
        values = [_number(v, kind, f"{where}.fitted.{key}") for v in fitted[key]]
        setattr(cascade, key, np.array(values, dtype=kind))
    experts = data["experts"]
    if not isinstance(experts, list) or len(experts) != cascade.n_bins_:
        raise ModelFileError(f"{where}: experts is not a list of {cascade.n_bins_} boosters")
    cascade.experts_ = [
        None if e is None else booster_from_dict(e, f"{where}.experts[{b}]")
        for b, e in enumerate(experts)
    ]
    classifier = data["classifier"]
    cascade.classifier_ = (
        None if classifier is None else booster_from_dict(classifier, f"{where}.classifier")
    )
    for booster in [*cascade.experts_, cascade.classifier_]:
        if booster is not None and booster.n_features_in_ != cascade.n_features_in_:
            raise ModelFileError(f"{where}: a booster takes {booster.n_features_in_} features")
    return cascade


def dump_model(model: BinnedCascade | GBDTRegressor, path: str | Path) -> None:
    """Write a cascade or a booster as one JSON model file."""
    record = cascade_dict(model) if isinstance(model, BinnedCascade) else booster_dict(model)
    Path(path).write_text(json.dumps({"format": FORMAT, "version": FORMAT_VERSION, **record}))


def load_model(path: str | Path, expected: type) -> BinnedCascade | GBDTRegressor:
    """Read a model file holding an ``expected`` (``BinnedCascade``, or a booster class);
    raises ``ModelFileError`` naming the file and what is wrong."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{where} cannot be read: {exc}") from None
    if not isinstance(data, dict) or (data.get("format"), data.get("version")) != (
        FORMAT,
        FORMAT_VERSION,
    ):
        raise ModelFileError(f"{where} is not a {FORMAT} file of version {FORMAT_VERSION}")
    record = {k: v for k, v in data.items() if k not in ("format", "version")}
    if expected is BinnedCascade:
        return cascade_from_dict(record, where)
    booster = booster_from_dict(record, where)
    if not isinstance(booster, expected):
        raise ModelFileError(f"{where} holds a {type(booster).__name__}, not {expected.__name__}")
    return booster
