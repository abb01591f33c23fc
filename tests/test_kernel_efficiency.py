"""The kernel model: an operator's work and roofline, an efficiency learned from other GPUs'
kernels and never above the roofline, and the public kernel set it is learned from."""

import numpy as np
import polars as pl
import pytest

from leap_pipeline.data.kernel_sets import read_kernel_set
from leap_serving.launch.kernel_efficiency import (
    OPS,
    KernelEfficiency,
    kernel_features,
    operator_work,
)

SPECS = pl.DataFrame(
    {
        "hardware_type": ["a", "b", "c", "d"],
        "peak_fp32_tflops": [8.0, 14.0, 19.5, 30.0],
        "memory_bandwidth_gbps": [320.0, 900.0, 1555.0, 2000.0],
        "compute_units": [40.0, 80.0, 108.0, 96.0],
        "clock_mhz": [1590.0, 1370.0, 1410.0, 1500.0],
        "l2_cache_mb": [4.0, 6.0, 40.0, 24.0],
    }
)


def test_an_operators_work_is_counted_by_its_kind():
    ops = pl.DataFrame(
        {
            "op": ["bmm", "linear", "add", "relu", "ln"],
            "b": [2, 2, 10, 10, 10],
            "m": [64, 64, None, None, None],
            "n": [32, 32, None, None, None],
            "k": [16, 16, None, None, None],
            "h": [None, None, 100, 100, 100],
        }
    )
    work = operator_work(ops)
    assert work["flops"].to_list()[:2] == [2 * 2 * 64 * 32 * 16] * 2
    # bmm reads both batched operands and writes its output; linear one weight and its bias
    assert work["bytes"][0] == 4 * 2 * (64 * 32 + 32 * 16 + 64 * 16)
    assert work["bytes"][1] == 4 * (2 * 64 * 32 + 32 * 16 + 16 + 2 * 64 * 16)
    # a binary op reads two inputs, a unary one; a layer norm does six operations per value
    assert work["bytes"].to_list()[2:] == [12 * 1000, 8 * 1000, 8 * 1000]
    assert work["flops"].to_list()[2:] == [1000, 1000, 6000]
    with pytest.raises(ValueError, match=r"op: \['conv'\]"):
        operator_work(ops.with_columns(op=pl.lit("conv")))


def _synthetic(rng: np.random.Generator, types: list[str], n: int) -> pl.DataFrame:
    """Matmuls whose measured time is their roofline over an efficiency set by how full their
    last wave of tiles is, and memory-bound ops at 80% of the bandwidth; 5% noise."""
    ops = pl.DataFrame(
        {
            "op": rng.choice(["bmm", "add"], n),
            "hardware_type": rng.choice(types, n),
            "b": rng.integers(1, 64, n),
            "m": rng.integers(16, 2048, n),
            "n": rng.integers(16, 2048, n),
            "k": rng.integers(16, 2048, n),
            "h": rng.integers(1024, 1 << 20, n),
        }
    )
    features = kernel_features(ops, SPECS)
    efficiency = np.where(
        features["is_matmul"].to_numpy() == 1.0,
        0.9 * features["wave_efficiency_128x128"].fill_null(1.0).to_numpy(),
        0.8,
    )
    noise = np.exp(rng.normal(0.0, 0.05, n))
    return ops.with_columns(
        latency_ms=pl.Series(features["roofline_s"].to_numpy() / efficiency * noise * 1e3)
    )


def test_a_gpu_the_model_never_saw_is_predicted_from_its_specs_and_never_past_its_roofline():
    rng = np.random.default_rng(0)
    train = _synthetic(rng, ["a", "b", "c"], 3000)
    held = _synthetic(rng, ["d"], 500)
    model = KernelEfficiency(n_estimators=150, seed=0).fit(train, SPECS)
    predicted = model.latency_ms(held, SPECS)
    measured = held["latency_ms"].to_numpy()
    learned = np.median(np.abs(predicted / measured - 1))
    roofline = kernel_features(held, SPECS)["roofline_s"].to_numpy() * 1e3
    assert learned < 0.5 * np.median(np.abs(roofline / measured - 1))
    assert learned < 0.10
    # a kernel measured faster than its roofline (a cache the roofline does not know) is still
    # predicted at or above the roofline: efficiency at most 1
    fast = held.with_columns(latency_ms=pl.Series(roofline * 0.5))
    assert (model.log_efficiency(fast, SPECS) <= 0.0).all()
    assert (model.latency_ms(fast, SPECS) >= roofline * (1 - 1e-9)).all()
    with pytest.raises(ValueError, match=r"hardware_type: \['e'\]"):
        model.latency_ms(held.with_columns(hardware_type=pl.lit("e")), SPECS)
    with pytest.raises(RuntimeError, match="not fitted"):
        KernelEfficiency().latency_ms(held, SPECS)


