"""Memory fit and budget caps: the estimate against published memory needs of well-known models,
and the candidates a ranking removes because the job cannot run there or the request caps them."""

from __future__ import annotations

import datetime as dt
import json
import math
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from leap_pipeline.simulation import SimulatedFleet
from leap_serving.decide.canary import Canary
from leap_serving.decide.pricing import order_candidates
from leap_serving.decide.ranker import Ranker
from leap_serving.decide.results import REASON_CODES
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.launch.memory import bytes_per_device, launch_memory
from leap_serving.launch.snapshot import SNAPSHOT_SCHEMA, history_snapshot
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.profiles import profile_params
from leap_serving.model.published import LeapModel

GB = 1e9


def _transformer(layers, d_model, heads, vocab=None, embedding=False) -> str:
    """A model definition in the launch's layer language: a decoder stack and its head."""
    ops = [{"op": "embedding_bag", "dim": d_model, "pooling": 1}] if embedding else []
    ops.append({"op": "transformer", "layers": layers, "d_model": d_model, "heads": heads,
                "ffn_mult": 4})  # fmt: skip
    if vocab:
        ops.append({"op": "lm_head", "vocab": vocab})
    return json.dumps({"layers": ops})


def _params(launch) -> float:
    """Parameters as the estimate counts them: dense states at 16 bytes (mixed Adam) back out."""
    from leap_serving.launch.architecture import summarize

    s = summarize(
        launch["model_definition"],
        num_sparse_features=launch.get("num_sparse_features", 0),
        num_dense_features=0,
        hash_size=launch.get("hash_size", 0),
        seq_len=launch.get("seq_len", 0),
    )
    return s["dense_params"] + s["embedding_params"]


def _launch(**fields):
    return {"num_trainers": 1, "batch_size": 1, "requested_devices_per_host": 1,
            "precision": "bf16", "optimizer": "adam", **fields}  # fmt: skip


# -- the estimate against published figures ---------------------------------------------------


def test_mixed_precision_adam_keeps_16_bytes_per_parameter_as_zero_counts():
    # given a 7.5B-parameter model (ZeRO, Rajbhandari et al. 2020, section 3.1 and figure 1:
    # mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes a parameter, 120 GB for 7.5B)
    launch = _launch(model_definition=_transformer(100, 2500, 20), seq_len=1)
    # when its model states are estimated
    states = launch_memory(launch).dense_states
    # then they are the paper's 120 GB (within 1%), and fp32 Adam is 16 bytes a parameter too
    assert _params(launch) == pytest.approx(7.5e9, rel=0.01)
    assert states == pytest.approx(120 * GB, rel=0.01)
    fp32 = launch_memory({**launch, "precision": "fp32"}).dense_states
    assert fp32 == pytest.approx(states)
    # and an optimizer with one moment keeps 4 bytes a parameter less, plain SGD 8 less
    assert launch_memory({**launch, "optimizer": "sgd"}).dense_states == pytest.approx(
        states * 12 / 16
    )
    assert launch_memory({**launch, "optimizer": None}).dense_states == pytest.approx(states / 2)


def test_gpt2_xl_model_states_are_the_24_gb_zero_cites():
    # given GPT-2 1.5B (48 layers, width 1600, vocabulary 50,257); ZeRO: "at least 24 GB" of
    # model states in mixed-precision Adam
    launch = _launch(model_definition=_transformer(48, 1600, 25, vocab=50257), seq_len=1024)
    # when estimated
    memory = launch_memory(launch)
    # then 1.5B parameters and 24 GB of states, each within 5%
    assert _params(launch) == pytest.approx(1.5e9, rel=0.05)
    assert memory.dense_states == pytest.approx(24 * GB, rel=0.05)
    # and the whole job on one 32 GB device does not fit, on one 80 GB device it does
    need = bytes_per_device(launch, [8])[0]
    assert 32 * GB < need < 80 * GB


