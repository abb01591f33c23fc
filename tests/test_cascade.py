"""The binned cascade on hand-made data where the right bins are obvious."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from leap_serving.decide import metrics
from leap_serving.model.boosters import EARLY_STOPPING_TOL
from leap_serving.model.cascade import BinnedCascade, make_single_gbdt_booster
from leap_serving.model.profiles import N_BINS, PROFILES, profile_params
from leap_serving.model.trees import ROW_BLOCK

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


def test_em_and_the_classifier_on_samples_still_find_the_regimes():
    """The speed levers: EM's experts on 30% of the rows and the classifier on 30% of each bin.
    Every row is still assigned and the final experts refit on all rows."""
    X, y = _regimes(6000)
    X_new, y_new = _regimes(seed=1)
    full = BinnedCascade(n_bins=4, **SMALL).fit(X, y)
    sampled = BinnedCascade(n_bins=4, em_sample=0.3, classifier_sample=0.3, **SMALL).fit(X, y)
    assert sampled.bin_rows_.sum() == len(y)
    assert sampled.classifier_.n_iter_ > 0
    w5 = metrics.within(np.exp(sampled.predict(X_new)), np.exp(y_new), 5)
    assert w5 > 0.95
    assert not np.array_equal(sampled.predict(X_new), full.predict(X_new))  # it did sample


def test_sampled_em_scores_only_the_sampled_rows_until_its_last_iteration(monkeypatch):
    """Scoring every row under every expert was most of EM's time at full scale: with a
    sample, the rows outside it are scored once, by the last iteration's experts."""
    X, y = _regimes(6000)
    scored = []
    errors = BinnedCascade._errors

    def spy(self, experts, X_scored, y_scored):
        scored.append(len(y_scored))
        return errors(self, experts, X_scored, y_scored)

    monkeypatch.setattr(BinnedCascade, "_errors", spy)
    model = BinnedCascade(n_bins=4, max_em_iter=3, move_tol=0.0, em_sample=0.3, **SMALL)
    model.fit(X, y)
    sampled = int(np.sum(np.random.default_rng(0).random(len(y)) < 0.3))
    assert scored == [sampled, sampled, len(y)]
    assert model.em_iterations_ == 3 and model.bin_rows_.sum() == len(y)


def test_a_single_gbdt_is_fitted_once_and_scores_no_training_row(monkeypatch):
    """One bin: no row can move, so the fit neither scores the training rows (about 30 s a
    night at full scale) nor refits its expert, not even with an overlap, which one bin lacks."""
    from leap_serving.model import em

    X, y = _regimes(3000)
    scored, fitted = [], []
    errors, fit = BinnedCascade._errors, em.fit_booster

    def spy_errors(self, experts, X_scored, y_scored):
        scored.append(len(y_scored))
        return errors(self, experts, X_scored, y_scored)

    def spy_fit(estimator, *args, **kwargs):
        fitted.append(estimator)
        return fit(estimator, *args, **kwargs)

    monkeypatch.setattr(BinnedCascade, "_errors", spy_errors)
    monkeypatch.setattr(em, "fit_booster", spy_fit)
    model = BinnedCascade(n_bins=1, max_em_iter=3, expert_overlap=0.5, **SMALL).fit(X, y)
    assert scored == [] and len(fitted) == 1
    assert model.experts_[0] is fitted[0]


def test_a_lone_fit_takes_the_threads_n_jobs_allows(monkeypatch):
    """One bin (the single GBDT) has no expert to fit beside it, so it uses n_jobs' threads."""
    import os

    from leap_serving.model import em

    seen = []
    fit = em.fit_booster

    def spy(estimator, *args, **kwargs):
        seen.append(estimator.n_threads)
        return fit(estimator, *args, **kwargs)

    monkeypatch.setattr(em, "fit_booster", spy)
    X, y = _regimes(1000)
    BinnedCascade(n_bins=1, n_jobs=2, **SMALL).fit(X, y)
    assert seen == [min(2, os.cpu_count())]


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
    model = BinnedCascade(n_bins=13, gating="argmax", **SMALL).fit(X, y)
    assert model.n_bins_ <= 2
    assert np.allclose(model.predict(X), y, atol=1e-6)


