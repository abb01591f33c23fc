"""A fitted cascade or booster as one JSON file: its parameters, its fitted figures, and each
booster's trees as LightGBM's own text model.

Loading reads JSON (dicts, lists, strings and numbers only) and each tree text through the strict
reader (``lgb_text``): no object is built from anything a file names, so a file can refuse to
load but cannot run code. Every key is checked against what this code writes, and a refusal names
the file and the field. A saved model predicts bit for bit as it did before saving (tests hold
it): floats go through JSON's shortest round-trip repr, trees through LightGBM's ``%.17g`` text.

A file can be self-consistent and still wrong for the process that serves it: the compiled walks
(``trees``) index the feature matrix, the node array, the experts and the bins without bounds
checks, so a split on feature 4,000 of an 85-column matrix reads memory it does not own. Every
index a walk takes is therefore checked here against what serving builds: the feature count
(``n_features``, the length of the feature list), the classifier's classes against the bins, each
bin's expert, each booster's tree count against its rounds, and each parameter's type and range.
"""

from __future__ import annotations

import itertools
import json
import math
import reprlib
from pathlib import Path
from typing import Any

import numpy as np

from .boosters import GBDTClassifier, GBDTRegressor
from .cascade import EFFICIENCY_CAP_MAX, BinnedCascade
from .lgb_text import ModelTextError

FORMAT = "leap-model"
FORMAT_VERSION = 1
_BOOSTERS = {cls.__name__: cls for cls in (GBDTRegressor, GBDTClassifier)}
# the fitted attributes of a cascade, each with what JSON holds for it
_CASCADE_FITTED: dict[str, type] = {
    "n_features_in_": int,
    "n_bins_": int,
    "temperature_": float,
    "bin_edges_": list,
    "bins_merged_": int,
    "em_iterations_": int,
    "rows_moved_": list,
    "rows_rescued_": list,
    "bin_rows_": list,
    "n_trees_per_expert_": list,
    "fit_seconds_": dict,
}
# parameters that may be null besides holding their default's type (threads and jobs: "all")
_NULLABLE_PARAMS = frozenset({"n_threads", "n_jobs"})
_INT64 = 2**63
_SHOW = reprlib.Repr()  # keyword arguments need Python 3.12
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlong = 3, 60, 60, 40


class ModelFileError(ValueError):
    """A model file this code refuses; the message names the file and the field."""


def _show(value: Any) -> str:
    """A value as a refusal shows it: short, whatever its size or depth."""
    return _SHOW.repr(value)


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


# settings added after FORMAT_VERSION 1 was written: a file saved before them lacks them and
# loads with their default, which is what such a file's model did (they change how a model fits)
_LATER_PARAMS = frozenset({"early_stopping_tol", "min_data_in_leaf", "min_data_in_bin"})
# what a cascade learns was two booleans before ``target`` (efficiency_on_cost overriding
# residual_on_prior; an early file has the first only): a file that holds them loads as the
# target they meant
_OLD_TARGET_FLAGS = ("residual_on_prior", "efficiency_on_cost")


def _target_from_flags(params: Any, where: str) -> Any:
    """``params`` with an older file's two booleans turned into the ``target`` they meant;
    anything else as it is."""
    if not isinstance(params, dict) or "target" in params or "residual_on_prior" not in params:
        return params
    flags = {name: params.get(name, False) for name in _OLD_TARGET_FLAGS}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ModelFileError(f"{where}.params.{name}={_show(value)} is not a bool")
    target = (
        "efficiency"
        if flags["efficiency_on_cost"]
        else "residual"
        if flags["residual_on_prior"]
        else "log_q"
    )
    kept = {k: v for k, v in params.items() if k not in _OLD_TARGET_FLAGS}
    return {**kept, "target": target}


def _params(cls: type, params: Any, where: str) -> dict[str, Any]:
    """The constructor parameters of a ``cls``, each of its default's type (an int where a
    float is expected; null only for thread and job counts)."""
    expected = cls().get_params()
    if isinstance(params, dict) and set(expected) - set(params) <= _LATER_PARAMS:
        params = {**{k: expected[k] for k in _LATER_PARAMS if k in expected}, **params}
    if not isinstance(params, dict) or set(params) != set(expected):
        keys = sorted(params) if isinstance(params, dict) else _show(params)
        raise ModelFileError(f"{where}: params {keys!r}, a {cls.__name__} has {sorted(expected)}")
    for key, value in params.items():
        default = expected[key]
        if value is None and (default is None or key in _NULLABLE_PARAMS):
            continue
        if isinstance(default, bool) or default is None:
            ok = isinstance(value, bool) if default is not None else _is_int(value)
        elif isinstance(default, int):
            ok = _is_int(value)
        elif isinstance(default, float):
            ok = _is_int(value) or (isinstance(value, float) and math.isfinite(value))
        else:
            ok = isinstance(value, type(default))
        if not ok:
            kind = "an integer" if default is None else f"a {type(default).__name__}"
            raise ModelFileError(f"{where}.params.{key}={_show(value)} is not {kind}")
    return params


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64