def test_korthikanti_activations_per_transformer_layer():
    # given GPT-3 175B (96 layers, h 12288, a 96, s 2048): Korthikanti et al. 2022 keep
    # 34 s b h + 5 a s^2 b bytes per layer without recomputation (2-byte values), s b h / t
    # (34 + 5 a s / h) with t-way tensor and sequence parallelism, 2 s b h with full recomputation
    s, h, a, n = 2048, 12288, 96, 96
    launch = _launch(
        model_definition=_transformer(n, h, a, vocab=None), seq_len=s, precision="fp16"
    )
    assert _params(launch) == pytest.approx(175e9, rel=0.01)
    # when its activations per sample are estimated
    per_sample = launch_memory(launch).activations_per_sample
    # then each layer keeps the paper's bytes
    assert per_sample / n == pytest.approx(34 * s * h + 5 * a * s * s, rel=1e-9)
    # and on a host of 8 devices at t = 8, one sample per trainer, a device keeps 1/t of them
    tp8 = {**launch, "tensor_parallel": 8, "requested_devices_per_host": 8, "optimizer": "none"}
    states = launch_memory(tp8).dense_states / 8
    per_device = bytes_per_device(tp8, [8])[0] - states
    assert per_device == pytest.approx(n * s * h / 8 * (34 + 5 * a * s / h), rel=1e-9)
    # and activation checkpointing keeps only each layer's input
    kept = launch_memory({**launch, "activation_checkpointing": True}).activations_per_sample
    assert kept == pytest.approx(2 * s * h * n, rel=1e-9)


def test_megatron_8b_fits_a_32_gb_v100_only_split_eight_ways():
    # given Megatron-LM's 8.3B model (Shoeybi et al. 2019: 72 layers, h 3072, 32 heads, 8-way
    # tensor parallel on 32 GB V100s, activation checkpointing)
    launch = _launch(model_definition=_transformer(72, 3072, 32, vocab=51200), seq_len=1024,
                     precision="fp16", activation_checkpointing=True, batch_size=8)  # fmt: skip
    assert _params(launch) == pytest.approx(8.3e9, rel=0.02)
    # when estimated 8-way split on a host of 8, and on one device
    split = bytes_per_device({**launch, "tensor_parallel": 8, "requested_devices_per_host": 8},
                             [8])[0]  # fmt: skip
    whole = bytes_per_device(launch, [8])[0]
    # then the split job fits a 32 GB device and the whole one not even an 80 GB one
    assert split < 32 * GB < 80 * GB < whole


def test_bert_large_fits_a_12_gb_gpu_at_the_batch_google_measured():
    # given BERT-Large (24 layers, h 1024, 16 heads, 30,522 word pieces: 340M parameters) in
    # fp32 with Adam at sequence length 128; google-research/bert's README measured a largest
    # batch of 6 on a 12 GB Titan X
    definition = json.dumps({"layers": [
        {"op": "embedding_bag", "dim": 1024, "pooling": 1},
        {"op": "transformer", "layers": 24, "d_model": 1024, "heads": 16, "ffn_mult": 4},
    ]})  # fmt: skip
    launch = _launch(model_definition=definition, num_sparse_features=1, hash_size=30522 + 512,
                     embedding_sharding="data", precision="fp32", seq_len=128)  # fmt: skip
    assert _params(launch) == pytest.approx(340e6, rel=0.03)
    # when estimated at the measured batch and at ten times it
    at = {b: bytes_per_device({**launch, "batch_size": b}, [1])[0] for b in (6, 60)}
    # then the measured batch fits 12 GB and ten times it does not (the estimate leans low: it
    # keeps fewer tensors than TensorFlow 1.11 did, so it admits more than 6)
    assert at[6] < 12 * GB < at[60]


def test_a_dlrm_embedding_table_is_rows_times_width_times_4_bytes_sharded_over_devices():
    # given MLPerf's DLRM on Criteo 1TB: 25 billion embedding parameters, 100 GB of embedding
    # memory in fp32 (Desai and Shrivastava 2022), as tables of width 128
    rows = 25e9 / 128
    layers = [{"op": "mlp", "widths": [512, 256, 128]},
              {"op": "embedding_bag", "dim": 128, "pooling": 1}]  # fmt: skip
    definition = json.dumps({"layers": layers})
    launch = _launch(model_definition=definition, num_sparse_features=26, num_dense_features=13,
                     hash_size=int(rows), precision="fp32", optimizer=None,
                     embedding_sharding="row")  # fmt: skip
    # when estimated
    tables = launch_memory(launch).embedding_states
    # then hash_size x dim x 4 bytes: the published 100 GB
    assert tables == pytest.approx(100 * GB, rel=0.001)
    # and row-sharded over a host of 8 they fit 80 GB devices; on one device, or replicated
    # (data sharding) on every device of the host, they do not
    eight = bytes_per_device({**launch, "requested_devices_per_host": 8}, [8])[0]
    replicated = {**launch, "requested_devices_per_host": 8, "embedding_sharding": "data"}
    assert eight < 80 * GB < min(bytes_per_device(launch, [8])[0],
                                 bytes_per_device(replicated, [8])[0])  # fmt: skip
    assert eight == pytest.approx(tables / 8, rel=0.01)


