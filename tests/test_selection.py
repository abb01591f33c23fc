"""What a fold publishes (``studies.selection``): a ranking and who places the types it cannot
score, scored as named; and the rule each data set is scored under is chosen on the other sets
alone."""

import datetime as dt

import numpy as np
import polars as pl
import pytest

from leap_pipeline.simulation import SimulatedFleet
from leap_pipeline.studies import crossval
from leap_pipeline.studies.decisions import (
    LAST,
    cells,
    decision_coverage,
    decision_regrets,
    fallback_regrets,
)
from leap_pipeline.studies.selection import choose_fallback, leave_one_set_out, with_published
from tests.test_crossval import _decision_rows


def _two_decisions() -> tuple[pl.DataFrame, pl.DataFrame]:
    """_decision_rows' configuration at batch 8 and 16. At batch 8 small is the fastest by far
    (500 samples/s against big's 300); big has been measured in both."""
    rows, specs = _decision_rows()
    rows = pl.concat(
        [
            rows.with_columns(throughput=pl.Series([500.0, 40.0, 300.0])),
            rows.with_columns(batch_size=pl.lit(16, dtype=pl.Int64)),
        ]
    )
    return rows, specs


def test_a_ranking_places_the_types_it_cannot_score_by_its_fallback():
    rows, specs = _two_decisions()
    held = np.array([True, True, False] * 2)  # small and mid are new in both decisions
    predicted = {
        # no ratio for small at batch 8 (no training configuration ran there)
        "fleet_ratio": np.array([np.nan, 60.0, np.nan, 10.0, 50.0, np.nan]),
        "single_gbdt": np.array([450.0, 50.0, np.nan, 90.0, 45.0, np.nan]),
    }
    table = cells(rows, specs, held, predicted)
    regrets, _ = decision_regrets(table, list(predicted))
    coverage = decision_coverage(table, list(predicted))
    assert coverage["fleet_ratio"]["fastest"].tolist() == [False, True]
    assert coverage["single_gbdt"]["fastest"].tolist() == [True, True]
    # the rules read the spec table, which prices and peaks every type
    assert coverage["highest_fp16_peak"]["per_cost"].all()
    # alone, the ratio ranks small last and picks the measured big at batch 8 (500 / 300 - 1
    # off): what it publishes placed by nobody, exactly its own regret
    assert regrets["fleet_ratio"]["fastest"][0] == pytest.approx(500 / 300 - 1)
    alone = fallback_regrets(table, list(predicted), "fleet_ratio", LAST)
    for kind in ("fastest", "per_cost"):
        assert np.array_equal(alone[kind], regrets["fleet_ratio"][kind]), kind
    # placed by the GBDT, small (450 by the GBDT) goes ahead of the ratio's pick (big,
    # measured at 300): the fastest at batch 8; batch 16, which the ratio covers, stays its own
    placed = fallback_regrets(table, list(predicted), "fleet_ratio", "single_gbdt")
    assert placed["fastest"][0] == 0.0
    assert placed["fastest"][1] == regrets["fleet_ratio"]["fastest"][1]
    choice = {
        "ranking": {"fastest": "fleet_ratio", "per_cost": "fleet_ratio"},
        "fallback": {"fastest": "single_gbdt", "per_cost": LAST},
        "gbdt": "single_gbdt",
    }
    leap = with_published(table, list(predicted), choice)["leap"]
    assert np.array_equal(leap["fastest"], placed["fastest"])
    assert np.array_equal(leap["per_cost"], regrets["fleet_ratio"]["per_cost"])
    # a fallback that scores small lower than the pick leaves the pick; one that scores
    # neither small nor anything held (a GBDT fitted on too few rows) leaves the pick too
    predicted["single_gbdt"] = np.array([200.0, 50.0, np.nan, 90.0, 45.0, np.nan])
    table = cells(rows, specs, held, predicted)
    low = fallback_regrets(table, list(predicted), "fleet_ratio", "single_gbdt")
    assert low["fastest"][0] == pytest.approx(500 / 300 - 1)
    predicted["single_gbdt"] = np.full(6, np.nan)
    table = cells(rows, specs, held, predicted)
    blind = fallback_regrets(table, list(predicted), "fleet_ratio", "single_gbdt")
    assert blind["fastest"][0] == pytest.approx(500 / 300 - 1)


