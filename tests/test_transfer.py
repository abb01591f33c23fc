"""benchmarks/transfer.py's scoring on a tiny synthetic split (not the benchmark's run), and its
join of NeuSight's published predictions onto the contract rows of the real files."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def transfer():
    return load_benchmark("transfer")


def _regret(mean):
    return {"mean": mean, "p90": mean, "within_5pct": None, "decisions": 0 if mean is None else 3}


def test_prediction_scores_count_a_missing_prediction_as_a_miss(transfer):
    q = np.array([10.0, 10.0, 10.0, 10.0])
    scores = transfer.prediction_scores(np.array([11.0, 13.0, np.nan, 10.0]), q)
    assert scores == {"w20": 0.5, "mdape": 10.0, "coverage": 0.75, "rows": 4}
    assert transfer.prediction_scores(np.empty(0), np.empty(0))["w20"] is None


def test_decisions_name_the_best_rule_and_the_best_single_candidate(transfer):
    rule_a, rule_b = transfer.RULES
    result = {
        "n_rows": 9,
        "leap": {"regret": {"fastest": _regret(0.12), "per_cost": _regret(0.30)}},
        "single_gbdt": {"regret": {"fastest": _regret(0.10), "per_cost": _regret(0.20)}},
        "gbdt_blend": {"regret": {"fastest": _regret(0.01), "per_cost": _regret(0.01)}},
        "lookup": {"w20": 0.5},  # scored on predictions only
        rule_a: {"regret": {"fastest": _regret(0.50), "per_cost": _regret(0.25)}},
        rule_b: {"regret": {"fastest": _regret(0.40), "per_cost": _regret(None)}},
    }
    decisions = transfer.decision_scores(result)
    fastest, per_cost = decisions["fastest"], decisions["per_cost"]
    # the blend is no single candidate; a rule is one
    assert (fastest["best_rule"], fastest["best_candidate"]) == (rule_b, "single_gbdt")
    assert fastest["leap_at_or_under_best_rule"] and fastest["leap_within_bar_of_best_candidate"]
    assert (per_cost["best_rule"], per_cost["best_rule_regret"]) == (rule_a, 0.25)
    assert per_cost["leap_at_or_under_best_rule"] is False
    assert per_cost["leap_within_bar_of_best_candidate"] is False  # 0.30 > 1.25 x 0.20
    summary = transfer.set_summary({"a": {"decisions": decisions}, "b": {"skipped": "no fold"}})
    assert summary["rows_at_or_under_best_rule"] == "1/2"
    assert summary["rows_within_bar_of_best_candidate"] == "1/2"


def _baselines_csv(path: Path) -> Path:
    """Three rows in baselines.csv's columns: one single-GPU, one tp4, one pp4_1 (ms)."""
    frame = pl.DataFrame({
        "hardware_type": ["H100", "H100", "A100"], "model_name": ["m", "m", "m"],
        "seqlen": [512, 512, 512], "batch": [2, 4, 4], "option": [None, "tp4", "pp4_1"],
        "OOD": [True, True, False],
        "label_all_e2e_latency": [100.0, 100.0, 400.0],
        "neusight_all_e2e_latency": [110.0, 100.0, 400.0],
        "roofline_all_e2e_latency": [50.0, None, 200.0],
        "habitat_all_e2e_latency": [100.0, None, 100.0],
        "micro_all_e2e_latency": [125.0, None, 400.0],
    })  # fmt: skip
    frame.write_csv(path / "baselines.csv")
    return path / "baselines.csv"


def test_published_predictors_are_scored_on_the_held_out_rows(transfer, tmp_path):
    baselines = transfer.read_baselines(_baselines_csv(tmp_path))
    rows = pl.DataFrame({
        "hardware_type": ["A100", "H100", "H100"], "model_type": ["m"] * 3,
        "seq_len": [512] * 3, "batch_size": [4, 4, 2], "num_trainers": [1] * 3,
        "requested_devices_per_host": [4, 4, 1], "tensor_parallel": [1, 4, 1],
        "pipeline_parallel": [4, 1, 1], "throughput": [10.0, 40.0, 20.0],
    })  # fmt: skip
    predicted = {"leap": np.array([10.0, 30.0, 21.0]), "roofline": np.array([np.nan, 60.0, 40.0])}
    out = transfer.neusight_scores(
        {"rows": rows, "held_out": np.array([False, True, True]), "predicted": predicted},
        baselines,
    )
    assert [out[s]["rows"] for s in ("all", "ood", "every_baseline")] == [2, 2, 1]
    every = out["every_baseline"]  # the single-GPU H100 row alone
    assert every["models"]["leap"]["mdape"] == pytest.approx(5.0)
    assert every["published"]["roofline"]["mdape"] == pytest.approx(100.0)  # 2x the samples/s
    assert every["published"]["li_et_al"]["w20"] == 1.0  # 16 samples/s of 20: 20% off
    assert out["all"]["published"]["habitat"]["coverage"] == 0.5
    assert out["all"]["models"]["leap"]["w20"] == 0.5  # 30 of 40 misses, 21 of 20 is within