def test_a_launch_without_a_usable_definition_has_no_estimate():
    for definition in (None, "not json", json.dumps({"layers": [{"op": "warp_drive"}]})):
        need = bytes_per_device(_launch(model_definition=definition), [8, 4])
        assert need.shape == (2,) and np.isnan(need).all()


# -- the filter in a ranking ------------------------------------------------------------------

SPECS = {
    "small": {"hardware_type": "small", "devices_per_host": 8.0, "memory_gb": 16.0,
              "hourly_cost_usd": 1.0, "premium": False},
    "big": {"hardware_type": "big", "devices_per_host": 8.0, "memory_gb": 80.0,
            "hourly_cost_usd": 4.0, "premium": False},
    "huge": {"hardware_type": "huge", "devices_per_host": 4.0, "memory_gb": 192.0,
             "hourly_cost_usd": 9.0, "premium": True},
}  # fmt: skip
GPT2 = _launch(job_name="gpt2/1", model_type="lm", model_definition=_transformer(48, 1600, 25,
               vocab=50257), seq_len=1024)  # fmt: skip


def _order(launch, throughput, measured=None, budget=None):
    """One launch ordered by the pricing policy with the given throughput per type."""
    types = list(throughput)
    n = len(types)
    loaded = SimpleNamespace(specs=SPECS, version="7", model=SimpleNamespace(intervals=None))
    nan = np.full(n, np.nan)
    return order_candidates(
        {**launch, "budget": budget}, types, np.log([throughput[t] for t in types]),
        np.zeros(n, int), np.ones(n), np.ones(n, bool), loaded, [], nan, None, (nan, nan),
        np.array([t in (measured or ()) for t in types]), rank_by="median",
        premium_min_ratio=1.0,
    )  # fmt: skip


def test_a_type_too_small_for_the_job_is_removed_with_the_estimate_and_its_memory():
    # given GPT-2 1.5B on one device, best per dollar on the small type by prediction
    ranking = _order(GPT2, {"small": 100.0, "big": 100.0, "huge": 1000.0})
    # then the small type is removed as does_not_fit, naming the estimate and the memory
    assert ranking.preference_list == ["huge", "big"]
    (removed,) = ranking.removed
    assert removed.hardware_type == "small" and removed.removed_code == "does_not_fit"
    assert removed.rank is None and "16 GB" in removed.removed_reason
    need = bytes_per_device(GPT2, [8])[0] / GB
    assert f"{need:,.1f} GB" in removed.removed_reason
    assert ranking.to_dict()["removed"][0]["removed_code"] == "does_not_fit"


def test_a_type_the_family_has_run_on_is_never_removed_for_memory():
    ranking = _order(GPT2, {"small": 100.0, "big": 50.0}, measured={"small"})
    assert ranking.preference_list == ["small", "big"] and ranking.removed == []


def test_premium_removal_carries_its_code():
    ranking = _order(GPT2, {"big": 100.0, "huge": 100.0})
    assert [(c.hardware_type, c.removed_code) for c in ranking.removed] == [("huge", "premium")]


def test_when_nothing_fits_the_ranking_is_empty_with_a_reason():
    ranking = _order({**GPT2, "seq_len": 16384}, {"small": 100.0, "big": 50.0})
    assert ranking.ranking == [] and ranking.reason_code == "does_not_fit" in REASON_CODES
    assert "do not fit" in ranking.reason and len(ranking.removed) == 2


def test_budget_caps_remove_candidates_with_their_own_codes():
    definition = json.dumps({"layers": [{"op": "mlp", "widths": [64, 1]}]})
    small = _launch(job_name="mlp/1", model_type="mlp", num_trainers=2,
                    requested_devices_per_host=None, model_definition=definition)  # fmt: skip
    prices = {"small": 10.0, "big": 10.0, "huge": 10.0}
    # cost per hour for the job: small 16 x 1, big 16 x 4, huge 8 x 9 USD
    ranking = _order(small, prices, budget={"max_cost_per_hour": 64.0})
    assert ranking.preference_list == ["small", "big"]
    assert [(c.hardware_type, c.removed_code) for c in ranking.removed] == [
        ("huge", "over_cost_cap")
    ]
    assert "budget.max_cost_per_hour=64" in ranking.removed[0].removed_reason
    ranking = _order(small, prices, budget={"max_devices": 8.0})
    assert ranking.preference_list == ["huge"]
    assert {c.removed_code for c in ranking.removed} == {"over_device_cap"}
    assert "16 devices" in ranking.removed[0].removed_reason
    ranking = _order(small, prices, budget={"max_devices": 4, "max_cost_per_hour": 100})
    assert ranking.ranking == [] and ranking.reason_code == "over_budget"


