"""Candidates that combine others (``studies.combinations``), on the hand-built decision of
``test_crossval``: a blend's prediction and a rank mean's choice, computed by hand."""

import numpy as np
import pytest

from leap_pipeline.studies.combinations import combined_scores, with_blends
from leap_pipeline.studies.decisions import cells, decision_regrets
from tests.test_crossval import _decision_rows


def test_a_blend_is_the_geometric_mean_of_the_members_that_predict():
    predicted = {
        "single_gbdt": np.array([100.0, np.nan, np.nan]),
        "single_gbdt_prior": np.array([400.0, 50.0, np.nan]),
        "physics": np.array([np.nan, 0.0, np.nan]),  # 0 is no estimate, as NaN is
    }
    blended = with_blends(predicted)
    assert blended["gbdt_blend"][0] == pytest.approx(200.0)
    assert blended["gbdt_blend"][1] == pytest.approx(50.0)  # one member alone
    assert np.isnan(blended["gbdt_blend"][2])
    assert blended["gbdt_physics_blend"][1] == pytest.approx(50.0)
    assert set(predicted) < set(blended) and blended["physics"] is predicted["physics"]


def test_a_rank_mean_picks_the_type_its_members_rank_best_on_average():
    rows, specs = _decision_rows()  # small 100, mid 40, big 300 samples/s; big measured
    held = np.array([True, True, False])
    # fastest: single_gbdt ranks big, mid, small (1, 2, 3); the prior ranks big, small, mid;
    # the two rules read the peaks (big 400, small 100, mid 50): big 1, small 2, mid 3
    predicted = with_blends({
        "single_gbdt": np.array([10.0, 50.0, np.nan]),
        "single_gbdt_prior": np.array([50.0, 10.0, np.nan]),
        "physics": np.full(3, np.nan),
        "fleet_ratio": np.full(3, np.nan),
        "roofline": np.full(3, np.nan),
    })  # fmt: skip
    table = cells(rows, specs, held, predicted)
    regrets, _ = decision_regrets(table, list(predicted), scores=combined_scores(list(predicted)))
    assert regrets["rank_mean_gbdts_rules"]["fastest"] == pytest.approx([0.0])  # big
    # per dollar, mean ranks of (GBDT, prior, highest-peak rule, per-dollar rule): the GBDT
    # scores small 10/2, mid 50/0.4, big 300/8 (ranks 3, 1, 2); the prior 50/2, 10/0.4, 300/8
    # (2.5, 2.5, 1); highest peak (2, 3, 1); peak per dollar 100/2, 50/0.4, 400/8 (2.5, 1,
    # 2.5). Means: small 2.5, mid 1.875, big 1.625: big, which costs 8/300 a sample to mid's
    # 0.4/40
    assert regrets["rank_mean_gbdts_rules"]["per_cost"] == pytest.approx([(8 / 300) / 0.01 - 1])
    assert regrets["single_gbdt"]["per_cost"] == pytest.approx([0.0])  # mid, alone
    # physics, fleet ratio and roofline estimate only the measured big (its measurement): with
    # them among the members the mean still picks big
    assert regrets["rank_mean_all"]["fastest"] == pytest.approx([0.0])