def _number(value: Any, kind: type, where: str, least: float | None = None) -> Any:
    """``value`` if it is a finite ``kind`` (an int64, or a finite float; an int is a float)
    of at least ``least``; a ``ModelFileError`` naming ``where`` otherwise."""
    ok = _is_int(value) or (kind is float and isinstance(value, float) and math.isfinite(value))
    if not ok:
        raise ModelFileError(f"{where}={_show(value)} is not a finite {kind.__name__}")
    if least is not None and value < least:
        raise ModelFileError(f"{where}={_show(value)} is below {least}")
    return value


def _numbers(values: Any, kind: type, where: str, least: float | None = None) -> list:
    if not isinstance(values, list):
        raise ModelFileError(f"{where}={_show(values)} is not a list")
    return [_number(v, kind, f"{where}[{i}]", least) for i, v in enumerate(values)]


def booster_from_dict(
    data: Any, where: str, n_features: int | None = None, kind: type | None = None
) -> GBDTRegressor | GBDTClassifier:
    """A booster from ``booster_dict``'s output, its trees read (and checked) at once; of class
    ``kind`` and taking ``n_features`` columns when they are given."""
    if not isinstance(data, dict) or set(data) != {"kind", "params", "fitted", "model_text"}:
        raise ModelFileError(f"{where} is not a booster record")
    cls = _BOOSTERS.get(data["kind"]) if isinstance(data["kind"], str) else None
    if cls is None or (kind is not None and cls is not kind):
        allowed = [kind.__name__] if kind is not None else sorted(_BOOSTERS)
        raise ModelFileError(f"{where}: kind={_show(data['kind'])} is not one of {allowed}")
    booster = cls(**_params(cls, data["params"], where))
    fitted = data["fitted"]
    keys = {"n_iter_", "n_features_in_"} | ({"classes_"} if cls is GBDTClassifier else set())
    if not isinstance(fitted, dict) or set(fitted) != keys:
        raise ModelFileError(
            f"{where}: fitted holds {_show(fitted)}, a {cls.__name__} has {sorted(keys)}"
        )
    booster.n_iter_ = _number(fitted["n_iter_"], int, f"{where}.fitted.n_iter_", 0)
    booster.n_features_in_ = _number(
        fitted["n_features_in_"], int, f"{where}.fitted.n_features_in_", 1
    )
    if n_features is not None and booster.n_features_in_ != n_features:
        raise ModelFileError(
            f"{where}.fitted.n_features_in_={booster.n_features_in_}: serving builds "
            f"{n_features} features"
        )
    if cls is GBDTClassifier:
        classes = _numbers(fitted["classes_"], int, f"{where}.fitted.classes_", 0)
        if len(classes) < 2 or any(b <= a for a, b in itertools.pairwise(classes)):
            raise ModelFileError(
                f"{where}.fitted.classes_={_show(classes)} is not two or more bins, ascending, "
                "each once"
            )
        booster.classes_ = np.array(classes, dtype=np.int64)
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
    if forest.n_trees != booster.n_iter_ * outputs:
        raise ModelFileError(
            f"{where}.model_text holds {forest.n_trees} trees, fitted.n_iter_="
            f"{booster.n_iter_} rounds of {outputs} make {booster.n_iter_ * outputs}"
        )
    reach = largest_output(forest)
    limit = MAX_LOG_Q if cls is GBDTRegressor else MAX_LOGIT
    if reach > limit:
        raise ModelFileError(
            f"{where}.model_text: leaf_value can sum to {reach:.3g} on one row, past {limit:g} "
            f"({'exp of it overflows' if cls is GBDTRegressor else 'softmax loses it'})"
        )
    return booster


# The largest raw output a booster may reach: its leaf values summed along any path. A
# regressor predicts ln q, and exp overflows past 709; 700 is throughput of 1e304 samples/s, so
# a legitimate model stays far inside (the tiny demo's experts reach 12-17). A classifier's
# logits only need to stay finite through the tempering and the softmax.
MAX_LOG_Q = 700.0
MAX_LOGIT = 1e6