def test_the_fallback_is_chosen_where_the_ranking_cannot_score_a_type():
    covered = np.array([True, True, False, False])
    by_fallback = {
        LAST: np.array([0.0, 0.1, 0.5, 0.4]),
        "gbdt": np.array([0.0, 0.1, 0.0, 0.6]),  # 0.3 where it places: lower than last's 0.45
        "cost_prior": np.array([0.0, 0.1, 0.45, 0.45]),  # 0.45: a tie with last, no gain
    }
    assert choose_fallback(by_fallback, covered) == "gbdt"
    by_fallback["gbdt"] = np.array([0.0, 0.1, 0.4, 0.6])  # 0.5: worse than ranking them last
    assert choose_fallback(by_fallback, covered) == LAST
    # a ranking that scores every type of every validation decision needs no fallback
    assert choose_fallback(by_fallback, np.ones(4, dtype=bool)) == LAST


def test_a_decision_no_candidate_scores_is_a_random_pick_among_the_priced_types():
    rows, specs = _decision_rows()
    specs = specs.with_columns(hourly_cost_usd=pl.Series([1.0, None, 1.0]))  # mid has no price
    table = cells(rows, specs, np.ones(3, dtype=bool), {"blind": np.full(3, np.nan)})
    regrets, _ = decision_regrets(table, ["blind"])
    # cost per sample: small 2/100, big 8/300; the mean regret of those two, mid left out
    assert regrets["blind"]["per_cost"] == pytest.approx([((8 / 300) / (2 / 100) - 1) / 2])


def test_a_fold_publishing_the_fleet_ratio_for_a_new_type_is_scored_as_published(monkeypatch):
    """leave-hardware-out: the held type has no fleet ratio (no training configuration ran on
    it). Published with no fallback, the ratio ranks it last and leap's regrets are the
    ratio's own, decision by decision; published with the GBDT placing it, they are that."""
    fleet = SimulatedFleet(seed=2, scale=0.01)
    attempts = pl.concat([d.attempts for _, d in fleet.days(0, 2)]).with_columns(
        ds=pl.lit(dt.date(2026, 1, 1))
    )
    common = attempts.filter(pl.col("throughput") > 0)["hardware_type"].value_counts(sort=True)
    rows = attempts.filter(
        (pl.col("throughput") > 0)
        & pl.col("hardware_type").is_in(common["hardware_type"].head(4).to_list())
    )
    specs = fleet.hardware_specs()
    test_mask = (rows["hardware_type"] == common["hardware_type"][0]).to_numpy()
    fallback = {"fastest": LAST, "per_cost": "single_gbdt"}

    def chose_the_ratio(train, *_):
        return {
            "gbdt": "single_gbdt",
            "ranking": {"fastest": "fleet_ratio", "per_cost": "fleet_ratio"},
            "fallback": fallback,
            "held_out_features": np.full((train.height, 1), np.nan),
            "held_out_predictions": np.full(train.height, np.nan),
        }

    monkeypatch.setattr(crossval, "_inner_selection", chose_the_ratio)
    fold = crossval.run_fold(rows, specs, "leave-hardware-out", test_mask, "quick", seed=1)
    assert np.isnan(fold["predicted"]["fleet_ratio"]).all()
    assert np.isfinite(fold["predicted"]["single_gbdt"]).all()
    regrets = fold["regrets"]
    assert len(regrets["leap"]["fastest"]) >= 3
    assert np.array_equal(regrets["leap"]["fastest"], regrets["fleet_ratio"]["fastest"])
    full = {}
    for name in crossval.PREDICTORS:
        full[name] = np.full(rows.height, np.nan)
        full[name][test_mask] = fold["predicted"][name]
    table = cells(rows, specs, test_mask, full)
    placed = fallback_regrets(table, list(crossval.PREDICTORS), "fleet_ratio", "single_gbdt")
    assert np.array_equal(regrets["leap"]["per_cost"], placed["per_cost"])
    # placing the new type by the GBDT is not the ratio alone here
    assert not np.array_equal(placed["per_cost"], regrets["fleet_ratio"]["per_cost"])


