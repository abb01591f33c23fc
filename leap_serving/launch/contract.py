"""The data contract: the three sources every fleet provides, defined once.

The simulator writes exactly these columns, file adapters validate against them, and feature
extraction reads nothing else. Units are part of the contract: throughput in samples per second,
durations in seconds, memory in GB, bandwidth in GB/s, cost in US dollars per device-hour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class Column:
    name: str
    dtype: pl.DataType
    required: bool
    unit: str
    description: str


# The twelve numeric hardware specifications (paper section 2.1). Order is the feature order.
HARDWARE_SPEC_COLUMNS: tuple[str, ...] = (
    "peak_fp32_tflops",
    "peak_bf16_tflops",
    "memory_gb",
    "memory_bandwidth_gbps",
    "l2_cache_mb",
    "compute_units",
    "clock_mhz",
    "intra_node_bandwidth_gbps",
    "inter_node_bandwidth_gbps",
    "process_node_nm",
    "tdp_watts",
    "devices_per_host",
)

_SPEC_UNITS = {
    "peak_fp32_tflops": "TFLOP/s",
    "peak_bf16_tflops": "TFLOP/s",
    "memory_gb": "GB",
    "memory_bandwidth_gbps": "GB/s",
    "l2_cache_mb": "MB",
    "compute_units": "count",
    "clock_mhz": "MHz",
    "intra_node_bandwidth_gbps": "GB/s per device",
    "inter_node_bandwidth_gbps": "GB/s per device",
    "process_node_nm": "nm",
    "tdp_watts": "W",
    "devices_per_host": "count",
}

HARDWARE_SPECS: tuple[Column, ...] = (
    Column("hardware_type", pl.String(), True, "", "name of the accelerator type"),
    Column("vendor", pl.String(), True, "", "vendor identifier"),
    *(
        Column(name, pl.Float64(), True, _SPEC_UNITS[name], "hardware specification")
        for name in HARDWARE_SPEC_COLUMNS
    ),
    Column("hourly_cost_usd", pl.Float64(), True, "USD per device-hour", "internal price"),
    Column("premium", pl.Boolean(), True, "", "premium types are routed to only when efficient"),
    Column("available_from", pl.Date(), True, "date", "first day the type runs jobs"),
)

JOB_ATTEMPTS: tuple[Column, ...] = (
    Column("attempt_id", pl.String(), True, "", "unique id of one attempt"),
    Column("job_name", pl.String(), True, "", "raw job name, with run-specific identifiers"),
    Column("model_type", pl.String(), True, "", "production model type"),
    Column("ds", pl.Date(), True, "date", "day partition of the launch"),
    Column("launch_ts", pl.Datetime("us"), True, "UTC", "launch timestamp"),
    Column("hardware_type", pl.String(), True, "", "hardware type the attempt ran on"),
    Column(
        "candidate_hardware",
        pl.List(pl.String()),
        True,
        "",
        "eligible hardware types at launch (in CSV: separated by ';')",
    ),
    Column("num_trainers", pl.Int64(), True, "hosts", "trainer hosts of the job"),
    Column("batch_size", pl.Int64(), True, "samples", "per-trainer batch size"),
    Column(
        "requested_devices_per_host",
        pl.Int64(),
        False,
        "devices",
        "accelerators per host the launch asks for, capped by the type's host size (absent: "
        "whole hosts); the job's devices in its features and its cost",
    ),
    Column("num_readers", pl.Int64(), False, "count", "data-reader workers"),
    Column("precision", pl.String(), False, "", "fp32, bf16 or fp16"),
    Column("tensor_parallel", pl.Int64(), False, "devices", "tensor-parallel degree"),
    Column("pipeline_parallel", pl.Int64(), False, "stages", "pipeline-parallel degree"),
    Column("embedding_sharding", pl.String(), False, "", "table, row, column or data"),
    Column("num_sparse_features", pl.Int64(), False, "count", "sparse (categorical) inputs"),
    Column("num_dense_features", pl.Int64(), False, "count", "dense (float) inputs"),
    Column("hash_size", pl.Int64(), False, "rows", "total embedding-table rows"),
    Column("seq_len", pl.Int64(), False, "tokens", "sequence length, 0 if none"),
    Column("training_days", pl.Int64(), False, "days", "days of data the job trains on"),
    Column("optimizer", pl.String(), False, "", "optimizer name"),
    Column("activation_checkpointing", pl.Boolean(), False, "", "recompute activations"),
    Column("package_version", pl.String(), False, "", "training package version"),
    Column("model_definition", pl.String(), False, "JSON", "layer list of the model"),
    Column("status", pl.String(), True, "", "succeeded, failed or preempted"),
    Column("throughput", pl.Float64(), False, "samples/s", "measured; the label"),
    Column("duration_s", pl.Float64(), False, "s", "wall time of the attempt"),
)

ALLOCATIONS: tuple[Column, ...] = (
    Column("attempt_id", pl.String(), True, "", "attempt the allocation served"),
    Column("num_hosts", pl.Int64(), True, "hosts", "provisioned hosts"),
    Column("devices_per_host", pl.Int64(), True, "devices", "provisioned accelerators per host"),
    Column("cpu_cores", pl.Int64(), False, "cores", "CPU cores per host"),
    Column("host_memory_gb", pl.Float64(), False, "GB", "host memory per host"),
    Column("server_subtype", pl.String(), False, "", "server generation of the hosts"),
)

SOURCES: dict[str, tuple[Column, ...]] = {
    "job_attempts": JOB_ATTEMPTS,
    "allocations": ALLOCATIONS,
    "hardware_specs": HARDWARE_SPECS,
}

STATUSES: tuple[str, ...] = ("succeeded", "failed", "preempted")


def job_devices(
    num_trainers: ArrayLike, requested_devices_per_host: ArrayLike | None, host_size: ArrayLike
) -> np.ndarray:
    """The devices a job occupies on a hardware type, and so pays for: its trainers times the
    devices per host it asks for, capped by the type's host size (``devices_per_host`` of the
    spec table); a launch that does not say takes whole hosts. The one definition the ranker's
    cost, the simulator's oracle and the routing simulation share."""
    host = np.asarray(host_size, dtype=np.float64)
    if requested_devices_per_host is None:
        per_host = host
    else:
        requested = np.asarray(requested_devices_per_host, dtype=np.float64)
        per_host = np.where(np.isnan(requested), host, np.minimum(requested, host))
    return np.asarray(num_trainers, dtype=np.float64) * per_host


def schema(source: str) -> pl.Schema:
    """The polars schema of one source, in contract column order."""
    try:
        columns = SOURCES[source]
    except KeyError:
        raise ValueError(f"source={source!r} is not one of {sorted(SOURCES)}") from None
    return pl.Schema({c.name: c.dtype for c in columns})


def required_columns(source: str) -> list[str]:
    """Columns a file of this source must carry; the rest may be missing."""
    schema(source)
    return [c.name for c in SOURCES[source] if c.required]