def test_estimator_conventions():
    model = BinnedCascade(**profile_params("fast"))
    assert model.get_params()["max_iter"] == PROFILES["fast"]["max_iter"]
    copy = clone(model).set_params(n_bins=5)
    assert copy.n_bins == 5 and model.n_bins == N_BINS
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
    assert (paper["max_iter"], paper["max_leaf_nodes"]) == (3000, 255)  # section 2.4's trees
    # ... learning faster than its 0.03 and stopping sooner, for a 20-minute night (the docs)
    assert paper["learning_rate"] > 0.03 and paper["early_stopping_tol"] > EARLY_STOPPING_TOL
    params = BinnedCascade(**paper).get_params()
    assert params["em_sample"] == paper["em_sample"] < 1.0
    assert params["feature_fraction"] == paper["feature_fraction"] < 1.0
    booster = make_single_gbdt_booster("paper")
    assert booster.get_params()["feature_fraction"] == paper["feature_fraction"]
    with pytest.raises(ValueError, match="profile='huge'"):
        profile_params("huge")


def test_a_larger_early_stopping_tolerance_keeps_fewer_trees():
    X, y = _regimes(n=3000)
    validation = np.arange(len(y)) >= 2600
    kept = {}
    for tol in (EARLY_STOPPING_TOL, 1e-2):
        model = BinnedCascade(
            n_bins=1, max_iter=400, learning_rate=0.05, early_stopping_tol=tol, min_bin_rows=40
        ).fit(X, y, validation=validation)
        kept[tol] = model.n_trees_per_expert_[0]
    assert kept[1e-2] < kept[EARLY_STOPPING_TOL]


def test_bad_parameters_are_named():
    X, y = _regimes(n=100)
    with pytest.raises(ValueError, match="fewer than min_bin_rows"):
        BinnedCascade(min_bin_rows=200).fit(X, y)
    with pytest.raises(ValueError, match="move_tol"):
        BinnedCascade(move_tol=1.5, min_bin_rows=10).fit(X, y)


def test_early_stopping_judges_on_the_validation_rows_and_never_trains_on_them(monkeypatch):
    """Column 0 numbers the rows: every booster of the cascade trains only on rows outside the
    validation mask and early-stops only on rows inside it."""
    from leap_serving.model.boosters import GBDTClassifier, GBDTRegressor

    rng = np.random.default_rng(1)
    n = 3000
    X = np.column_stack([np.arange(n, dtype=float), rng.normal(size=(n, 3))])
    y = X[:, 1] + 0.1 * rng.normal(size=n)
    validation = np.zeros(n, dtype=bool)
    validation[-400:] = True  # the window's last day
    seen = []
    for cls in (GBDTRegressor, GBDTClassifier):
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


# -- gating, out-of-fold EM, overlapping experts and selection (issue 14) -------------------------

LIMITED = {"max_iter": 40, "max_leaf_nodes": 7, "learning_rate": 0.1, "classifier_max_iter": 40,
           "classifier_max_leaf_nodes": 15, "min_bin_rows": 40}  # fmt: skip


def _eight_regimes(n: int, seed: int):
    """Eight regimes, each its own level and its own slopes on three features: a fixed tree budget
    per regime fits them, the same budget for all eight at once does not."""
    rng = np.random.default_rng(seed)
    regime = rng.integers(0, 8, n)
    Z = rng.uniform(0, 1, (n, 3))
    slopes = np.random.default_rng(99).uniform(-2, 2, (8, 3))
    y = 1.5 * regime + np.sum(slopes[regime] * Z, axis=1) + rng.normal(0, 0.02, n)
    return np.column_stack([regime, Z]), y


