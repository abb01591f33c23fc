"""Feature extraction: one implementation, used unchanged by training and by serving.

A feature row describes one launch on one hardware type. Its inputs are only what a launcher has at
submission time: the launch config (job attempt columns of the data contract), the hardware spec
table, and a history snapshot from earlier days. Training calls ``build_features`` on the feature
table's attempts (the type each ran on); serving calls it on one launch repeated per candidate type.

Every feature name starts with its group prefix so importance can be grouped (paper Figure 4):
``job_`` job scale, ``cfg_`` launch arguments and config, ``hw_`` hardware specs, ``ratio_``
throughput-ratio features, ``arch_`` architecture summaries, ``cost_`` the per-layer cost model's
prior and its components (``cost_model``), ``hist_`` job-family history.
Missing optional launch fields become NaN, which the trees route explicitly; never a silent zero.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import polars as pl

from .architecture import ARCHITECTURE_SUMMARY_KEYS, ModelDefinitionError, summarize
from .contract import HARDWARE_SPEC_COLUMNS, job_devices, schema
from .cost_model import COST_FEATURES, step_costs
from .history import HISTORY_FEATURES, HistoryIndex, history_columns
from .rows import LAUNCH_COLUMNS, LaunchRows, launch_rows
from .specs import SpecTable, category_code, spec_table

JOB_FEATURES: tuple[str, ...] = (
    "job_num_trainers",
    "job_batch_size",
    "job_num_readers",
    "job_tensor_parallel",
    "job_pipeline_parallel",
    "job_devices",
    "job_devices_per_host",
    "job_training_days",
)
CONFIG_FEATURES: tuple[str, ...] = (
    "cfg_bytes_per_value",
    "cfg_precision_fp16",
    "cfg_sharding_code",
    "cfg_optimizer_code",
    "cfg_activation_checkpointing",
    "cfg_package_version",
    "cfg_num_sparse_features",
    "cfg_num_dense_features",
    "cfg_log_hash_size",
    "cfg_seq_len",
)
HARDWARE_FEATURES: tuple[str, ...] = (
    *(f"hw_{name}" for name in HARDWARE_SPEC_COLUMNS),
    "hw_vendor_code",
)
RATIO_FEATURES: tuple[str, ...] = (
    "ratio_global_batch",
    "ratio_readers_per_trainer",
    "ratio_batch_per_device",
    "ratio_log_step_compute_s",
    "ratio_log_step_memory_s",
    "ratio_log_step_allreduce_s",
    "ratio_intensity_over_ridge",
    "ratio_embedding_memory_share",
)
ARCHITECTURE_FEATURES: tuple[str, ...] = tuple(f"arch_{k}" for k in ARCHITECTURE_SUMMARY_KEYS)

FEATURE_GROUPS: dict[str, tuple[str, ...]] = {
    "job": JOB_FEATURES,
    "cfg": CONFIG_FEATURES,
    "hw": HARDWARE_FEATURES,
    "ratio": RATIO_FEATURES,
    "arch": ARCHITECTURE_FEATURES,
    "cost": COST_FEATURES,
    "hist": HISTORY_FEATURES,
}
FEATURE_COLUMNS: tuple[str, ...] = tuple(
    name for group in FEATURE_GROUPS.values() for name in group
)

# Features every row has whatever optional launch fields are missing (asset checks hold them).
ALWAYS_PRESENT_FEATURES: tuple[str, ...] = (
    "job_num_trainers",
    "job_batch_size",
    "job_devices",
    "job_devices_per_host",
    *HARDWARE_FEATURES,
    "ratio_global_batch",
    "hist_count",
    "hist_cold_start",
    "hist_hw_count",
)

# built once: a polars Schema costs tens of microseconds, and serving builds rows on every launch
_LAUNCH_SCHEMA: dict[str, pl.DataType] = {c: schema("job_attempts")[c] for c in LAUNCH_COLUMNS}

_SHARDING_CODES = {"table": 0.0, "row": 1.0, "column": 2.0, "data": 3.0}
_BYTES_PER_VALUE = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}


def package_version_number(version: str | None) -> float | None:
    """``4.5.1`` -> 40501.0, so newer packages compare greater; unparseable -> None."""
    if version is None:
        return None
    parts = version.split(".")[:3]
    try:
        numbers = [int(p) for p in parts] + [0] * (3 - len(parts))
    except ValueError:
        return None
    return float(numbers[0] * 10_000 + numbers[1] * 100 + numbers[2])


@functools.lru_cache(maxsize=4096)
def _architecture(
    definition: str | None,
    num_sparse_features: int | None,
    num_dense_features: int | None,
    hash_size: int | None,
    seq_len: int | None,
    bytes_per_value: float,
) -> tuple[float, ...]:
    """Architecture summary of one (definition, sizes, precision), cached: model types repeat."""
    try:
        summary = summarize(
            definition,
            num_sparse_features=num_sparse_features or 0,
            num_dense_features=num_dense_features or 0,
            hash_size=hash_size or 0,
            seq_len=seq_len or 0,
            bytes_per_value=int(bytes_per_value),
        )
    except (ModelDefinitionError, TypeError):
        # no usable definition: the architecture features are unknown, not zero
        return (np.nan,) * len(ARCHITECTURE_SUMMARY_KEYS)
    return tuple(summary[k] for k in ARCHITECTURE_SUMMARY_KEYS)


def _codes(values: list, mapping: dict | None = None, code=None) -> np.ndarray:
    """A category column as float codes via ``mapping`` or ``code``; unknown or missing: NaN."""
    cache: dict = {}
    out = np.empty(len(values))
    for i, value in enumerate(values):
        if value not in cache:
            found = mapping.get(value) if mapping is not None else code(value)
            cache[value] = np.nan if found is None else found
        out[i] = cache[value]
    return out


def _safe_log(values: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, np.log(np.where(values > 0, values, 1.0)), np.nan)


def build_features(
    launches: pl.DataFrame | LaunchRows,
    hardware_specs: pl.DataFrame | SpecTable,
    history: pl.DataFrame | dict[str, np.ndarray],
) -> pl.DataFrame:
    """Feature rows (``FEATURE_COLUMNS``, all Float64, null for unknown) for launches, one per
    input row, in order: ``feature_matrix`` as a frame."""
    matrix = feature_matrix(launches, hardware_specs, history)
    return pl.DataFrame(
        [pl.Series(name, matrix[:, j], nan_to_null=True) for j, name in enumerate(FEATURE_COLUMNS)]
    )


def feature_matrix(
    launches: pl.DataFrame | LaunchRows,
    hardware_specs: pl.DataFrame | SpecTable,
    history: pl.DataFrame | dict[str, np.ndarray],
) -> np.ndarray:
    """The feature rows as a float64 matrix, NaN for unknown, columns in ``FEATURE_COLUMNS`` order.

    ``launches`` carries ``LAUNCH_COLUMNS`` (optional fields may be absent) with ``hardware_type``
    the type to predict for; ``history`` is the matching ``history_features`` rows or
    ``history_columns`` arrays. Column arithmetic in numpy: the same code costs microseconds for
    one launch's candidates and seconds for a month of attempts.
    """
    rows = launch_rows(launches)
    history_rows = (
        history.height if isinstance(history, pl.DataFrame) else (len(history[HISTORY_FEATURES[0]]))
    )
    if history_rows != rows.height:
        raise ValueError(f"history has {history_rows} rows for {rows.height} launches")
    specs = spec_table(hardware_specs)
    hardware = rows.values("hardware_type")
    unknown = sorted({hw for hw in hardware if hw not in specs.row}, key=str)
    if unknown:
        raise ValueError(f"hardware_type {unknown} not in the hardware spec table")
    take = np.fromiter((specs.row[hw] for hw in hardware), dtype=np.int64, count=len(hardware))
    taken = specs.matrix[take]
    spec = {c: taken[:, j] for j, c in enumerate(HARDWARE_SPEC_COLUMNS)}
    vendor = taken[:, -1]

    f: dict[str, np.ndarray] = {}
    trainers = rows.numbers("num_trainers")
    batch = rows.numbers("batch_size")
    readers = rows.numbers("num_readers")
    precision = rows.values("precision")
    bytes_per_value = _codes(precision, _BYTES_PER_VALUE)
    requested = rows.numbers("requested_devices_per_host")
    devices = job_devices(trainers, requested, spec["devices_per_host"])
    per_host = job_devices(1.0, requested, spec["devices_per_host"])
    global_batch = trainers * batch
    f["job_num_trainers"] = trainers
    f["job_batch_size"] = batch
    f["job_num_readers"] = readers
    f["job_tensor_parallel"] = rows.numbers("tensor_parallel")
    f["job_pipeline_parallel"] = rows.numbers("pipeline_parallel")
    f["job_devices"] = devices
    f["job_devices_per_host"] = per_host
    f["job_training_days"] = rows.numbers("training_days")
    f["cfg_bytes_per_value"] = bytes_per_value
    f["cfg_precision_fp16"] = _codes(precision, {"fp16": 1.0, "fp32": 0.0, "bf16": 0.0})
    f["cfg_sharding_code"] = _codes(rows.values("embedding_sharding"), _SHARDING_CODES)
    f["cfg_optimizer_code"] = _codes(rows.values("optimizer"), code=category_code)
    f["cfg_activation_checkpointing"] = rows.numbers("activation_checkpointing")
    f["cfg_package_version"] = _codes(rows.values("package_version"), code=package_version_number)
    f["cfg_num_sparse_features"] = rows.numbers("num_sparse_features")
    f["cfg_num_dense_features"] = rows.numbers("num_dense_features")
    f["cfg_log_hash_size"] = np.log1p(rows.numbers("hash_size"))
    f["cfg_seq_len"] = rows.numbers("seq_len")
    for c in HARDWARE_SPEC_COLUMNS:
        f[f"hw_{c}"] = spec[c]
    f["hw_vendor_code"] = vendor

    keys = zip(
        rows.values("model_definition"),
        rows.values("num_sparse_features"),
        rows.values("num_dense_features"),
        rows.values("hash_size"),
        rows.values("seq_len"),
        # an unknown precision sizes values as fp32 in the summary (the feature itself stays NaN)
        [b if b == b else 4.0 for b in bytes_per_value.tolist()],
        strict=True,
    )
    arch_rows = [_architecture(*key) for key in keys]
    arch = (
        np.array(arch_rows, dtype=np.float64)
        if arch_rows
        else np.empty((0, len(ARCHITECTURE_SUMMARY_KEYS)))
    )
    a = {k: arch[:, j] for j, k in enumerate(ARCHITECTURE_SUMMARY_KEYS)}

    with np.errstate(divide="ignore", invalid="ignore"):
        peak_tflops = np.where(
            bytes_per_value == 2.0, spec["peak_bf16_tflops"], spec["peak_fp32_tflops"]
        )
        step_flops = 3.0 * a["flops_per_sample"] * global_batch
        step_bytes = (
            3.0 * a["activation_bytes_per_sample"] + a["embedding_bytes_per_sample"]
        ) * global_batch
        ridge = peak_tflops * 1e12 / (spec["memory_bandwidth_gbps"] * 1e9)
        f["ratio_global_batch"] = global_batch
        f["ratio_readers_per_trainer"] = readers / trainers
        f["ratio_batch_per_device"] = batch / per_host
        f["ratio_log_step_compute_s"] = _safe_log(step_flops / (devices * peak_tflops * 1e12))
        f["ratio_log_step_memory_s"] = _safe_log(
            step_bytes / (devices * spec["memory_bandwidth_gbps"] * 1e9)
        )
        f["ratio_log_step_allreduce_s"] = _safe_log(
            2.0 * a["dense_params"] * bytes_per_value / (spec["inter_node_bandwidth_gbps"] * 1e9)
        )
        f["ratio_intensity_over_ridge"] = a["arithmetic_intensity"] / ridge
        f["ratio_embedding_memory_share"] = (
            a["embedding_params"] * bytes_per_value / (devices * spec["memory_gb"] * 1e9)
        )
    for k in ARCHITECTURE_SUMMARY_KEYS:
        f[f"arch_{k}"] = a[k]
    f.update(
        step_costs(
            a,
            global_batch=global_batch,
            hosts=trainers,
            devices=devices,
            tensor_parallel=f["job_tensor_parallel"],
            pipeline_parallel=f["job_pipeline_parallel"],
            bytes_per_value=bytes_per_value,
            optimizer_known=np.array([o is not None for o in rows.values("optimizer")], dtype=bool),
            spec=spec,
        )
    )
    for name in HISTORY_FEATURES:
        values = history[name]
        f[name] = values.cast(pl.Float64).to_numpy() if isinstance(values, pl.Series) else values
    # one array of the columns, then rows: a third of column_stack's time for a ranking's rows
    matrix = np.ascontiguousarray(
        np.array([f[name] for name in FEATURE_COLUMNS], dtype=np.float64)
        .reshape(len(FEATURE_COLUMNS), len(take))
        .T
    )
    # inf from a zero denominator becomes missing too: one representation for "unknown"
    matrix[~np.isfinite(matrix)] = np.nan
    return matrix


def launch_features(
    launches: pl.DataFrame | LaunchRows,
    hardware_specs: pl.DataFrame | SpecTable,
    snapshot: pl.DataFrame | HistoryIndex,
) -> pl.DataFrame:
    """Features of launches on day D from the history snapshot as of D-1 (or its index, which
    serving builds once per model, as it does the spec table): the serving path."""
    rows, specs = launch_rows(launches), spec_table(hardware_specs)
    return build_features(rows, specs, history_columns(rows, snapshot, specs))


def launch_matrix(
    launches: pl.DataFrame | LaunchRows,
    hardware_specs: pl.DataFrame | SpecTable,
    snapshot: pl.DataFrame | HistoryIndex,
) -> np.ndarray:
    """``launch_features`` as the matrix a model reads, without building a frame (serving)."""
    rows, specs = launch_rows(launches), spec_table(hardware_specs)
    return feature_matrix(rows, specs, history_columns(rows, snapshot, specs))


def expand_candidates(launch: dict, candidates: Iterable[str]) -> pl.DataFrame:
    """One launch row per candidate hardware type, typed as the contract types the columns."""
    types = list(candidates)
    row = {c: launch.get(c) for c in LAUNCH_COLUMNS if c != "hardware_type"}
    return pl.DataFrame(
        [{**row, "hardware_type": hw} for hw in types], schema=_LAUNCH_SCHEMA, orient="row"
    )


_GLOBAL_BATCH = FEATURE_COLUMNS.index("ratio_global_batch")
_STEP_COMPUTE = FEATURE_COLUMNS.index("ratio_log_step_compute_s")
_STEP_MEMORY = FEATURE_COLUMNS.index("ratio_log_step_memory_s")


_COST_LOG_Q = FEATURE_COLUMNS.index("cost_log_q")


def cost_log_q(X: np.ndarray) -> np.ndarray:
    """ln samples/s by the per-layer cost model alone (``cost_model``), from feature rows: NaN
    without an architecture."""
    return X[:, _COST_LOG_Q]


def roofline_log_q(X: np.ndarray) -> np.ndarray:
    """ln samples/s by the roofline alone, from feature rows: the global batch over the slower
    of its step's compute time (at the job's precision's peak) and memory time. A prior that
    knows the job and the types but no measurement; NaN without an architecture."""
    step = np.maximum(X[:, _STEP_COMPUTE], X[:, _STEP_MEMORY])  # NaN if either is unknown
    return _safe_log(X[:, _GLOBAL_BATCH]) - step


# The prior a residual model corrects (``BinnedCascade(target="residual")``): the first
# known of the family's own level on the type, its levels on its other types carried by the
# fleet's measured ratios, by memory bandwidth and by peak compute, the model type's level on the
# type and carried from its other types, and the family's level (a cold start's: its model
# type's or the fleet's). The fleet's ratios first: chosen on Lambda, Sia and NeuSight's rows
# together; leaving one set out chose bandwidth for NeuSight's rows, so its figures for the GBDT
# on this prior are in-sample for it (benchmarks/transfer_choices.py, docs/transfer.md).
PRIOR_COLUMNS: tuple[str, ...] = (
    "hist_xfer_fleet_log_q",
    "hist_xfer_bandwidth_log_q",
    "hist_xfer_compute_log_q",
    "hist_mt_hw_mean_log_q",
    "hist_mt_xfer_fleet_log_q",
    "hist_mean_log_q",
)


def _history_prior(column) -> np.ndarray:
    prior = np.where(column("hist_hw_count") > 0, column("hist_hw_mean_log_q"), np.nan)
    for name in PRIOR_COLUMNS:
        prior = np.where(np.isnan(prior), column(name), prior)
    return prior


def prior_log_q(X: np.ndarray) -> np.ndarray:
    """The best point-in-time estimate of ln q each feature row's history gives (NaN where it
    gives none), in the order of ``PRIOR_COLUMNS`` after the family's own level on the type."""
    return _history_prior(lambda name: X[:, FEATURE_COLUMNS.index(name)])