def largest_output(forest) -> float:
    """The largest |raw output| any row can reach: per output, the sum over its trees of the
    largest |leaf value| (a row reaches one leaf a tree); the largest over outputs."""
    from .trees import LEAF  # numba: loaded with the trees, not with this module

    if forest.n_trees == 0:
        return 0.0
    leaves = (forest.nodes["flags"] & LEAF) != 0
    values = np.where(leaves, np.abs(forest.nodes["value"]), 0.0)
    per_tree = np.maximum.reduceat(values, forest.roots)
    return float(np.bincount(forest.columns, weights=per_tree).max())


def cascade_dict(cascade: BinnedCascade) -> dict[str, Any]:
    fitted: dict[str, Any] = {}
    for key in _CASCADE_FITTED:
        value = getattr(cascade, key)
        fitted[key] = value.tolist() if isinstance(value, np.ndarray) else value
    if hasattr(cascade, "prior_fallback_"):
        fitted["prior_fallback_"] = float(cascade.prior_fallback_)
    if hasattr(cascade, "efficiency_cap_"):
        fitted["efficiency_cap_"] = float(cascade.efficiency_cap_)
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


def _cascade_params(data: dict[str, Any], where: str) -> BinnedCascade:
    params = _target_from_flags(data["params"], where)
    cascade = BinnedCascade(**_params(BinnedCascade, params, where))
    try:
        cascade._check_params()
    except ValueError as exc:
        raise ModelFileError(f"{where}.params: {exc}") from None
    return cascade


def _cascade_fitted(cascade: BinnedCascade, fitted: Any, where: str) -> None:
    """The fitted figures, each of its type and range; the bins within the parameters'."""
    required = {
        "log_q": set(),
        "residual": {"prior_fallback_"},
        "efficiency": {"prior_fallback_", "efficiency_cap_"},
    }[cascade.target]
    expected = set(_CASCADE_FITTED) | required
    if not isinstance(fitted, dict):
        raise ModelFileError(f"{where}.fitted={_show(fitted)} is not a cascade's fitted record")
    if set(fitted) != expected:
        raise ModelFileError(
            f"{where}.fitted lacks {sorted(expected - set(fitted))} and has unknown "
            f"{sorted(set(fitted) - expected)!r:.200}"
        )
    at = f"{where}.fitted"
    cascade.n_features_in_ = _number(fitted["n_features_in_"], int, f"{at}.n_features_in_", 1)
    cascade.n_bins_ = _number(fitted["n_bins_"], int, f"{at}.n_bins_", 1)
    if cascade.n_bins_ > cascade.n_bins:
        raise ModelFileError(f"{at}.n_bins_={cascade.n_bins_} is above params.n_bins")
    temperature = _number(fitted["temperature_"], float, f"{at}.temperature_")
    if not 0.01 <= temperature <= 100.0:  # calibration picks 0.25-4 (or 1.0)
        raise ModelFileError(f"{at}.temperature_={temperature} is outside 0.01-100")
    cascade.temperature_ = temperature
    cascade.bins_merged_ = _number(fitted["bins_merged_"], int, f"{at}.bins_merged_", 0)
    cascade.em_iterations_ = _number(fitted["em_iterations_"], int, f"{at}.em_iterations_", 0)
    cascade.rows_moved_ = _numbers(fitted["rows_moved_"], float, f"{at}.rows_moved_", 0)
    cascade.rows_rescued_ = _numbers(fitted["rows_rescued_"], int, f"{at}.rows_rescued_", 0)
    cascade.bin_edges_ = np.array(_numbers(fitted["bin_edges_"], float, f"{at}.bin_edges_"))
    bin_rows = _numbers(fitted["bin_rows_"], int, f"{at}.bin_rows_", 0)
    trees = _numbers(fitted["n_trees_per_expert_"], int, f"{at}.n_trees_per_expert_", 0)
    for key, values in (("bin_rows_", bin_rows), ("n_trees_per_expert_", trees)):
        if len(values) != cascade.n_bins_:
            raise ModelFileError(
                f"{at}.{key} holds {len(values)} values, n_bins_={cascade.n_bins_}"
            )
    cascade.bin_rows_ = np.array(bin_rows, dtype=np.int64)
    cascade.n_trees_per_expert_ = trees
    seconds = fitted["fit_seconds_"]
    if not isinstance(seconds, dict):
        raise ModelFileError(f"{at}.fit_seconds_={_show(seconds)} is not a mapping")
    for phase, value in seconds.items():
        _number(value, float, f"{at}.fit_seconds_.{phase}", 0)
    cascade.fit_seconds_ = seconds
    if cascade.target != "log_q":
        cascade.prior_fallback_ = _number(fitted["prior_fallback_"], float, f"{at}.prior_fallback_")
    if cascade.target == "efficiency":
        cap = _number(fitted["efficiency_cap_"], float, f"{at}.efficiency_cap_", 0)
        if cap > EFFICIENCY_CAP_MAX:
            raise ModelFileError(f"{at}.efficiency_cap_={cap} is above {EFFICIENCY_CAP_MAX:.4f}")
        cascade.efficiency_cap_ = cap


