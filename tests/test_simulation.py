import datetime as dt
import re

import numpy as np
import polars as pl
import pytest

from leap_pipeline.simulation import SPAN_START, FleetArgumentError, SimulatedFleet
from leap_serving.launch.contract import schema


def test_same_seed_and_day_give_identical_rows(small_fleet):
    again = SimulatedFleet(seed=3, scale=small_fleet.scale)
    first, second = small_fleet.day(4), again.day("2026-01-05")
    assert first.attempts.equals(second.attempts)
    assert first.allocations.equals(second.allocations)


def test_days_are_independent_of_generation_order():
    fleet_a, fleet_b = SimulatedFleet(seed=5, scale=0.02), SimulatedFleet(seed=5, scale=0.02)
    fleet_a.day(1)
    fleet_a.day(2)
    assert fleet_a.day(3).attempts.equals(fleet_b.day(3).attempts)


def test_other_seed_gives_another_fleet(small_fleet):
    other = SimulatedFleet(seed=4, scale=small_fleet.scale).day(0).attempts
    assert not other["job_name"].equals(small_fleet.day(0).attempts["job_name"])


def test_sources_follow_the_contract_and_carry_no_hidden_column(small_fleet):
    day = small_fleet.day(2)
    assert day.attempts.schema == schema("job_attempts")
    assert day.allocations.schema == schema("allocations")
    assert small_fleet.hardware_specs().schema == schema("hardware_specs")
    assert day.attempts["attempt_id"].is_unique().all()
    assert day.allocations["attempt_id"].sort().equals(day.attempts["attempt_id"].sort())


def test_scale_sets_attempts_per_day():
    small = SimulatedFleet(seed=0, scale=0.02).day(0).attempts.height
    larger = SimulatedFleet(seed=0, scale=0.08).day(0).attempts.height
    assert 0.02 * 22_000 < small < 0.02 * 28_000
    assert 3.3 < larger / small < 4.8


def test_candidates_are_eligible_sets_holding_the_logged_type(small_fleet):
    attempts = small_fleet.day(3).attempts
    sizes = attempts["candidate_hardware"].list.len()
    assert sizes.min() >= 2 and sizes.max() <= 8
    assert sizes.n_unique() >= 5
    holds = attempts.select(pl.col("candidate_hardware").list.contains(pl.col("hardware_type")))
    assert holds.to_series().all()


def test_a_hardware_type_enters_partway_through_the_span(small_fleet):
    specs = small_fleet.hardware_specs()
    late = specs.filter(pl.col("available_from") > SPAN_START)
    assert late.height >= 1
    newcomer = late.sort("available_from")["hardware_type"][0]
    entry = (late.sort("available_from")["available_from"][0] - SPAN_START).days
    before = small_fleet.day(entry - 1).attempts
    after = pl.concat([small_fleet.day(entry + k).attempts for k in range(3)])
    assert newcomer not in before["candidate_hardware"].explode().to_list()
    assert newcomer in after["hardware_type"].to_list()


def test_hardware_table_has_twelve_specs_vendors_costs_and_premium(small_fleet):
    specs = small_fleet.hardware_specs()
    assert specs.height >= 20
    assert specs["vendor"].n_unique() >= 3
    assert specs["premium"].any() and not specs["premium"].all()
    assert (specs["hourly_cost_usd"] > 0).all()


def test_job_names_wrap_a_family_in_run_specific_identifiers(small_fleet):
    names = small_fleet.day(1).attempts["job_name"].to_list()
    assert len(set(names)) > 0.9 * len(names)  # run ids make nearly every name unique
    has_date = [re.search(r"20260102|2026-01-02", n) for n in names]
    assert sum(bool(m) for m in has_date) > 0.5 * len(names)
    assert all(re.search(r"\d{5,}", n) for n in names)  # a numeric run id in every name


def test_families_recur_some_are_new_and_popular_types_have_hundreds(small_fleet):
    catalog = small_fleet.catalog
    alive = (catalog.fam_birth <= 3) & (catalog.fam_death > 3)
    families_per_type = np.bincount(catalog.fam_model_type[alive])
    assert families_per_type.max() >= 100  # some model types have hundreds of families
    assert ((families_per_type >= 1) & (families_per_type < 10)).sum() > 50  # tail types: few
    born_today = (catalog.fam_birth == 3).sum()
    assert born_today > 0 and alive.sum() > 10 * born_today  # mostly recurring, some new