def test_the_public_kernel_set_reads_whole():
    ops, specs = read_kernel_set()
    assert ops.height == 259_186
    assert set(ops["op"].cast(pl.String)) == set(OPS)
    assert set(ops["hardware_type"]) <= set(specs["hardware_type"])
    assert (ops["latency_ms"] > 0).all()
    # NeuSight's five training GPUs; H100 and L4 appear only among its test kernels
    by_split = ops.group_by("neusight_split").agg(pl.col("hardware_type").unique())
    trained = set(by_split.filter(pl.col("neusight_split") == "train")["hardware_type"][0])
    assert len(trained) == 5 and not {"NVIDIA H100 80GB HBM3", "NVIDIA L4"} & trained
    t4 = specs.filter(pl.col("hardware_type") == "Tesla T4").row(0, named=True)
    assert t4["peak_fp32_tflops"] == pytest.approx(8.141) and t4["compute_units"] == 40
    with pytest.raises(ValueError, match=r"kernels\.parquet"):
        read_kernel_set("/nonexistent")


def test_a_held_out_type_holds_out_every_measured_gpu_of_its_chip():
    from leap_pipeline.data.kernel_sets import chip_of, kernel_devices_held
    from leap_pipeline.studies.kernel_prior import held_devices

    named = {
        "V100-16GB": "v100",
        "A100-SXM4-40GB": "a100",
        "H100-PCIe": "h100",
        "T4": "t4",
        "L4": "l4",
        "Tesla P4": "p4",
        "L40S": None,
        "P40": None,
        "RTX-A6000": None,
        "MI250X": None,
    }
    assert {name: chip_of(name) for name in named} == named
    assert kernel_devices_held(["A100-80GB"]) == {
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100 80GB PCIe",
    }
    assert kernel_devices_held(["L40S", "MI300X"]) == frozenset()
    # only a split that holds a type out holds its kernels out
    assert held_devices("leave-hardware-out", ["T4"]) == {"Tesla T4"}
    assert held_devices("leave-model-out", ["T4"]) == frozenset()


class _Flat:
    """A kernel model whose every operator runs at ``efficiency`` of its roofline."""

    def __init__(self, efficiency: float) -> None:
        self.efficiency = efficiency

    def log_efficiency(self, ops: pl.DataFrame, specs: pl.DataFrame) -> np.ndarray:
        return np.full(ops.height, np.log(self.efficiency))


def test_the_composed_prior_divides_each_layer_class_by_its_operators_efficiency():
    from leap_serving.launch.features import FEATURE_COLUMNS
    from leap_serving.launch.kernel_efficiency import composed_log_q, layer_operators

    X = np.full((1, len(FEATURE_COLUMNS)), np.nan)
    values = {
        "cost_log_step_s": np.log(2.0),
        "cost_share_matmul": 0.5,
        "cost_share_attention": 0.2,
        "cost_share_memory": 0.2,
        "cost_wave_efficiency": 0.8,
        "ratio_global_batch": 64.0,
        "ratio_batch_per_device": 8.0,
        "job_tensor_parallel": 1.0,
        "arch_tokens_per_sample": 512.0,
        "arch_mean_width": 1024.0,
        "arch_d_model": 1024.0,
        "arch_attention_heads": 16.0,
    }
    for name, value in values.items():
        X[0, FEATURE_COLUMNS.index(name)] = value
    ops = layer_operators(X, ["a"])
    assert ops["matmul"].row(0, named=True) | {"hardware_type": "a"} == {
        "op": "linear",
        "hardware_type": "a",
        "b": 1,
        "m": 8 * 512,
        "n": 1024,
        "k": 1024,
        "h": None,
    }
    assert ops["attention"]["b"][0] == 8 * 16 and ops["attention"]["n"][0] == 64
    assert ops["memory"]["b"][0] == 8 * 512 and ops["memory"]["h"][0] == 1024
    # at the roofline, the matmul term loses the prior's wave quantization (the kernel model's
    # to learn): 2 s x (0.5 x 0.8 + 0.2 + 0.2 + 0.1) = 1.8 s
    assert np.exp(composed_log_q(_Flat(1.0), X, ["a"], SPECS)) == pytest.approx([64 / 1.8])
    # at half of it, every layer class but the rest (communication, optimizer) takes twice as long
    half = 2.0 * (0.5 * 0.8 / 0.5 + 0.2 / 0.5 + 0.2 / 0.5 + 0.1)
    assert np.exp(composed_log_q(_Flat(0.5), X, ["a"], SPECS)) == pytest.approx([64 / half])


def test_without_the_kernel_set_the_kernel_prior_gives_no_estimate(monkeypatch, tmp_path):
    """A wheel does not carry ``public-data/``: the kernel prior then ranks last, never a crash."""
    from leap_pipeline.studies import kernel_prior

    monkeypatch.setattr(kernel_prior, "KERNEL_SET", tmp_path)
    rows = pl.DataFrame({"hardware_type": ["a", "b"]})
    out = kernel_prior.kernel_log_q(np.zeros((2, 3)), rows, SPECS, frozenset())
    assert out.shape == (2,) and np.isnan(out).all()