def cascade_from_dict(data: Any, where: str, n_features: int | None = None) -> BinnedCascade:
    """A cascade from ``cascade_dict``'s output, every field and tree checked; taking
    ``n_features`` columns when given (serving: the length of its feature list)."""
    keys = {"kind", "params", "fitted", "experts", "classifier"}
    if not isinstance(data, dict) or set(data) != keys or data["kind"] != "BinnedCascade":
        raise ModelFileError(f"{where} is not a cascade record")
    cascade = _cascade_params(data, where)
    _cascade_fitted(cascade, data["fitted"], where)
    if n_features is not None and cascade.n_features_in_ != n_features:
        raise ModelFileError(
            f"{where}.fitted.n_features_in_={cascade.n_features_in_}: serving builds "
            f"{n_features} features"
        )
    experts = data["experts"]
    if not isinstance(experts, list) or len(experts) != cascade.n_bins_:
        raise ModelFileError(f"{where}: experts is not a list of {cascade.n_bins_} boosters")
    for b, expert in enumerate(experts):
        if expert is None:
            raise ModelFileError(f"{where}.experts[{b}] is null: every bin needs its expert")
    cascade.experts_ = [
        booster_from_dict(e, f"{where}.experts[{b}]", cascade.n_features_in_, GBDTRegressor)
        for b, e in enumerate(experts)
    ]
    for b, expert in enumerate(cascade.experts_):
        if expert.n_iter_ != cascade.n_trees_per_expert_[b]:
            raise ModelFileError(
                f"{where}.fitted.n_trees_per_expert_[{b}]={cascade.n_trees_per_expert_[b]}, "
                f"the expert has {expert.n_iter_} rounds"
            )
    cascade.classifier_ = _classifier(data["classifier"], cascade, where)
    return cascade


def _classifier(data: Any, cascade: BinnedCascade, where: str) -> GBDTClassifier | None:
    """The bin classifier: none for one bin, else one whose classes are bins of the cascade."""
    if cascade.n_bins_ == 1:
        if data is not None:
            raise ModelFileError(f"{where}.classifier: a one-bin cascade has none")
        return None
    if data is None:
        raise ModelFileError(f"{where}.classifier is null: {cascade.n_bins_} bins need one")
    at = f"{where}.classifier"
    classifier = booster_from_dict(data, at, cascade.n_features_in_, GBDTClassifier)
    if classifier.classes_[-1] >= cascade.n_bins_:
        raise ModelFileError(
            f"{at}.fitted.classes_ names bin {classifier.classes_[-1]}, the cascade has "
            f"{cascade.n_bins_}"
        )
    return classifier


def dump_model(model: BinnedCascade | GBDTRegressor, path: str | Path) -> None:
    """Write a cascade or a booster as one JSON model file."""
    record = cascade_dict(model) if isinstance(model, BinnedCascade) else booster_dict(model)
    Path(path).write_text(json.dumps({"format": FORMAT, "version": FORMAT_VERSION, **record}))


def load_model(
    path: str | Path, expected: type, n_features: int | None = None
) -> BinnedCascade | GBDTRegressor:
    """Read a model file holding an ``expected`` (``BinnedCascade``, or a booster class) that
    takes ``n_features`` columns (when given); raises ``ModelFileError`` naming the file and
    what is wrong."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
        raise ModelFileError(f"{where} cannot be read: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict) or (data.get("format"), data.get("version")) != (
        FORMAT,
        FORMAT_VERSION,
    ):
        raise ModelFileError(f"{where} is not a {FORMAT} file of version {FORMAT_VERSION}")
    record = {k: v for k, v in data.items() if k not in ("format", "version")}
    if expected is BinnedCascade:
        return cascade_from_dict(record, where, n_features)
    booster = booster_from_dict(record, where, n_features)
    if not isinstance(booster, expected):
        raise ModelFileError(f"{where} holds a {type(booster).__name__}, not {expected.__name__}")
    return booster
