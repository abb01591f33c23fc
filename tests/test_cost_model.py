"""The per-layer cost model (``leap_serving.launch.cost_model``) and the efficiency GBDT on it."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import polars as pl

from leap_serving.launch.contract import schema
from leap_serving.launch.features import FEATURE_COLUMNS, build_features, cost_log_q
from leap_serving.launch.history import history_features
from leap_serving.launch.snapshot import history_snapshot
from leap_serving.launch.validation import with_contract_columns
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.model_file import cascade_dict, cascade_from_dict

DAY = dt.date(2026, 1, 5)
GPT = {"layers": [{"op": "transformer", "layers": 12, "d_model": 768, "heads": 12, "ffn_mult": 4},
                  {"op": "lm_head", "vocab": 50257}]}  # fmt: skip
RECSYS = {"layers": [{"op": "embedding_bag", "dim": 128, "pooling": 40},
                     {"op": "mlp", "widths": [512, 256, 1]}]}  # fmt: skip


def _specs(peaks: dict[str, tuple[float, float]]) -> pl.DataFrame:
    """A spec table: type -> (bf16 peak TFLOP/s, memory bandwidth GB/s); the rest alike."""
    rows = [
        {"hardware_type": hw, "vendor": "nvidia", "peak_fp32_tflops": peak / 8,
         "peak_bf16_tflops": peak, "memory_gb": 80.0, "memory_bandwidth_gbps": bandwidth,
         "l2_cache_mb": 40.0, "compute_units": 108.0, "clock_mhz": 1400.0,
         "intra_node_bandwidth_gbps": 300.0, "inter_node_bandwidth_gbps": 25.0,
         "process_node_nm": 7.0, "tdp_watts": 400.0, "devices_per_host": 8.0,
         "hourly_cost_usd": 1.0, "premium": False, "available_from": dt.date(2020, 1, 1)}
        for hw, (peak, bandwidth) in peaks.items()
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=schema("hardware_specs"), orient="row")


def _launches(rows: list[dict]) -> pl.DataFrame:
    base = {"attempt_id": "a", "job_name": "j", "model_type": "m", "ds": DAY,
            "launch_ts": dt.datetime(2026, 1, 5, 12), "candidate_hardware": [],
            "num_trainers": 1, "batch_size": 8, "precision": "bf16", "seq_len": 1024,
            "status": "succeeded", "requested_devices_per_host": 1}  # fmt: skip
    frame = pl.DataFrame([base | r for r in rows])
    return with_contract_columns(frame, "job_attempts").cast(dict(schema("job_attempts")))


def _features(launches: pl.DataFrame, specs: pl.DataFrame) -> np.ndarray:
    snapshot = history_snapshot(launches.head(0), DAY - dt.timedelta(days=1))
    history = history_features(launches, snapshot, specs)
    return build_features(launches, specs, history).select(FEATURE_COLUMNS).to_numpy()


def _column(X: np.ndarray, name: str) -> np.ndarray:
    return X[:, FEATURE_COLUMNS.index(name)]


def test_a_compute_bound_job_scales_with_peak_and_a_memory_bound_one_with_bandwidth():
    specs = _specs({"base": (100.0, 1000.0), "fast_compute": (200.0, 1000.0),
                    "fast_memory": (100.0, 2000.0)})  # fmt: skip
    wide = {"layers": [{"op": "transformer", "layers": 24, "d_model": 2048, "heads": 16,
                        "ffn_mult": 4}]}  # fmt: skip
    definitions = [json.dumps(wide), json.dumps(RECSYS)]
    launches = _launches([
        {"hardware_type": hw, "model_definition": d, "seq_len": 512 if d == definitions[0] else 0,
         "num_sparse_features": 26, "num_dense_features": 13, "hash_size": 10**7,
         "batch_size": 32 if d == definitions[0] else 4096}
        for d in definitions for hw in ("base", "fast_compute", "fast_memory")
    ])  # fmt: skip
    q = np.exp(cost_log_q(_features(launches, specs)))
    gpt, recsys = q[:3], q[3:]
    assert 1.7 < gpt[1] / gpt[0] <= 2.0  # mostly matrix multiplies: the peak carries it
    assert gpt[2] / gpt[0] < 1.2
    # look-ups and elementwise: the bandwidth carries most of it
    assert recsys[2] / recsys[0] > 1.4 and recsys[1] / recsys[0] < 1.4


def test_communication_and_parallelism_are_in_the_step():
    specs = _specs({"a100": (312.0, 2039.0)})
    definition = json.dumps(GPT)
    launches = _launches([
        {"hardware_type": "a100", "model_definition": definition, "batch_size": 4},
        # four data-parallel replicas: four times the batch, plus a gradient all-reduce
        {"hardware_type": "a100", "model_definition": definition, "batch_size": 16,
         "requested_devices_per_host": 4},
        # four tensor-parallel devices: the same batch split four ways, plus activation exchanges
        {"hardware_type": "a100", "model_definition": definition, "batch_size": 4,
         "requested_devices_per_host": 4, "tensor_parallel": 4},
        # a four-stage pipeline with one micro-batch: its stages run in turn
        {"hardware_type": "a100", "model_definition": definition, "batch_size": 4,
         "requested_devices_per_host": 4, "pipeline_parallel": 4},
    ])  # fmt: skip
    X = _features(launches, specs)
    q = np.exp(cost_log_q(X))
    comm = _column(X, "cost_share_communication")
    assert comm[0] == 0.0 and comm[1] > 0.0 and comm[2] > 0.0
    assert 3.0 < q[1] / q[0] < 4.0
    assert 1.5 < q[2] / q[0] < 4.0
    assert abs(q[3] / q[0] - 1.0) < 0.05
    shares = [c for c in FEATURE_COLUMNS if c.startswith("cost_share_")]
    total = sum(_column(X, c) for c in shares)
    np.testing.assert_allclose(total, 1.0, rtol=1e-9)


def test_a_row_without_an_architecture_has_no_prior():
    specs = _specs({"a100": (312.0, 2039.0)})
    X = _features(_launches([{"hardware_type": "a100"}]), specs)
    assert np.isnan(cost_log_q(X)).all()


def test_the_efficiency_gbdt_ranks_a_type_faster_than_any_in_training_first():
    """Held out: the fastest type. Trees on ln q clamp it to the fastest they saw; a bounded
    efficiency times the cost prior carries the step it has over them."""
    rng = np.random.default_rng(0)
    peaks = {"t1": (30.0, 600.0), "t2": (60.0, 900.0), "t3": (120.0, 1500.0),
             "t4": (250.0, 2000.0), "new": (600.0, 4000.0)}  # fmt: skip
    specs = _specs(peaks)
    rows = []
    for m in range(40):
        d = {
            "op": "transformer",
            "layers": int(rng.integers(4, 24)),
            "d_model": int(rng.choice([512, 768, 1024, 2048])),
            "heads": 8,
            "ffn_mult": 4,
        }
        definition, batch = json.dumps({"layers": [d]}), int(rng.choice([4, 8, 16]))
        for hw in peaks:
            rows.append({"hardware_type": hw, "model_definition": definition,
                         "job_name": f"job{m}", "model_type": f"m{m}",
                         "batch_size": batch, "seq_len": 512})  # fmt: skip
    launches = _launches(rows)
    X = _features(launches, specs)
    # measured: the prior times a job's efficiency (0.3-0.7) and noise
    efficiency = np.repeat(rng.uniform(0.3, 0.7, 40), len(peaks))
    y = cost_log_q(X) + np.log(efficiency) + rng.normal(0, 0.03, len(X))
    held = launches["hardware_type"].to_numpy() == "new"
    params = {"n_bins": 1, "min_bin_rows": 20, "max_iter": 200, "min_data_in_leaf": 5}
    efficiency_model = BinnedCascade(**params, target="efficiency").fit(X[~held], y[~held])
    plain = BinnedCascade(**params).fit(X[~held], y[~held])
    fastest_seen = launches["hardware_type"].to_numpy() == "t4"
    # the same jobs, in the same order, on the new type and on the fastest it saw
    assert (efficiency_model.predict(X[held]) > efficiency_model.predict(X[fastest_seen])).all()
    error = np.abs(efficiency_model.predict(X[held]) - y[held])
    plain_error = np.abs(plain.predict(X[held]) - y[held])
    assert np.median(error) < 0.15
    assert np.median(plain_error) > 3 * np.median(error)  # trees clamp to what they saw
    # never more than the roofline: the cap is the largest excess any training row showed
    assert efficiency_model.efficiency_cap_ == 0.0 or efficiency_model.efficiency_cap_ < 0.2
    bound = cost_log_q(X) + efficiency_model.efficiency_cap_ + 1e-9
    assert (efficiency_model.predict(X) <= bound).all()
    # and it survives its model file
    again = cascade_from_dict(cascade_dict(efficiency_model), "model", X.shape[1])
    np.testing.assert_allclose(again.predict(X), efficiency_model.predict(X))


def test_serving_applies_the_efficiency_bound_the_selection_scored():
    """The compiled cascade (what a ranker serves) predicts what ``BinnedCascade.predict``
    does, the roofline bound included, on rows where the bound binds."""
    from leap_serving.model.compiled import CompiledCascade

    specs = _specs({"slow": (50.0, 800.0), "fast": (400.0, 3000.0)})
    definition = json.dumps(GPT)
    launches = _launches(
        [{"hardware_type": hw, "model_definition": definition, "job_name": f"j{i}",
          "batch_size": 4 + i % 5} for i in range(60) for hw in ("slow", "fast")]
    )  # fmt: skip
    X = _features(launches, specs)
    rng = np.random.default_rng(1)
    y = cost_log_q(X) + rng.normal(0.2, 0.3, len(X))  # most rows beat the roofline
    y[0] += 5.0  # one outlier must not lift the bound for every launch: a percentile sets it
    model = BinnedCascade(n_bins=1, min_bin_rows=20, max_iter=50, target="efficiency")
    model.fit(X, y)
    assert 0.0 < model.efficiency_cap_ < 1.5
    model.efficiency_cap_ = 0.0  # the roofline itself, so the bound binds on some rows
    raw = model.offset(X) + model.experts_[0].predict(X)
    bound = cost_log_q(X) + model.efficiency_cap_
    assert (raw > bound).any()  # the bound binds somewhere
    served, _, _ = CompiledCascade(model).predict(X)
    np.testing.assert_allclose(served, model.predict(X), rtol=1e-9, atol=1e-9)
    assert (served <= bound + 1e-9).all()


def test_hosts_choose_the_link_and_a_small_type_holds_the_degrees_it_can():
    specs = _specs({"big": (312.0, 2039.0), "single": (312.0, 2039.0)})
    specs = specs.with_columns(
        devices_per_host=pl.when(pl.col("hardware_type") == "single").then(1.0).otherwise(8.0)
    )
    definition = json.dumps(GPT)
    launches = _launches([
        # one host of 8 and two hosts of 4: the same devices, NVLink against the network
        {"hardware_type": "big", "model_definition": definition, "batch_size": 64,
         "requested_devices_per_host": 8},
        {"hardware_type": "big", "model_definition": definition, "num_trainers": 2,
         "batch_size": 32, "requested_devices_per_host": 4},
        # eight tensor-parallel devices asked of a type with one per host: it has one
        {"hardware_type": "big", "model_definition": definition, "batch_size": 8,
         "requested_devices_per_host": 8, "tensor_parallel": 8},
        {"hardware_type": "single", "model_definition": definition, "batch_size": 8,
         "requested_devices_per_host": 8, "tensor_parallel": 8},
    ])  # fmt: skip
    X = _features(launches, specs)
    comm = _column(X, "cost_share_communication")
    assert comm[1] > 2 * comm[0]  # the inter-node link is slower
    q = np.exp(cost_log_q(X))
    assert q[2] > 2 * q[3]  # eight devices beat one, whatever the degree asked


def test_a_transformer_given_its_ffn_width_fits_in_memory_like_one_given_the_multiple():
    from leap_serving.launch.memory import bytes_per_device

    layer = {"op": "transformer", "layers": 4, "d_model": 512, "heads": 8}
    launch = {"batch_size": 8, "seq_len": 512, "precision": "bf16", "num_trainers": 1}
    by_width = bytes_per_device(
        launch | {"model_definition": json.dumps({"layers": [layer | {"d_ff": 2048}]})}, [8.0]
    )
    by_multiple = bytes_per_device(
        launch | {"model_definition": json.dumps({"layers": [layer | {"ffn_mult": 4}]})}, [8.0]
    )
    np.testing.assert_allclose(by_width, by_multiple)
    assert np.isfinite(by_width).all() and (by_width > 0).all()
