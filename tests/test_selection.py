"""What a fold publishes (``studies.selection``): a decision the chosen ranking cannot estimate
every type of goes to a candidate that can, and the rule each data set is scored under is
chosen on the other sets alone."""

import datetime as dt

import numpy as np
import polars as pl
import pytest

from leap_pipeline.simulation import SimulatedFleet
from leap_pipeline.studies import crossval
from leap_pipeline.studies.decisions import cells, decision_coverage, decision_regrets
from leap_pipeline.studies.selection import leave_one_set_out, published_regrets, with_published
from tests.test_crossval import _decision_rows


def _two_decisions() -> tuple[pl.DataFrame, pl.DataFrame]:
    """_decision_rows' configuration at batch 8 and 16. At batch 8 small is the fastest by far
    (500 samples/s against big's 300); big has been measured in both."""
    rows, specs = _decision_rows()
    rows = pl.concat([rows.with_columns(throughput=pl.Series([500.0, 40.0, 300.0])),
                      rows.with_columns(batch_size=pl.lit(16, dtype=pl.Int64))])  # fmt: skip
    return rows, specs


def test_a_ranking_without_an_estimate_for_a_type_gives_that_decision_to_the_gbdt():
    rows, specs = _two_decisions()
    held = np.array([True, True, False] * 2)  # small and mid are new in both decisions
    predicted = {
        # no ratio for small at batch 8 (no training configuration ran there): it ranks it last
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
    # alone, the ratio picks the measured big at batch 8 (500 / 300 - 1 off); the GBDT small
    assert regrets["fleet_ratio"]["fastest"][0] == pytest.approx(500 / 300 - 1)
    assert regrets["single_gbdt"]["fastest"][0] == 0.0
    choice = {"ranking": {"fastest": "fleet_ratio", "per_cost": "fleet_ratio"},
              "gbdt": "single_gbdt"}  # fmt: skip
    leap = with_published(table, list(predicted), choice)["leap"]
    for kind in ("fastest", "per_cost"):
        # batch 8 is the GBDT's decision; batch 16, which the ratio covers, stays the ratio's
        assert leap[kind][0] == regrets["single_gbdt"][kind][0], kind
        assert leap[kind][1] == regrets["fleet_ratio"][kind][1], kind
    # a GBDT that covers neither (a fit on too few rows) hands the decision on to the rule
    predicted["single_gbdt"] = np.full(6, np.nan)
    table = cells(rows, specs, held, predicted)
    regrets, _ = decision_regrets(table, list(predicted))
    coverage = decision_coverage(table, list(predicted))
    got = published_regrets(regrets, coverage, "fastest", "fleet_ratio",
                            ("single_gbdt", "highest_fp16_peak"))  # fmt: skip
    assert got[0] == regrets["highest_fp16_peak"]["fastest"][0]
    assert got[1] == regrets["fleet_ratio"]["fastest"][1]


def test_a_decision_no_candidate_scores_is_a_random_pick_among_the_priced_types():
    rows, specs = _decision_rows()
    specs = specs.with_columns(hourly_cost_usd=pl.Series([1.0, None, 1.0]))  # mid has no price
    table = cells(rows, specs, np.ones(3, dtype=bool), {"blind": np.full(3, np.nan)})
    regrets, _ = decision_regrets(table, ["blind"])
    # cost per sample: small 2/100, big 8/300; the mean regret of those two, mid left out
    assert regrets["blind"]["per_cost"] == pytest.approx([((8 / 300) / (2 / 100) - 1) / 2])


def test_a_fold_that_publishes_the_fleet_ratio_for_a_new_type_ranks_by_the_gbdt(monkeypatch):
    """leave-hardware-out: the held type has no fleet ratio (no training configuration ran on
    it), so every decision of the fold is the published GBDT's, never the ratio's."""
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

    def chose_the_ratio(train, *_):
        return {"gbdt": "single_gbdt",
                "ranking": {"fastest": "fleet_ratio", "per_cost": "fleet_ratio"},
                "held_out_features": np.full((train.height, 1), np.nan),
                "held_out_predictions": np.full(train.height, np.nan)}  # fmt: skip

    monkeypatch.setattr(crossval, "_inner_selection", chose_the_ratio)
    fold = crossval.run_fold(rows, specs, "leave-hardware-out", test_mask, "quick", seed=1)
    assert np.isnan(fold["predicted"]["fleet_ratio"]).all()
    assert np.isfinite(fold["predicted"]["single_gbdt"]).all()
    regrets = fold["regrets"]
    assert len(regrets["leap"]["fastest"]) >= 3
    for kind in ("fastest", "per_cost"):
        assert np.array_equal(regrets["leap"][kind], regrets["single_gbdt"][kind]), kind
    # the ratio alone ranks the new type last: not what leap published
    assert any(not np.array_equal(regrets["fleet_ratio"][k], regrets["leap"][k])
               for k in ("fastest", "per_cost"))  # fmt: skip


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
