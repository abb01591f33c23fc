"""Feature extraction: one implementation, used unchanged by training and by serving.

A feature row describes one launch on one hardware type. Its inputs are only what a launcher has at
submission time: the launch config (job attempt columns of the data contract), the hardware spec
table, and a history snapshot from earlier days. Training calls ``build_features`` on the feature
table's attempts (the type each ran on); serving calls it on one launch repeated per candidate type.

Every feature name starts with its group prefix so importance can be grouped (paper Figure 4):
``job_`` job scale, ``cfg_`` launch arguments and config, ``hw_`` hardware specs, ``ratio_``
throughput-ratio features, ``arch_`` architecture summaries, ``hist_`` job-family history.
Missing optional launch fields become NaN, which the trees route explicitly; never a silent zero.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import polars as pl

from .architecture import ARCHITECTURE_SUMMARY_KEYS, ModelDefinitionError, summarize
from .contract import HARDWARE_SPEC_COLUMNS, schema
from .history import HISTORY_FEATURES, history_features

JOB_FEATURES: tuple[str, ...] = (
    "job_num_trainers",
    "job_batch_size",
    "job_num_readers",
    "job_tensor_parallel",
    "job_pipeline_parallel",
    "job_devices",
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
    *HARDWARE_FEATURES,
    "ratio_global_batch",
    "hist_count",
    "hist_cold_start",
    "hist_hw_count",
)

# Launch-config columns extraction reads; anything else a caller passes is ignored.
LAUNCH_COLUMNS: tuple[str, ...] = (
    "job_name",
    "model_type",
    "ds",
    "hardware_type",
    "num_trainers",
    "batch_size",
    "num_readers",
    "precision",
    "tensor_parallel",
    "pipeline_parallel",
    "embedding_sharding",
    "num_sparse_features",
    "num_dense_features",
    "hash_size",
    "seq_len",
    "training_days",
    "optimizer",
    "activation_checkpointing",
    "package_version",
    "model_definition",
)

_SHARDING_CODES = {"table": 0.0, "row": 1.0, "column": 2.0, "data": 3.0}
_BYTES_PER_VALUE = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}


def category_code(value: str | None) -> float | None:
    """A stable numeric code for a free-form category (same across processes and versions)."""
    if value is None:
        return None
    return float(zlib.crc32(value.encode()) % 65_536)


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


def _architecture_table(launches: pl.DataFrame) -> pl.DataFrame:
    """Summaries per distinct (definition, sizes, precision): the Python work runs once per key."""
    keys = ["model_definition", "num_sparse_features", "num_dense_features", "hash_size"]
    keys += ["seq_len", "precision"]
    distinct = launches.select(keys).unique(maintain_order=True)
    rows = []
    for key in distinct.iter_rows(named=True):
        summary: dict[str, float | None]
        try:
            summary = summarize(
                key["model_definition"],
                num_sparse_features=key["num_sparse_features"] or 0,
                num_dense_features=key["num_dense_features"] or 0,
                hash_size=key["hash_size"] or 0,
                seq_len=key["seq_len"] or 0,
                bytes_per_value=int(_BYTES_PER_VALUE.get(key["precision"] or "", 4.0)),
            )
        except (ModelDefinitionError, TypeError):
            # no usable definition: the architecture features are unknown, not zero
            summary = dict.fromkeys(ARCHITECTURE_SUMMARY_KEYS)
        rows.append({**key, **{f"arch_{k}": v for k, v in summary.items()}})
    schema = {**distinct.schema, **{name: pl.Float64 for name in ARCHITECTURE_FEATURES}}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _log(expr: pl.Expr) -> pl.Expr:
    return pl.when(expr > 0).then(expr.log()).otherwise(None)


def build_features(
    launches: pl.DataFrame, hardware_specs: pl.DataFrame, history: pl.DataFrame
) -> pl.DataFrame:
    """Feature rows (``FEATURE_COLUMNS``, all Float64) for launches, one per input row, in order.

    ``launches`` carries ``LAUNCH_COLUMNS`` (optional fields may be absent) with ``hardware_type``
    the type to predict for; ``history`` is the matching ``history_features`` rows (use
    ``launch_features`` to compute them from a snapshot).
    """
    launches = _with_launch_columns(launches)
    unknown = set(launches["hardware_type"].unique().to_list()) - set(
        hardware_specs["hardware_type"].to_list()
    )
    if unknown:
        raise ValueError(f"hardware_type {sorted(unknown)} not in the hardware spec table")
    if history.height != launches.height:
        raise ValueError(f"history has {history.height} rows for {launches.height} launches")
    specs = hardware_specs.select(
        "hardware_type",
        *(pl.col(c).cast(pl.Float64).alias(f"hw_{c}") for c in HARDWARE_SPEC_COLUMNS),
        hw_vendor_code=pl.col("vendor").map_elements(category_code, return_dtype=pl.Float64),
    )
    arch = _architecture_table(launches)
    keys = [c for c in arch.columns if not c.startswith("arch_")]
    rows = (
        launches.with_row_index("_row")
        .join(specs, on="hardware_type", how="left")
        .join(arch, on=keys, how="left", nulls_equal=True)
        .sort("_row")
    )
    f64 = pl.Float64
    bytes_per_value = pl.col("precision").replace_strict(
        _BYTES_PER_VALUE, default=None, return_dtype=f64
    )
    trainers = pl.col("num_trainers").cast(f64)
    devices = trainers * pl.col("hw_devices_per_host")
    global_batch = trainers * pl.col("batch_size").cast(f64)
    peak_tflops = pl.when(bytes_per_value == 2.0).then(pl.col("hw_peak_bf16_tflops"))
    peak_tflops = peak_tflops.otherwise(pl.col("hw_peak_fp32_tflops"))
    step_flops = 3.0 * pl.col("arch_flops_per_sample") * global_batch
    step_bytes = (
        3.0 * pl.col("arch_activation_bytes_per_sample") + pl.col("arch_embedding_bytes_per_sample")
    ) * global_batch
    ridge = peak_tflops * 1e12 / (pl.col("hw_memory_bandwidth_gbps") * 1e9)
    gradient_bytes = pl.col("arch_dense_params") * bytes_per_value
    embedding_bytes = pl.col("arch_embedding_params") * bytes_per_value
    features = rows.select(
        job_num_trainers=trainers,
        job_batch_size=pl.col("batch_size").cast(f64),
        job_num_readers=pl.col("num_readers").cast(f64),
        job_tensor_parallel=pl.col("tensor_parallel").cast(f64),
        job_pipeline_parallel=pl.col("pipeline_parallel").cast(f64),
        job_devices=devices,
        job_training_days=pl.col("training_days").cast(f64),
        cfg_bytes_per_value=bytes_per_value,
        cfg_precision_fp16=(pl.col("precision") == "fp16").cast(f64),
        cfg_sharding_code=pl.col("embedding_sharding").replace_strict(
            _SHARDING_CODES, default=None, return_dtype=f64
        ),
        cfg_optimizer_code=pl.col("optimizer").map_elements(category_code, return_dtype=f64),
        cfg_activation_checkpointing=pl.col("activation_checkpointing").cast(f64),
        cfg_package_version=pl.col("package_version").map_elements(
            package_version_number, return_dtype=f64
        ),
        cfg_num_sparse_features=pl.col("num_sparse_features").cast(f64),
        cfg_num_dense_features=pl.col("num_dense_features").cast(f64),
        cfg_log_hash_size=pl.col("hash_size").cast(f64).log1p(),
        cfg_seq_len=pl.col("seq_len").cast(f64),
        **{name: pl.col(name) for name in HARDWARE_FEATURES},
        ratio_global_batch=global_batch,
        ratio_readers_per_trainer=pl.col("num_readers").cast(f64) / trainers,
        ratio_batch_per_device=pl.col("batch_size").cast(f64) / pl.col("hw_devices_per_host"),
        ratio_log_step_compute_s=_log(step_flops / (devices * peak_tflops * 1e12)),
        ratio_log_step_memory_s=_log(
            step_bytes / (devices * pl.col("hw_memory_bandwidth_gbps") * 1e9)
        ),
        ratio_log_step_allreduce_s=_log(
            2.0 * gradient_bytes / (pl.col("hw_inter_node_bandwidth_gbps") * 1e9)
        ),
        ratio_intensity_over_ridge=pl.col("arch_arithmetic_intensity") / ridge,
        ratio_embedding_memory_share=embedding_bytes / (devices * pl.col("hw_memory_gb") * 1e9),
        **{name: pl.col(name) for name in ARCHITECTURE_FEATURES},
    )
    features = pl.concat([features, history.select(HISTORY_FEATURES)], how="horizontal")
    # inf/NaN from a zero denominator become missing values, one representation for "unknown"
    return features.select(
        pl.when(pl.col(c).is_finite()).then(pl.col(c)).otherwise(None).cast(f64).alias(c)
        for c in FEATURE_COLUMNS
    )


def launch_features(
    launches: pl.DataFrame, hardware_specs: pl.DataFrame, snapshot: pl.DataFrame
) -> pl.DataFrame:
    """Features of launches on day D from the history snapshot as of D-1: the serving path."""
    launches = _with_launch_columns(launches)
    return build_features(launches, hardware_specs, history_features(launches, snapshot))


def expand_candidates(launch: dict, candidates: Iterable[str]) -> pl.DataFrame:
    """One launch row per candidate hardware type, typed as the contract types the columns."""
    contract = schema("job_attempts")
    types = list(candidates)
    row = {c: launch.get(c) for c in LAUNCH_COLUMNS if c != "hardware_type"}
    return pl.DataFrame(
        [{**row, "hardware_type": hw} for hw in types],
        schema={c: contract[c] for c in LAUNCH_COLUMNS},
        orient="row",
    )


def _with_launch_columns(launches: pl.DataFrame) -> pl.DataFrame:
    contract = schema("job_attempts")
    missing = [c for c in LAUNCH_COLUMNS if c not in launches.columns]
    return launches.with_columns(pl.lit(None, dtype=contract[c]).alias(c) for c in missing)
