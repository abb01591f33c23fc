"""Noise-free throughput of a job on a device type: a roofline with the costs real jobs pay.

Everything is vectorized over numpy arrays: job i against hardware row i gives the logged value,
and the oracle pairs each attempt with every type for the counterfactuals; the memory footprint
broadcasts jobs against types to decide eligibility.
Inputs are the job's architecture summary, launch config and hidden factors; outputs are samples/s
for the whole job and the per-device memory footprint that decides eligibility.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leap_serving.launch.contract import job_devices

# achieved fraction of the roofline by a well-tuned kernel mix, before the job's own factors
BASE_MFU = 0.45
MEMORY_EFFICIENCY = 0.7
# embedding lookups and their sparse updates are random gathers, far from streaming bandwidth
EMBEDDING_ACCESS_EFFICIENCY = 0.02
EMBEDDING_TRAFFIC_FACTOR = 6.0  # lookup, gradient, and the read-modify-write of rows and state
# gathers are latency-bound: their rate grows with the square root of streaming bandwidth
REFERENCE_BANDWIDTH = 2e12
# launch overhead per kernel (s); non-CUDA stacks pay more per launch
KERNEL_OVERHEAD_S = {"nvidia": 7e-6, "amd": 9e-6, "intel": 1.0e-5, "aws": 1.1e-5}
STEP_HOST_OVERHEAD_S = 4.5e-3  # framework, optimizer launch and host sync, once per step
COMM_EXPOSED = 0.4  # the share of gradient / embedding exchange that overlaps no compute
SHARDING_COMM = {"table": 1.0, "row": 1.3, "column": 1.15, "data": 0.0}
OPTIMIZER_STATE_BYTES = {"adam": 12.0, "adagrad": 8.0, "sgd": 4.0, "lamb": 12.0}
PIPELINE_MICROBATCHES = 8


@dataclass(frozen=True)
class JobArrays:
    """Per-job inputs to the physics, one entry per job (numpy arrays of equal length)."""

    flops_per_sample: np.ndarray
    dense_params: np.ndarray
    embedding_params: np.ndarray
    embedding_bytes_per_sample: np.ndarray
    activation_bytes_per_sample: np.ndarray
    kernels_per_step: np.ndarray
    transformer_layers: np.ndarray
    d_model: np.ndarray
    seq_len: np.ndarray
    num_sparse_features: np.ndarray
    embedding_dim: np.ndarray
    num_trainers: np.ndarray
    batch_size: np.ndarray
    devices_requested: np.ndarray
    tensor_parallel: np.ndarray
    pipeline_parallel: np.ndarray
    low_precision: np.ndarray  # bool: bf16 / fp16
    sharding_comm: np.ndarray
    optimizer_state_bytes: np.ndarray
    activation_checkpointing: np.ndarray  # bool
    num_readers: np.ndarray
    reader_rate: np.ndarray  # samples/s one reader delivers for this job
    tokens_per_sample: np.ndarray  # what fills the device: tokens, pixels/64 or 1
    hidden_efficiency: np.ndarray  # model type x family x package version x host: never observed
    vendor_efficiency: np.ndarray  # (jobs, vendors) kernel quality of the model type per vendor

    def take(self, index: np.ndarray) -> JobArrays:
        return JobArrays(**{k: v[index] for k, v in self.__dict__.items()})


@dataclass(frozen=True)
class HardwareArrays:
    """Per-type inputs, from the spec table (numpy arrays of equal length)."""

    peak_fp32_tflops: np.ndarray
    peak_bf16_tflops: np.ndarray
    memory_gb: np.ndarray
    memory_bandwidth_gbps: np.ndarray
    compute_units: np.ndarray
    intra_node_bandwidth_gbps: np.ndarray
    inter_node_bandwidth_gbps: np.ndarray
    devices_per_host: np.ndarray
    vendor_index: np.ndarray
    kernel_overhead_s: np.ndarray


def _soft_min(a: np.ndarray, b: np.ndarray, k: float) -> np.ndarray:
    return (a ** (-k) + b ** (-k)) ** (-1.0 / k)


def devices_per_host(job: JobArrays, hw: HardwareArrays) -> np.ndarray:
    return job_devices(1.0, job.devices_requested, hw.devices_per_host)


def memory_footprint_gb(job: JobArrays, hw: HardwareArrays) -> np.ndarray:
    """Per-device memory a job needs on a type (GB); it is eligible where this fits."""
    n_dev = job.num_trainers * devices_per_host(job, hw)
    model_split = job.tensor_parallel * job.pipeline_parallel
    value_bytes = np.where(job.low_precision, 2.0, 4.0)
    dense = job.dense_params * (value_bytes + job.optimizer_state_bytes) / model_split
    replicated = job.sharding_comm == 0.0
    embedding = job.embedding_params * 8.0 / np.where(replicated, 1.0, n_dev)
    per_device_batch = np.maximum(job.batch_size / devices_per_host(job, hw), 1.0)
    keep = np.where(job.activation_checkpointing, 0.25, 1.0)
    activations = job.activation_bytes_per_sample * per_device_batch * keep * 2.0 / model_split
    return (dense + embedding + activations) / 1e9 + 1.5  # runtime context


def _throughput(job: JobArrays, hw: HardwareArrays, vendor_eff: np.ndarray) -> np.ndarray:
    dph = devices_per_host(job, hw)
    n_dev = job.num_trainers * dph
    model_split = job.tensor_parallel * job.pipeline_parallel
    replicas = np.maximum(n_dev / model_split, 1.0)
    per_device_batch = np.maximum(job.batch_size / dph, 1.0)

    peak = np.where(job.low_precision, hw.peak_bf16_tflops, hw.peak_fp32_tflops) * 1e12
    tokens = per_device_batch * job.tokens_per_sample
    half_fill = 24.0 * hw.compute_units  # tokens a device needs in flight to reach half its rate
    utilisation = tokens / (tokens + half_fill)
    recompute = np.where(job.activation_checkpointing, 4.0 / 3.0, 1.0)
    work = 3.0 * job.flops_per_sample * per_device_batch * recompute / model_split
    t_compute = work / (peak * BASE_MFU * vendor_eff * utilisation)
    bandwidth = hw.memory_bandwidth_gbps * 1e9
    t_memory = (
        per_device_batch
        / model_split
        * (
            3.0 * job.activation_bytes_per_sample / (bandwidth * MEMORY_EFFICIENCY)
            + EMBEDDING_TRAFFIC_FACTOR
            * job.embedding_bytes_per_sample
            / (np.sqrt(bandwidth * REFERENCE_BANDWIDTH) * EMBEDDING_ACCESS_EFFICIENCY)
        )
    )
    t_device = (t_compute**3 + t_memory**3) ** (
        1.0 / 3.0
    ) + job.kernels_per_step * hw.kernel_overhead_s
    t_device = t_device + STEP_HOST_OVERHEAD_S

    link = (
        np.where(
            job.num_trainers > 1,
            np.minimum(hw.intra_node_bandwidth_gbps, hw.inter_node_bandwidth_gbps),
            hw.intra_node_bandwidth_gbps,
        )
        * 1e9
        * 0.8
    )
    ring = (replicas - 1.0) / replicas
    grad_bytes = 2.0 * 2.0 * job.dense_params / model_split * ring
    a2a_bytes = (
        4.0 * per_device_batch * job.num_sparse_features * job.embedding_dim * (n_dev - 1.0) / n_dev
    )
    t_exchange = (grad_bytes + a2a_bytes * job.sharding_comm) / link
    tp_bytes = np.where(
        job.tensor_parallel > 1,
        8.0 * job.transformer_layers * per_device_batch * job.seq_len * job.d_model,
        0.0,
    )
    t_tp = tp_bytes / (hw.intra_node_bandwidth_gbps * 1e9 * 0.8)
    bubble = (job.pipeline_parallel - 1.0) / (PIPELINE_MICROBATCHES + job.pipeline_parallel - 1.0)
    step = t_device / (1.0 - bubble) + COMM_EXPOSED * t_exchange + t_tp

    q_devices = replicas * per_device_batch / step
    q_readers = job.num_readers * job.reader_rate
    return _soft_min(q_devices, q_readers, 6.0) * job.hidden_efficiency


def _as_column(job: JobArrays) -> JobArrays:
    return JobArrays(
        **{k: (v if k == "vendor_efficiency" else v[:, None]) for k, v in job.__dict__.items()}
    )


def paired_throughput(job: JobArrays, hw: HardwareArrays) -> np.ndarray:
    """Noise-free samples/s of job i on hardware row i (shape (n,))."""
    vendor_eff = job.vendor_efficiency[np.arange(len(job.batch_size)), hw.vendor_index]
    return _throughput(job, hw, vendor_eff)


def cross_memory_footprint_gb(job: JobArrays, hw: HardwareArrays) -> np.ndarray:
    """Per-device memory of every job on every type (shape (n_jobs, n_types))."""
    return memory_footprint_gb(_as_column(job), hw)
