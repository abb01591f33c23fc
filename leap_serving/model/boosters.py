"""Every tree model of the night: LightGBM boosters behind scikit-learn's estimator conventions.

At the paper's scale LightGBM fitted the night's single GBDT 1.72x faster than scikit-learn's
HistGradientBoosting at the same accuracy (``benchmarks/engines.py --scale 1.0``, docs/results.md
section 7), so the experts, the bin classifier and the single GBDT are LightGBM boosters. They
keep the parameter names the cascade already used (``max_iter``, ``max_leaf_nodes``,
``learning_rate``, ``early_stopping``, ``n_iter_no_change``, ...), ``fit``/``predict`` and
``get_params``, and early-stop on held-out rows given as ``X_val``/``y_val``. ``subsample`` and
``feature_fraction`` (LightGBM's bagging and feature fraction, seeded) fit each tree on a share of
the rows and of the columns: the night's speed levers, 1.0 (off) unless a profile sets them.

A fitted booster keeps one thing: LightGBM's own text model of the trees it kept
(``model_text_``). Prediction walks those trees through ``trees.CompiledForest``, which reads the
text and gives LightGBM's raw scores bit for bit, so serving needs neither LightGBM nor any
object built from a file: only training imports LightGBM.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

# scikit-learn's histogram GBDT defaults, which the night was tuned with: 255 bins, 20 rows
# a leaf at least, no L2 penalty, early stopping when 20 rounds improve the held-out loss by
# less than this (a booster's ``early_stopping_tol``; the paper profile sets a larger one).
# The rows a leaf and a histogram bin need are parameters (LightGBM's own default for a bin)
# so a fit on a few dozen rows can lower them (``small_data``); nothing else sets them.
EARLY_STOPPING_TOL = 1e-7
MIN_DATA_IN_LEAF = 20
MIN_DATA_IN_BIN = 3
_FIXED = {
    "max_bin": 255,
    "min_sum_hessian_in_leaf": 1e-3,
    "lambda_l2": 0.0,
    "deterministic": True,  # the same trees on 1 or 2 threads, run after run
    "force_col_wise": True,
    "verbosity": -1,
}


class _Booster(BaseEstimator):
    """What the regressor and the classifier share: the fit, the early stopping, the walk."""

    _objective: str

    def __init__(
        self,
        max_iter: int = 100,
        max_leaf_nodes: int = 31,
        learning_rate: float = 0.1,
        early_stopping: bool = True,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 20,
        random_state: int = 0,
        n_threads: int | None = None,
        subsample: float = 1.0,
        feature_fraction: float = 1.0,
        early_stopping_tol: float = EARLY_STOPPING_TOL,
        min_data_in_leaf: int = MIN_DATA_IN_LEAF,
        min_data_in_bin: int = MIN_DATA_IN_BIN,
    ) -> None:
        self.max_iter = max_iter
        self.max_leaf_nodes = max_leaf_nodes
        self.learning_rate = learning_rate
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.random_state = random_state
        self.n_threads = n_threads
        self.subsample = subsample
        self.feature_fraction = feature_fraction
        self.early_stopping_tol = early_stopping_tol
        self.min_data_in_leaf = min_data_in_leaf
        self.min_data_in_bin = min_data_in_bin

    def _params(self, n_classes: int) -> dict[str, Any]:
        objective = self._objective
        if objective == "multiclass" and n_classes == 2:
            objective = "binary"
        params = {
            "objective": objective,
            "num_leaves": self.max_leaf_nodes,
            "learning_rate": self.learning_rate,
            "seed": self.random_state,
            "num_threads": self.n_threads or 0,
            "min_data_in_leaf": self.min_data_in_leaf,
            "min_data_in_bin": self.min_data_in_bin,
            **_FIXED,
        }
        if objective == "multiclass":
            params["num_class"] = n_classes
        if self.subsample < 1.0:  # each tree on a seeded share of the rows
            params |= {"bagging_fraction": self.subsample, "bagging_freq": 1}
        if self.feature_fraction < 1.0:  # each tree on a seeded share of the columns
            params["feature_fraction"] = self.feature_fraction
        return params

    def _fit(self, X, y, sample_weight, X_val, y_val, sample_weight_val, n_classes: int):
        import lightgbm as lgb
        from sklearn.model_selection import train_test_split

        X = np.ascontiguousarray(X, dtype=np.float64)
        if X_val is None and self.early_stopping:  # no held-out rows given: a seeded split
            stratify = y if n_classes and np.min(np.bincount(y.astype(int))) >= 2 else None
            parts = train_test_split(
                X,
                y,
                *([] if sample_weight is None else [sample_weight]),
                test_size=self.validation_fraction,
                random_state=self.random_state,
                stratify=stratify,
            )
            X, X_val, y, y_val = parts[:4]
            if sample_weight is not None:
                sample_weight, sample_weight_val = parts[4:]
        params = self._params(n_classes)
        train = lgb.Dataset(X, y, weight=sample_weight, params=params, free_raw_data=True)
        self.rounds_done_ = 0

        def count(env) -> None:  # rounds so far, for a caller that shows progress
            self.rounds_done_ = env.iteration + 1

        callbacks = [count]
        evaluations: dict = {}
        valid_sets = []
        if self.early_stopping and X_val is not None:
            X_val = np.ascontiguousarray(X_val, dtype=np.float64)
            valid_sets = [train.create_valid(X_val, y_val, weight=sample_weight_val)]
            stop = lgb.early_stopping(
                self.n_iter_no_change,
                first_metric_only=True,
                verbose=False,
                min_delta=self.early_stopping_tol,
            )
            callbacks += [stop, lgb.record_evaluation(evaluations)]
        booster = lgb.train(
            params,
            train,
            num_boost_round=self.max_iter,
            valid_sets=valid_sets,
            callbacks=callbacks,
        )
        kept = booster.best_iteration if valid_sets and booster.best_iteration > 0 else -1
        self.model_text_ = booster.model_to_string(num_iteration=kept)
        self.n_iter_ = booster.best_iteration if kept > 0 else booster.current_iteration()
        self.n_features_in_ = X.shape[1]
        # the held-out loss after each round fitted (past the kept ones), for studies of where
        # the trees go (benchmarks/train_cascade.py); empty without early stopping
        losses = next(iter(evaluations.get("valid_0", {}).values()), [])
        self.validation_loss_ = np.asarray(losses, dtype=np.float64)
        self.__dict__.pop("_forest", None)
        return self

    def forest(self):
        """The kept trees packed for the compiled walks, built once from ``model_text_``."""
        check_is_fitted(self, "model_text_")
        forest = self.__dict__.get("_forest")
        if forest is None:
            from .lgb_text import forest_from_text

            forest = self.__dict__["_forest"] = forest_from_text(self.model_text_)
        return forest

    def _raw(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has shape {X.shape}; the model takes {self.n_features_in_} columns"
            )
        return self.forest().raw_predict_many(X, self.n_threads or 1)

    def __getstate__(self) -> dict[str, Any]:  # the packed trees are rebuilt, not shipped
        state = dict(self.__dict__)
        state.pop("_forest", None)
        return state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


class GBDTRegressor(RegressorMixin, _Booster):
    """A median (absolute-error) regressor: the experts and the single GBDT."""

    _objective = "regression_l1"

    def fit(self, X, y, sample_weight=None, X_val=None, y_val=None, sample_weight_val=None):
        y = np.asarray(y, dtype=np.float64)
        return self._fit(X, y, sample_weight, X_val, y_val, sample_weight_val, 0)

    def predict(self, X) -> np.ndarray:
        return self._raw(X)[:, 0]


class GBDTClassifier(ClassifierMixin, _Booster):
    """The bin classifier: binary or softmax over the classes seen in training.

    ``decision_function`` gives scikit-learn's raw scores: one column of class-1 logits for two
    classes, one logit per class otherwise."""

    _objective = "multiclass"

    def fit(self, X, y, sample_weight=None, X_val=None, y_val=None, sample_weight_val=None):
        self.classes_ = np.unique(np.asarray(y))
        if len(self.classes_) < 2:
            raise ValueError(f"a classifier needs 2 classes or more, y holds {self.classes_}")
        encoded = np.searchsorted(self.classes_, y).astype(np.float64)
        encoded_val = None
        if y_val is not None:
            encoded_val = np.searchsorted(self.classes_, y_val).astype(np.float64)
            if not np.all(
                self.classes_[np.minimum(encoded_val.astype(int), len(self.classes_) - 1)] == y_val
            ):
                raise ValueError("y_val holds a class y does not")
        return self._fit(
            X, encoded, sample_weight, X_val, encoded_val, sample_weight_val, len(self.classes_)
        )

    def decision_function(self, X) -> np.ndarray:
        raw = self._raw(X)
        return raw[:, 0] if raw.shape[1] == 1 else raw

    def predict(self, X) -> np.ndarray:
        raw = self._raw(X)
        best = (raw[:, 0] > 0).astype(int) if raw.shape[1] == 1 else np.argmax(raw, axis=1)
        return self.classes_[best]
