"""A small fleet is scored on every split: the fold's GBDTs scale their settings to the rows."""

import datetime as dt
import json
import math

import numpy as np
import polars as pl
import pytest

from leap_pipeline.app.cli import main
from leap_pipeline.simulation import SimulatedFleet
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.profiles import profile_params
from leap_serving.model.small_data import MIN_FIT_ROWS, fit_to_rows


def _sixty_rows(seed: int = 2) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A 60-row set in the data contract: three configurations of each of four model types of
    the simulated fleet, each measured on the same five types (the simulator's true median
    throughput of the job there, times 5% lognormal noise), as a team's first runs could be."""
    fleet = SimulatedFleet(seed=seed, scale=0.01)
    _, day = next(iter(fleet.days(0, 1)))
    measured = day.attempts.filter(pl.col("throughput") > 0).unique(
        ["model_type", "num_trainers", "batch_size"], keep="first", maintain_order=True
    )
    models = measured["model_type"].value_counts(sort=True).filter(pl.col("count") >= 3)
    picked = measured.filter(pl.col("model_type").is_in(models["model_type"].head(4).implode()))
    picked = picked.group_by("model_type", maintain_order=True).head(3)
    specs = fleet.hardware_specs()
    types = specs.sort("hourly_cost_usd")["hardware_type"].gather([0, 3, 6, 9, 12]).to_list()
    truth = fleet.oracle().true_medians(picked["attempt_id"].to_list(), types)
    noise = np.exp(np.random.default_rng(seed).normal(0.0, 0.05, truth.height))
    rows = (
        picked.drop("hardware_type", "throughput", "duration_s")
        .join(truth.select("attempt_id", "hardware_type", "true_median", "duration_s"),
              on="attempt_id")
        .with_columns(throughput=pl.col("true_median") * noise,
                      attempt_id=pl.col("attempt_id") + "." + pl.col("hardware_type"),
                      ds=pl.lit(dt.date(2026, 1, 1)))
        .drop("true_median")
        .select(day.attempts.columns)
    )  # fmt: skip
    return rows, specs


def test_every_split_is_scored_on_a_sixty_row_set(tmp_path, capsys):
    rows, specs = _sixty_rows()
    assert rows.height == 60 and rows["hardware_type"].n_unique() == 5
    assert rows["model_type"].n_unique() == 4
    rows.write_parquet(tmp_path / "job_attempts.parquet")
    specs.write_parquet(tmp_path / "hardware_specs.parquet")
    # the fast profile: an expert wants 200 rows, a leaf 20; every fit here has fewer than 60
    code = main(["crossval", "--source", "contract", "--path", str(tmp_path),
                 "--split", "all", "--profile", "fast", "--jobs", "1", "--json"])  # fmt: skip
    assert code == 0
    results = json.loads(capsys.readouterr().out)
    assert set(results) == {"leave-model-out", "partial-history", "leave-hardware-out",
                            "leave-model-hardware-out", "random"}  # fmt: skip
    for split, result in results.items():
        assert "skipped" not in result, (split, result.get("skipped"))
        assert result["scored_rows"] > 0, split
        # the GBDTs were fitted in every fold, not left without an estimate
        for name in ("leap", "single_gbdt", "single_gbdt_prior"):
            assert result[name]["coverage"] == 1.0, (split, name)
        for kind in ("fastest", "per_cost"):
            for name in ("leap", "single_gbdt", "single_gbdt_prior", "highest_fp16_peak"):
                regret = result[name]["regret"][kind]
                assert regret["decisions"] > 0, (split, name, kind)
                assert math.isfinite(regret["mean"]) and regret["mean"] >= 0.0, (split, name)
                assert math.isfinite(regret["p90"]), (split, name, kind)


def test_a_set_below_fifty_rows_is_refused_naming_its_rows():
    from leap_pipeline.studies.crossval import run_split

    rows, specs = _sixty_rows()
    with pytest.raises(ValueError, match="49 measured rows are fewer than the 50"):
        run_split(rows.head(49), specs, "random", profile="fast", n_jobs=1)


def test_settings_change_only_where_the_profile_cannot_fit_the_rows():
    params = profile_params("fast") | {"n_bins": 1}
    for n in (200, 5000):  # the profile's min_bin_rows (200 by default) and more: as it is
        assert fit_to_rows(params, n) == params
    small = fit_to_rows(params, 60)
    assert small["n_bins"] == 1 and small["min_bin_rows"] == 60
    assert small["min_data_in_leaf"] < 20 and small["max_leaf_nodes"] < params["max_leaf_nodes"]
    # early stopping holds out the 20 rows a 200-row fit holds out (here a third, the most)
    assert math.ceil(small["validation_fraction"] * 60) == 20
    # the leaves fit the rows left to train on at the leaf size
    train_rows = 60 - math.ceil(small["validation_fraction"] * 60)
    assert small["max_leaf_nodes"] * small["min_data_in_leaf"] <= train_rows
    with pytest.raises(ValueError, match=f"{MIN_FIT_ROWS - 1} training rows are fewer"):
        fit_to_rows(params, MIN_FIT_ROWS - 1)


def test_a_scaled_fit_learns_what_the_profile_refuses_to_fit():
    """On 40 rows the fast profile refuses to fit; scaled, it learns a step a constant cannot."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, size=(80, 3))
    y = np.where(X[:, 0] > 0.5, 2.0, 0.0) + X[:, 1] + rng.normal(0, 0.05, 80)
    params = profile_params("fast") | {"n_bins": 1}
    with pytest.raises(ValueError, match="40 training rows are fewer than min_bin_rows=200"):
        BinnedCascade(**params).fit(X[:40], y[:40])
    model = BinnedCascade(**fit_to_rows(params, 40)).fit(X[:40], y[:40])
    error = np.median(np.abs(model.predict(X[40:]) - y[40:]))
    constant = np.median(np.abs(np.median(y[:40]) - y[40:]))
    assert error < 0.5 * constant