# -- through the Ranker -----------------------------------------------------------------------

DAY = dt.date(2026, 1, 5)


@pytest.fixture(scope="module")
def ranker():
    """A quick cascade on random features, the simulated fleet's spec table and a snapshot in
    which family ``gpt2`` has run on the T4 (16 GB)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(800, len(FEATURE_COLUMNS)))
    cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": 1}).fit(X, X[:, 0])
    specs = SimulatedFleet(seed=0, scale=0.01).hardware_specs()
    runs = pl.DataFrame({
        "attempt_id": ["a1", "a2"], "job_name": ["gpt2/1", "gpt2/2"], "model_type": ["lm"] * 2,
        "hardware_type": ["T4"] * 2, "ds": [DAY - dt.timedelta(days=2)] * 2,
        "launch_ts": [dt.datetime(2026, 1, 3, 1), dt.datetime(2026, 1, 3, 2)],
        "num_trainers": [1, 1], "batch_size": [1, 1], "throughput": [10.0, 11.0],
    })  # fmt: skip
    snapshot = history_snapshot(runs, DAY - dt.timedelta(days=1))
    assert set(snapshot.columns) == set(SNAPSHOT_SCHEMA)
    return Ranker(model=LeapModel(cascade, snapshot, specs), wait=True, canary_launches=0)


TYPES = ["T4", "V100-16GB", "A100-80GB", "H100-SXM"]


def test_the_ranker_removes_what_does_not_fit_but_keeps_what_the_family_ran_on(ranker):
    job = {**GPT2, "job_name": "gpt2/3"}
    ranking = ranker.rank(job, TYPES, launch_date=DAY)
    removed = {c.hardware_type: c.removed_code for c in ranking.removed}
    assert removed.get("V100-16GB") == "does_not_fit" and "T4" in ranking.preference_list
    assert set(ranking.preference_list) | set(removed) == set(TYPES)
    # another family has no runs on the T4: it is removed there too
    other = ranker.rank({**job, "job_name": "bert/1"}, TYPES, launch_date=DAY)
    assert {"T4", "V100-16GB"} <= {c.hardware_type for c in other.removed}


def test_the_budget_reaches_rank_and_rank_many(ranker):
    job = {"job_name": "mlp/1", "model_type": "mlp", "num_trainers": 1, "batch_size": 64}
    ranking = ranker.rank(job, TYPES, launch_date=DAY, budget={"max_cost_per_hour": 10})
    assert ranking.reason is None
    assert {c.removed_code for c in ranking.removed} == {"over_cost_cap"}
    assert all(c.cost_per_hour <= 10 for c in ranking.ranking)
    both = ranker.rank_many([(job, TYPES), (job, TYPES, {"max_devices": 0})], launch_date=DAY)
    assert {c.removed_code for c in both[0].removed} <= {"premium"}
    assert both[1].reason_code == "over_budget" and len(both[1].removed) == len(TYPES)
    bad = ranker.rank_many([(job,), "job"], launch_date=DAY)
    assert [r.reason_code for r in bad] == ["invalid_job"] * 2


@pytest.mark.parametrize(
    ("budget", "named"),
    [
        ({"max_price": 3}, "budget.'max_price'"),
        ({"max_devices": "8"}, "budget.max_devices='8'"),
        ({"max_cost_per_hour": -1}, "budget.max_cost_per_hour=-1"),
        ({"max_devices": True}, "budget.max_devices=True"),
        ({"max_devices": math.nan}, "budget.max_devices=nan"),
        ([("max_devices", 8)], "budget=[('max_devices', 8)]"),
    ],
)
def test_a_malformed_budget_is_an_invalid_job_naming_the_field(ranker, budget, named):
    job = {"job_name": "mlp/1", "model_type": "mlp", "num_trainers": 1, "batch_size": 64}
    ranking = ranker.rank(job, TYPES, launch_date=DAY, budget=budget)
    assert ranking.ranking == [] and ranking.reason_code == "invalid_job"
    assert named in ranking.reason


def test_the_canary_scores_budgeted_launches_in_shadow(ranker):
    job = {"job_name": "mlp/1", "model_type": "mlp", "num_trainers": 1, "batch_size": 64}
    jobs = [(job, TYPES, {"max_cost_per_hour": 10}), (job, TYPES)]
    results = ranker.rank_many(jobs, launch_date=DAY)
    canary = Canary(ranker._loaded, needed=2)
    with ranker._lock:
        ranker._canary = canary
    ranker._shadow(canary, jobs, results, DAY)
    assert canary.seen == 2 and canary.failures == []
    assert ranker.stats()["canary"] is None and ranker.stats()["load_error"] is None