def test_a_row_without_its_baseline_fails_the_join(transfer, tmp_path):
    baselines = transfer.read_baselines(_baselines_csv(tmp_path))
    rows = pl.DataFrame({
        "hardware_type": ["H100"], "model_type": ["m"], "seq_len": [512], "batch_size": [4],
        "num_trainers": [1], "requested_devices_per_host": [4], "tensor_parallel": [1],
        "pipeline_parallel": [1], "throughput": [40.0],
    })  # fmt: skip
    with pytest.raises(ValueError, match="no baseline row"):  # dp4: not in the file
        transfer.join_baselines(rows, baselines)


def test_neusight_baselines_join_the_contract_rows(transfer):
    contract = transfer.NEUSIGHT / "contract" / "job_attempts.parquet"
    if not (transfer.BASELINES.exists() and contract.exists()):
        pytest.skip("NeuSight's files are not beside the checkout")
    rows = pl.read_parquet(contract)
    joined = transfer.join_baselines(rows, transfer.read_baselines())
    assert joined.height == rows.height == 52
    assert joined["option"].value_counts().sort("option").rows() == [
        ("", 41),
        ("dp4", 3),
        ("pp4_1", 4),
        ("tp4", 4),
    ]
    assert (joined["ood"].sum(), joined["every_baseline"].sum()) == (35, 23)
    q = rows["throughput"].to_numpy()
    scores = {name: transfer.prediction_scores(joined[name].fill_null(np.nan).to_numpy(), q)
              for name in transfer.PUBLISHED}  # fmt: skip
    # the figures: NeuSight 8.7% MdAPE, 94% within 20% on the 52 rows
    assert scores["neusight"]["mdape"] == pytest.approx(8.7, abs=0.05)
    assert scores["neusight"]["w20"] == pytest.approx(49 / 52, abs=1e-4)
    common = joined["every_baseline"].to_numpy()
    li = transfer.prediction_scores(joined["li_et_al"].to_numpy()[common], q[common])
    assert li["mdape"] == pytest.approx(21.8, abs=0.05)  # Li et al. on the 23 rows


@pytest.fixture(scope="module")
def choices():
    return load_benchmark("transfer_choices")


def test_a_family_offset_comes_from_the_familys_other_types_outside_the_rows_chunk(choices):
    train = pl.DataFrame({"family": ["a", "a", "a", "b"], "hardware_type": ["X", "Y", "Z", "Y"]})
    efficiency = np.array([-1.0, -2.0, -4.0, -8.0])
    chunk = np.array([0, 0, 1, 1])
    # a training row: its family on other types, outside its own chunk
    shift = choices.family_efficiency(train, train, efficiency, chunk, chunk)
    assert shift.tolist() == [-4.0, -4.0, -1.5, 0.0]
    # a test row: its family on every other type; a family never seen gets none
    test = pl.DataFrame({"family": ["a", "c"], "hardware_type": ["Y", "X"]})
    assert choices.family_efficiency(train, test, efficiency, None, None).tolist() == [-2.5, 0.0]


def test_a_carrier_put_first_is_what_the_history_prior_takes(choices):
    from leap_serving.launch.features import FEATURE_COLUMNS, prior_log_q

    X = np.full((1, len(FEATURE_COLUMNS)), np.nan)
    X[0, FEATURE_COLUMNS.index("hist_hw_count")] = 0.0
    for value, carrier in enumerate(choices.CARRIERS.values(), start=1):
        X[0, FEATURE_COLUMNS.index(carrier)] = float(value)
    assert prior_log_q(X)[0] == 1.0  # the shipped first carrier
    for value, name in enumerate(choices.CARRIERS, start=1):
        moved = choices.carrier_first(X, name)
        assert prior_log_q(moved)[0] == float(value), name
        assert sorted(moved[0][np.isfinite(moved[0])]) == sorted(X[0][np.isfinite(X[0])])
    # the gap, appended, is the history's prior over the cost prior
    X[0, FEATURE_COLUMNS.index("cost_log_q")] = 0.25
    assert choices.with_gap(X)[0, -1] == 0.75


def test_each_set_is_scored_under_the_choice_made_on_the_others(choices):
    def rows(a: float, b: float) -> dict:
        return {"s": {"c": {"a": {"w20": a, "mdape": 1.0}, "b": {"w20": b, "mdape": 1.0}}}}

    scores = {"x": rows(50, 40), "y": rows(50, 45), "z": rows(30, 60)}
    out = choices.choices_left_out(scores)["c"]
    assert out["on all sets"] == "a"  # best on two of three rows
    assert out["z"]["chosen on the other sets"] == "a"  # x and y prefer a; z's own lead is unseen
    assert out["x"]["chosen on the other sets"] == "b"  # y and z split; b's shortfall is smaller
    assert out["z"]["held set"]["s"] == {"a": {"w20": 30, "mdape": 1.0}}
    assert out["x"]["held set"]["s"].keys() == {"a", "b"} and not out["x"]["agrees"]
