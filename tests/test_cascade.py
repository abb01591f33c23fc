"""The binned cascade on hand-made data where the right bins are obvious."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from leap_serving import metrics
from leap_serving.cascade import PROFILES, BinnedCascade, profile_params

SMALL = {"max_iter": 60, "classifier_max_iter": 40, "min_bin_rows": 40}


def _regimes(n: int = 3000, seed: int = 0):
    """Four regimes told apart by a feature, each a different level of ln q and a different
    slope: a model that finds the regimes predicts almost exactly."""
    rng = np.random.default_rng(seed)
    regime = rng.integers(0, 4, n)
    x = rng.uniform(0, 1, n)
    X = np.column_stack([regime, x, rng.normal(size=n)])
    y = 2.0 + 3.0 * regime + (regime + 1) * 0.5 * x + rng.normal(0, 0.01, n)
    return X, y


def test_the_cascade_learns_obvious_regimes():
    X, y = _regimes()
    X_new, y_new = _regimes(seed=1)
    model = BinnedCascade(n_bins=4, **SMALL).fit(X, y)
    w5 = metrics.within(np.exp(model.predict(X_new)), np.exp(y_new), 5)
    assert w5 > 0.95
    bins, probability = model.predict_bins(X_new)
    # each regime lands (all but rows near a quantile edge) in one bin of its own
    majority = []
    for regime in range(4):
        counts = np.bincount(bins[X_new[:, 0] == regime], minlength=model.n_bins_)
        assert counts.max() >= 0.9 * counts.sum()
        majority.append(int(np.argmax(counts)))
    assert sorted(majority) == [0, 1, 2, 3]
    assert probability.min() > 0.5
    assert model.n_bins_ == 4


def test_em_stops_early_when_nothing_moves():
    X, y = _regimes()
    model = BinnedCascade(n_bins=4, max_em_iter=3, **SMALL).fit(X, y)
    assert model.em_iterations_ == 1  # the first reassignment moved < 2% of rows
    assert model.rows_moved_[0] < 0.02
    assert len(model.n_trees_per_expert_) == model.n_bins_


def test_em_runs_all_iterations_when_rows_keep_moving():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 3))
    y = rng.normal(size=2000)  # pure noise: experts disagree and rows keep moving
    model = BinnedCascade(n_bins=6, max_em_iter=2, move_tol=0.0, **SMALL).fit(X, y)
    assert model.em_iterations_ == 2
    assert all(share > 0 for share in model.rows_moved_)


def test_small_bins_are_merged_and_the_merge_is_reported():
    X, y = _regimes(n=600)
    model = BinnedCascade(n_bins=13, **{**SMALL, "min_bin_rows": 100}).fit(X, y)
    assert model.bins_merged_ >= 7  # 600 rows hold at most 6 bins of 100
    assert model.n_bins_ <= 6
    assert model.bin_rows_.min() >= 100


def test_tied_targets_merge_instead_of_failing():
    X, _ = _regimes(n=1000)
    y = np.where(X[:, 0] < 2, 1.0, 5.0)  # two distinct values: 12 equal-frequency edges tie
    model = BinnedCascade(n_bins=13, **SMALL).fit(X, y)
    assert model.n_bins_ <= 2
    assert np.allclose(model.predict(X), y, atol=1e-6)


def test_estimator_conventions():
    model = BinnedCascade(**profile_params("fast"))
    assert model.get_params()["max_iter"] == PROFILES["fast"]["max_iter"]
    copy = clone(model).set_params(n_bins=5)
    assert copy.n_bins == 5 and model.n_bins == 13
    with pytest.raises(NotFittedError):
        model.predict(np.zeros((1, 3)))
    X, y = _regimes(n=800)
    fitted = BinnedCascade(n_bins=4, **SMALL).fit(X, y)
    assert fitted.n_features_in_ == 3
    with pytest.raises(ValueError, match="3 features"):
        fitted.predict(np.zeros((2, 4)))
    X[::7, 2] = np.nan  # missing values are allowed, as the trees route them
    assert np.isfinite(BinnedCascade(n_bins=4, **SMALL).fit(X, y).predict(X)).all()


def test_profiles_are_the_papers_and_a_fast_one():
    paper = profile_params("paper")
    assert (paper["max_iter"], paper["max_leaf_nodes"], paper["learning_rate"]) == (3000, 255, 0.03)
    with pytest.raises(ValueError, match="profile='huge'"):
        profile_params("huge")


def test_bad_parameters_are_named():
    X, y = _regimes(n=100)
    with pytest.raises(ValueError, match="fewer than min_bin_rows"):
        BinnedCascade(min_bin_rows=200).fit(X, y)
    with pytest.raises(ValueError, match="move_tol"):
        BinnedCascade(move_tol=1.5, min_bin_rows=10).fit(X, y)


def test_early_stopping_judges_on_the_validation_rows_and_never_trains_on_them(monkeypatch):
    """Column 0 numbers the rows: every booster of the cascade trains only on rows outside the
    validation mask and early-stops only on rows inside it."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    rng = np.random.default_rng(1)
    n = 3000
    X = np.column_stack([np.arange(n, dtype=float), rng.normal(size=(n, 3))])
    y = X[:, 1] + 0.1 * rng.normal(size=n)
    validation = np.zeros(n, dtype=bool)
    validation[-400:] = True  # the window's last day
    seen = []
    for cls in (HistGradientBoostingRegressor, HistGradientBoostingClassifier):
        real = cls.fit

        def spy(self, X, y, *args, _real=real, **kwargs):
            seen.append((X[:, 0].copy(), kwargs.get("X_val")))
            return _real(self, X, y, *args, **kwargs)

        monkeypatch.setattr(cls, "fit", spy)
    params = {**profile_params("quick"), "n_bins": 3, "max_em_iter": 1}
    BinnedCascade(**params).fit(X, y, validation=validation)
    assert len(seen) == 3 + 3 + 1  # EM experts, refit experts, classifier
    held_out = set(np.flatnonzero(validation).tolist())
    for trained, X_val in seen:
        assert not held_out & set(trained.astype(int).tolist())
        assert X_val is not None and set(X_val[:, 0].astype(int).tolist()) <= held_out


def test_training_is_reproducible():
    """The same rows, parameters and seed give the same model, prediction for prediction."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 4))
    y = X[:, 0] * 2 + rng.normal(size=2000) * 0.2
    params = {**profile_params("quick"), "n_bins": 3}
    first = BinnedCascade(**params).fit(X, y).predict(X)
    second = BinnedCascade(**params).fit(X, y).predict(X)
    assert np.array_equal(first, second)