def test_each_set_is_scored_under_the_rule_chosen_on_the_other_sets():
    # per (set, split, kind): how far each rule is past the bar (0: within)
    misses = {
        ("x", "new model", "fastest"): {"vote": 0.0, "mean": 0.5, "blend": 0.2},
        ("x", "new type", "fastest"): {"vote": 0.0, "mean": 0.5, "blend": 0.0},
        ("y", "new model", "fastest"): {"vote": 0.3, "mean": 0.0, "blend": 0.0},
        ("y", "new type", "fastest"): {"vote": 0.1, "mean": 0.0, "blend": 0.0},
        ("z", "new model", "fastest"): {"vote": 0.2, "mean": 0.0, "blend": 0.1},
        ("z", "new type", "fastest"): {"vote": 0.0, "mean": 0.15, "blend": 0.0},
    }
    chosen = leave_one_set_out(misses)
    # x: on y and z, "mean" and "blend" are each past the bar once; blend's misses are smaller.
    # The vote, perfect on x itself, is past it three times elsewhere and is never x's rule
    assert chosen["x"] == "blend"
    # y: on x and z, the vote is past the bar once, blend twice, mean three times
    assert chosen["y"] == "vote"
    # z: on x and y, blend is past once, mean twice, vote twice
    assert chosen["z"] == "blend"
    # a set's own rows never move its choice: "mean" made perfect on x leaves x's rule, and
    # wins y's, past once as the vote is but by less (0.15 against 0.2)
    perfect = {k: v | {"mean": 0.0} if k[0] == "x" else v for k, v in misses.items()}
    assert leave_one_set_out(perfect)["x"] == chosen["x"]
    assert leave_one_set_out(perfect)["y"] == "mean"
    # on a full tie the rule listed first; one set alone has nothing to be chosen on
    tied = {("x", "s", "k"): {"a": 0.0, "b": 0.0}, ("y", "s", "k"): {"a": 0.0, "b": 0.0}}
    assert leave_one_set_out(tied) == {"x": "a", "y": "a"}
    assert leave_one_set_out({("x", "s", "k"): {"a": 0.0}}) == {}


@pytest.mark.parametrize("split", ["leave-model-out", "partial-history", "leave-hardware-out"])
def test_leap_is_its_published_candidate_fold_by_fold_on_neusights_rows(split):
    """On NeuSight's 52 rows, whose spec table has no FP16 peak for the L4 and the AMD types
    (so the rules cannot score every type), every fold's leap regrets are, decision by
    decision, those of the ranking it published placed by the fallback it published; with no
    fallback (``LAST``), that ranking's own regrets as every candidate is scored. The three
    decision splits; the other two publish through the same ``run_fold``."""
    from leap_pipeline.data.static_sets import read_static_set
    from leap_pipeline.studies.splits import folds
    from leap_serving.launch.families import with_family
    from tests.test_crossval import public_data

    folder = public_data("neusight-asplos25") / "neusight-asplos25" / "contract"
    static = read_static_set("contract", folder)
    rows = with_family(static.attempts.filter(pl.col("throughput") > 0))
    predictors = list(crossval.PREDICTORS)
    for seed, mask in enumerate(folds(rows, split), start=1):
        fold = crossval.run_fold(rows, static.specs, split, mask, "quick", seed)
        full = {name: np.full(rows.height, np.nan) for name in predictors}
        for name in predictors:
            full[name][mask] = fold["predicted"][name]
        table = cells(rows, static.specs, mask, full)
        choice, regrets = fold["choice"], fold["regrets"]
        for kind in ("fastest", "per_cost"):
            ranking, fallback = choice["ranking"][kind], choice["fallback"][kind]
            published = fallback_regrets(table, predictors, ranking, fallback)[kind]
            assert np.array_equal(regrets["leap"][kind], published), (split, seed, kind)
            if fallback == LAST:
                assert np.array_equal(regrets["leap"][kind], regrets[ranking][kind])
