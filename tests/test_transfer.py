"""benchmarks/transfer.py's scoring on a tiny synthetic split (not the benchmark's run), and its
join of NeuSight's published predictions onto the contract rows of the real files."""

import importlib.util
from pathlib import Path

import numpy as np
import polars as pl
import pytest

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def transfer():
    spec = importlib.util.spec_from_file_location(
        "transfer", PROJECT / "benchmarks" / "transfer.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
