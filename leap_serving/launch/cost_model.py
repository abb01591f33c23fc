"""A per-layer-class cost model: the step time a launch would take at its hardware's roofline.

Trees cannot extrapolate to a GPU faster than any they saw; a bounded efficiency times a
physical prior can (NeuSight, ASPLOS'25; Li et al., MICRO'23). This module is that prior: pure
arithmetic over the architecture summary (``architecture.summarize``), the launch and the spec
table, shared by training and serving through the ``cost_`` features.

Per data-parallel replica and step, each layer class is timed by whichever of its work binds:
- matrix multiplies (MLPs, transformer projections, recurrent cells, the output head): their
  FLOPs at the precision's peak, scaled by the wave quantization of their tiles over the
  compute units, or reading their weights at the memory bandwidth, whichever is slower;
- attention scores, convolutions: FLOPs at the peak, or their memory traffic;
- elementwise, norms, embedding look-ups: memory traffic at the bandwidth;
- the optimizer update (only when the launch names an optimizer): the parameters' state,
  read and written once per step.
A step is three forward passes of work (forward, and backward's two). Communication adds the
data-parallel gradient all-reduce, 2(n-1)/n x parameter bytes over the link (intra-node while
the job runs on one host, inter-node beyond), and tensor parallelism's activation all-reduces;
a pipeline with one micro-batch per step (the prior knows no other) runs its stages in turn, so
its devices add no speed. The prior's throughput is the global batch over the step time.
"""

from __future__ import annotations

import numpy as np

COST_FEATURES: tuple[str, ...] = (
    "cost_log_q",
    "cost_log_step_s",
    "cost_share_matmul",
    "cost_share_attention",
    "cost_share_conv",
    "cost_share_memory",
    "cost_share_communication",
    "cost_share_optimizer",
    "cost_wave_efficiency",
    "cost_log_intensity_over_ridge",
)

TILE = 128.0  # rows and columns of one output tile of a GPU matrix multiply
OPTIMIZER_BYTES_PER_PARAM = 16.0  # fp32 weight, gradient and two moments, read or written


def _ceil(x: np.ndarray) -> np.ndarray:
    return np.ceil(np.maximum(x, 1.0))


def wave_efficiency(rows: np.ndarray, width: np.ndarray, compute_units: np.ndarray) -> np.ndarray:
    """The share of the compute units a matrix multiply of ``rows`` x ``width`` outputs keeps
    busy: its 128 x 128 tiles run in waves of one per unit, and the last wave runs part full.
    1 where the shape or the units are unknown."""
    tiles = _ceil(rows / TILE) * _ceil(width / TILE)
    with np.errstate(invalid="ignore", divide="ignore"):
        waves = np.ceil(tiles / compute_units)
        efficiency = tiles / (waves * compute_units)
    known = (rows > 0) & (width > 0) & (compute_units > 0) & np.isfinite(efficiency)
    return np.where(known, np.clip(efficiency, 0.0, 1.0), 1.0)


def step_costs(
    arch: dict[str, np.ndarray],
    *,
    global_batch: np.ndarray,
    hosts: np.ndarray,
    devices: np.ndarray,
    tensor_parallel: np.ndarray,
    pipeline_parallel: np.ndarray,
    bytes_per_value: np.ndarray,
    optimizer_known: np.ndarray,
    spec: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """The prior's step time (s) per launch row and its components: ``COST_FEATURES``.

    ``arch`` maps ``ARCHITECTURE_SUMMARY_KEYS`` to arrays (NaN without a definition), ``spec``
    the ``HARDWARE_SPEC_COLUMNS`` of each row's type. Unknown parallel degrees are 1; an unknown
    precision is timed at fp32. A row without an architecture or a peak gets NaN throughout."""
    tp = np.where(tensor_parallel >= 1, tensor_parallel, 1.0)
    pp = np.where(pipeline_parallel >= 1, pipeline_parallel, 1.0)
    bpv = np.where(bytes_per_value > 0, bytes_per_value, 4.0)
    # a type with fewer devices than the degrees ask for holds the model on those it has
    split = np.maximum(np.minimum(tp * pp, devices), 1.0)  # devices a replica's work spans
    tp = np.minimum(tp, split)
    pp = np.maximum(split / tp, 1.0)
    replicas = np.maximum(devices / split, 1.0)
    per_replica = global_batch / replicas  # samples a replica runs each step
    with np.errstate(invalid="ignore", divide="ignore"):
        half = np.where(bpv == 2.0, spec["peak_bf16_tflops"], np.nan)
        peak = np.where(np.isfinite(half), half, spec["peak_fp32_tflops"]) * 1e12
        bandwidth = spec["memory_bandwidth_gbps"] * 1e9
        work = 3.0 * per_replica / split  # forward passes' worth of samples per device
        waves = wave_efficiency(
            per_replica * arch["tokens_per_sample"] / tp, arch["mean_width"], spec["compute_units"]
        )
        weights = 3.0 * arch["dense_params"] * bpv / split / bandwidth
        matmul = np.maximum(arch["mlp_flops_per_sample"] * work / (peak * waves), weights)
        attention = np.maximum(
            arch["attention_flops_per_sample"] * work / peak,
            arch["attention_bytes_per_sample"] * work / bandwidth,
        )
        conv = arch["conv_flops_per_sample"] * work / peak
        memory = (
            arch["activation_bytes_per_sample"] * work
            + arch["embedding_bytes_per_sample"] * per_replica / split
        ) / bandwidth
        optimizer = np.where(
            optimizer_known, arch["dense_params"] * OPTIMIZER_BYTES_PER_PARAM / split / bandwidth, 0
        )
        compute = matmul + attention + conv + memory
        # one micro-batch: the stages run in turn, each 1/pp of the replica's work
        compute = compute * pp
        one_host = ~(hosts > 1)  # the contract's trainers are hosts; unknown: one
        link = (
            np.where(one_host, spec["intra_node_bandwidth_gbps"], spec["inter_node_bandwidth_gbps"])
            * 1e9
        )
        link = np.where(link > 0, link, np.nan)
        intra = spec["intra_node_bandwidth_gbps"] * 1e9
        intra = np.where(intra > 0, intra, np.nan)
        gradient = 2.0 * (replicas - 1.0) / replicas * arch["dense_params"] * bpv / split / link
        exchange = (
            2.0 * (tp - 1.0) / tp * 2.0 * arch["tp_exchange_bytes_per_sample"] * per_replica / intra
        )
        # a link the spec table does not know costs nothing rather than hiding the whole prior
        communication = np.where(replicas > 1, np.nan_to_num(gradient), 0.0) + np.where(
            tp > 1, np.nan_to_num(exchange), 0.0
        )
        step = compute + optimizer + communication
        known = np.isfinite(step) & (step > 0) & (global_batch > 0)
        step = np.where(known, step, np.nan)
        ridge = peak / bandwidth
        intensity = arch["flops_per_sample"] / (
            arch["activation_bytes_per_sample"] + arch["embedding_bytes_per_sample"]
        )
        return {
            "cost_log_q": np.log(global_batch / step),
            "cost_log_step_s": np.log(step),
            "cost_share_matmul": matmul * pp / step,
            "cost_share_attention": attention * pp / step,
            "cost_share_conv": conv * pp / step,
            "cost_share_memory": memory * pp / step,
            "cost_share_communication": communication / step,
            "cost_share_optimizer": optimizer / step,
            "cost_wave_efficiency": np.where(known, waves, np.nan),
            "cost_log_intensity_over_ridge": np.log(intensity / ridge),
        }