def _one_smooth_regime(n: int, seed: int):
    """No regimes: a smooth function plus noise, so bins are cut by the noise alone."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    return X, X[:, 0] + 0.5 * X[:, 1] + rng.normal(0, 0.6, n)


def _fit_pair(make, **params):
    """A cascade and a one-bin cascade (the single GBDT) early-stopped on held-out rows, and fresh
    rows to score them on."""
    X, y = make(8000, 0)
    X_val, y_val = make(2000, 1)
    X_all, y_all = np.vstack([X, X_val]), np.concatenate([y, y_val])
    validation = np.r_[np.zeros(len(y), bool), np.ones(len(y_val), bool)]
    cascade = BinnedCascade(n_bins=8, **LIMITED, **params).fit(X_all, y_all, validation=validation)
    single = BinnedCascade(n_bins=1, **LIMITED).fit(X_all, y_all, validation=validation)
    return cascade, single, make(2000, 2)


def test_every_gating_predicts_the_same_through_the_compiled_trees():
    from leap_serving.model.compiled import CompiledCascade

    cascade, _, (X_new, _) = _fit_pair(_eight_regimes, oof_folds=2, expert_overlap=0.3)
    for gating in ("argmax", "mean", "median"):
        cascade.set_params(gating=gating)
        log_q, bins, probability = CompiledCascade(cascade).predict(X_new)
        assert np.array_equal(log_q, cascade.predict(X_new))
        expected_bins, expected_probability = cascade.predict_bins(X_new)
        assert np.array_equal(bins, expected_bins)
        assert np.allclose(probability, expected_probability, rtol=1e-12)
        # rows of many launches: the many-row walk, past one block per thread of two
        X_many = np.vstack([X_new] * (1 + 2 * ROW_BLOCK // len(X_new)))
        many = CompiledCascade(cascade).predict(X_many, n_threads=2)
        assert np.array_equal(many[0], cascade.predict(X_many))
        grouped = CompiledCascade(cascade).predict(X_many)
        assert all(np.array_equal(a, b) for a, b in zip(many, grouped, strict=True))


def test_gating_combines_the_most_probable_experts_by_hand():
    from leap_serving.model.gating import gate

    proba = np.array([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]])
    levels = np.array([1.0, 2.0, 3.0, 10.0])  # expert b predicts levels[b] for every row

    def expert(b, rows):
        return np.full(int(rows.sum()), levels[b])

    assert gate(proba, expert, "argmax", 3).tolist() == [1.0, 10.0]
    # top 3 of row 0: bins 0, 1, 2 with weights .5 .3 .2; of row 1: bins 3, 2, 1 with .4 .3 .2
    assert np.allclose(gate(proba, expert, "mean", 3), [1.7, (4.0 + 0.9 + 0.4) / 0.9])
    assert gate(proba, expert, "median", 3).tolist() == [1.0, 3.0]
    assert gate(proba, expert, "median", 1).tolist() == [1.0, 10.0]


def test_identical_rows_share_a_fold():
    from leap_serving.model.fitting import identical_row_folds

    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 3))
    X[rng.random(500) < 0.2, 1] = np.nan
    repeated = np.vstack([X, X[:100]])  # retries: the same launch again
    folds = identical_row_folds(repeated, 2, seed=0)
    assert np.array_equal(folds[500:], folds[:100])
    assert 0.35 < folds.mean() < 0.65


def test_the_cascade_beats_the_single_gbdt_where_regimes_are_separable():
    cascade, single, (X_new, y_new) = _fit_pair(_eight_regimes, oof_folds=2)
    measured = np.exp(y_new)
    single_w10 = metrics.within(np.exp(single.predict(X_new)), measured, 10)
    for gating in ("argmax", "mean", "median"):
        cascade.set_params(gating=gating)
        assert metrics.within(np.exp(cascade.predict(X_new)), measured, 10) > single_w10 + 0.3
    assert cascade.temperature_ != 1.0  # calibrated on the held-out rows


@pytest.mark.parametrize(("make", "published"), [
    (_one_smooth_regime, "single_gbdt"),
    (_eight_regimes, "cascade"),
])  # fmt: skip
def test_selection_publishes_the_model_that_wins_on_unseen_rows(make, published):
    from leap_pipeline.modeling.selection import select_model

    cascade, single, (X_new, y_new) = _fit_pair(make)
    chosen = select_model(cascade, single, X_new, np.exp(y_new))
    assert chosen["published"].startswith(published)
    assert set(chosen["scores"]) == {"single_gbdt", "cascade_argmax", "cascade_mean",
                                     "cascade_median"}  # fmt: skip
    if published == "single_gbdt":
        assert chosen["model"] is single
        assert chosen["margin"] <= chosen["required_margin"]
    else:
        assert chosen["margin"] > chosen["required_margin"] > 0
        assert chosen["model"].experts_ is cascade.experts_  # as trained, not refitted
        assert chosen["model"].gating == chosen["published"].removeprefix("cascade_")


def test_the_best_of_several_challengers_must_clear_a_higher_bar():
    """The best of five challengers beats the incumbent by chance more often than one does:
    its bar is 2.61 standard errors of the paired difference, one challenger's 2.0. Under a
    null (every model lands a row at random, as often as the incumbent), the best of five
    clears 2.0 standard errors on 24 of 300 draws, the corrected bar on 3."""
    from leap_pipeline.modeling.selection import challenger_bar

    rng = np.random.default_rng(7)
    incumbent = rng.random(1000) < 0.55
    best = incumbent.copy()
    best[rng.choice(1000, 60, replace=False)] = True  # a lead of a few points
    margin, one = challenger_bar(best, incumbent, challengers=1)
    _, five = challenger_bar(best, incumbent, challengers=5)
    assert five / one == pytest.approx(2.608 / 2.0, rel=1e-3)
    assert margin > 0
    uncorrected = corrected = 0
    for _ in range(300):
        base = rng.random(1000) < 0.55
        others = [rng.random(1000) < 0.55 for _ in range(5)]
        top = max(others, key=lambda hits: hits.mean())
        lead, bar_one = challenger_bar(top, base, challengers=1)
        uncorrected += lead > bar_one
        corrected += lead > challenger_bar(top, base, challengers=5)[1]
    assert corrected / 300 <= 0.05 < uncorrected / 300


@pytest.mark.parametrize(("params", "named"), [
    ({"gating": "vote"}, "gating"),
    ({"gate_top_k": 0}, "gate_top_k"),
    ({"oof_folds": 1}, "oof_folds"),
    ({"expert_overlap": 1.5}, "expert_overlap"),
    ({"em_sample": 0.0}, "em_sample"),
    ({"classifier_sample": 1.5}, "classifier_sample"),
    ({"early_stopping_tol": -1e-5}, "early_stopping_tol"),
    ({"subsample": 0.0}, "subsample"),
    ({"feature_fraction": 1.2}, "feature_fraction"),
])  # fmt: skip
def test_bad_gating_and_em_parameters_are_named(params, named):
    X, y = _regimes(500)
    with pytest.raises(ValueError, match=named):
        BinnedCascade(**params, **SMALL).fit(X, y)


def _levels_from_history(n: int, low: float, high: float, seed: int):
    """Feature rows whose history gives the level (the family's mean on the type) and one
    launch feature the correction depends on: ln q = level + 0.3 x."""
    from leap_serving.launch.features import FEATURE_COLUMNS

    rng = np.random.default_rng(seed)
    X = np.full((n, len(FEATURE_COLUMNS)), np.nan)
    level, x = rng.uniform(low, high, n), rng.uniform(0, 1, n)
    X[:, FEATURE_COLUMNS.index("hist_hw_count")] = 3.0
    X[:, FEATURE_COLUMNS.index("hist_hw_mean_log_q")] = level
    X[:, FEATURE_COLUMNS.index("job_batch_size")] = x
    return X, level + 0.3 * x + rng.normal(0, 0.01, n)


def test_a_residual_on_the_prior_reaches_levels_the_trees_never_saw():
    from leap_serving.model.compiled import CompiledCascade

    X, y = _levels_from_history(3000, 0.0, 5.0, seed=0)
    X_new, y_new = _levels_from_history(500, 8.0, 10.0, seed=1)  # beyond every training level
    measured = np.exp(y_new)
    level = BinnedCascade(n_bins=1, **SMALL).fit(X, y)
    on_prior = BinnedCascade(n_bins=1, target="residual", **SMALL).fit(X, y)
    # the trees clamp to the highest level they saw; the prior carries the level, they correct it
    assert metrics.within(np.exp(level.predict(X_new)), measured, 20) < 0.05
    assert metrics.within(np.exp(on_prior.predict(X_new)), measured, 20) > 0.95
    # rows without a prior fall back to the training median, and serving computes the same
    X_new[:10] = np.nan
    assert np.allclose(on_prior.offset(X_new)[:10], np.median(y))
    assert np.array_equal(CompiledCascade(on_prior).predict(X_new)[0], on_prior.predict(X_new))


@pytest.mark.parametrize(
    ("flags", "target"),
    [
        ({"residual_on_prior": False, "efficiency_on_cost": False}, "log_q"),
        ({"residual_on_prior": True}, "residual"),  # a file from before the efficiency model
        ({"residual_on_prior": True, "efficiency_on_cost": True}, "efficiency"),
    ],
)
def test_a_model_file_with_the_old_two_flags_loads_as_the_target_they_meant(
    tmp_path, flags, target
):
    """``target`` replaced two booleans, the second overriding the first: a file saved with
    them loads as what it predicted, and predicts the same."""
    import json

    from leap_serving.model.model_file import dump_model, load_model

    X, y = _levels_from_history(600, 0.0, 5.0, seed=0)
    model = BinnedCascade(n_bins=1, target=target, **SMALL).fit(X, y)
    dump_model(model, tmp_path / "cascade.json")
    data = json.loads((tmp_path / "cascade.json").read_text())
    del data["params"]["target"]
    data["params"].update(flags)
    (tmp_path / "old.json").write_text(json.dumps(data))
    loaded = load_model(tmp_path / "old.json", BinnedCascade)
    assert loaded.target == target
    assert np.array_equal(loaded.predict(X[:50]), model.predict(X[:50]))


def test_a_bad_target_is_refused_and_offset_and_bounded_ask_for_a_fit():
    X, y = _levels_from_history(100, 0.0, 5.0, seed=0)
    with pytest.raises(ValueError, match="target='speed' is not one of"):
        BinnedCascade(target="speed", **SMALL).fit(X, y)
    unfitted = BinnedCascade(target="efficiency")
    with pytest.raises(NotFittedError):
        unfitted.offset(X)
    with pytest.raises(NotFittedError):
        unfitted.bounded(X, y)