def test_oracle_medians_are_what_measured_throughput_scatters_around(small_fleet):
    attempts = pl.concat([small_fleet.day(d).attempts for d in (6, 7)]).filter(
        pl.col("throughput") > 0
    )
    truth = small_fleet.oracle().true_medians(attempts["attempt_id"].to_list())
    joined = attempts.join(truth, on=["attempt_id", "hardware_type"])
    assert joined.height == attempts.height
    ratio = (joined["throughput"] / joined["true_median"]).to_numpy()
    assert abs(np.median(ratio) - 1.0) < 0.02
    hit = np.mean(np.abs(1.0 / ratio - 1.0) <= 0.2)
    assert 0.86 <= hit <= 0.94


def test_oracle_answers_counterfactuals_on_every_type(small_fleet):
    attempts = small_fleet.day(8).attempts.head(50)
    specs = small_fleet.hardware_specs()
    names = specs["hardware_type"].to_list()
    oracle = small_fleet.oracle()
    cross = oracle.true_medians(attempts["attempt_id"].to_list(), names)
    assert cross.height == 50 * len(names)
    assert (cross["true_median"] > 0).all() and (cross["cost_usd"] > 0).all()
    logged = oracle.true_medians(attempts["attempt_id"].to_list())
    same = cross.join(logged, on=["attempt_id", "hardware_type"], suffix="_logged")
    assert same.height == 50
    assert np.allclose(same["true_median"], same["true_median_logged"])
    # no single type is best for every job: hardware ranks differently per job
    best = cross.sort("true_median", descending=True).group_by("attempt_id").first()
    assert best["hardware_type"].n_unique() >= 2


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"scale": -1.0}, "scale"),
        ({"scale": 0}, "scale"),
        ({"seed": "7"}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"seed": -3}, "seed"),
    ],
)
def test_bad_constructor_arguments_name_the_argument(kwargs, named):
    with pytest.raises(FleetArgumentError, match=named):
        SimulatedFleet(**kwargs)


@pytest.mark.parametrize(
    "day", ["01/02/2026", "2026-13-01", "yesterday", 2.5, -1, "2025-12-31", 10_000_000]
)
def test_bad_days_name_the_argument(small_fleet, day):
    with pytest.raises(FleetArgumentError, match="day"):
        small_fleet.day(day)


def test_day_accepts_index_date_and_text(small_fleet):
    by_index = small_fleet.day(2).attempts
    assert by_index.equals(small_fleet.day(dt.date(2026, 1, 3)).attempts)
    assert by_index.equals(small_fleet.day("2026-01-03").attempts)


def test_oracle_rejects_unknown_hardware_and_attempts(small_fleet):
    oracle = small_fleet.oracle()
    ids = small_fleet.day(0).attempts["attempt_id"].head(2).to_list()
    with pytest.raises(FleetArgumentError, match="hardware_types"):
        oracle.true_medians(ids, ["NoSuchGPU"])
    with pytest.raises(FleetArgumentError, match="attempt_id"):
        oracle.true_medians(["20260101-999999"])


def test_hidden_factors_are_what_separates_measured_from_true_throughput(small_fleet):
    """The oracle's hidden factors are the draws behind each attempt: the noise is exactly the
    gap between the measured throughput and the true median, and the shared factors repeat
    within a model type and a family."""
    from leap_pipeline.simulation import HIDDEN_FACTORS

    day = small_fleet.day(4)
    attempts = day.attempts.filter(pl.col("throughput") > 0)
    oracle = small_fleet.oracle()
    hidden = oracle.hidden_factors(attempts["attempt_id"].to_list())
    assert hidden.columns == ["attempt_id", *HIDDEN_FACTORS]
    medians = oracle.true_medians(attempts["attempt_id"].to_list())["true_median"].to_numpy()
    gap = np.log(attempts["throughput"].to_numpy() / medians)
    assert np.allclose(gap, hidden["noise"].to_numpy())
    per_type = (
        hidden.with_columns(model_type=attempts["model_type"])
        .group_by("model_type")
        .agg(pl.col("model_type_efficiency").n_unique())
    )
    assert (per_type["model_type_efficiency"] == 1).all()
