"""Measured operator latencies (``public-data/neusight-kernels``), read as the kernel model
(``leap_serving.launch.kernel_efficiency``) takes them: one row per operator with its
``hardware_type``, and a spec table in the contract's columns for the GPUs that ran them.

The GPUs are named as NeuSight's collector saw them (``Tesla T4``, ``NVIDIA L4``); their specs
come from NeuSight's own device files, turned into ``HARDWARE_SPEC_COLUMNS`` units, so the
kernel model learns from the same spec columns a fleet's table gives it for a type it has not
run.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

KERNEL_SET = Path(__file__).resolve().parents[2] / "public-data" / "neusight-kernels"
# NeuSight's device file field -> the contract's spec column, and the factor between units
DEVICE_FIELDS = {
    "SingleFLOPs": ("peak_fp32_tflops", 1e-3),  # GFLOP/s -> TFLOP/s
    "Mem_Bw": ("memory_bandwidth_gbps", 1.0),
    "Num_Sm": ("compute_units", 1.0),
    "Freq": ("clock_mhz", 1.0),
    "L2Cache": ("l2_cache_mb", 1.0),
    "Dev_Mem": ("memory_gb", 1.0),
}


def read_kernel_set(folder: str | Path = KERNEL_SET) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(operators, specs): ``kernels.parquet`` with a ``hardware_type`` column, and one spec
    row per GPU of ``devices.csv``. A folder without them is a ``ValueError`` naming it."""
    folder = Path(folder)
    missing = [n for n in ("kernels.parquet", "devices.csv") if not (folder / n).exists()]
    if missing:
        raise ValueError(f"kernel set {folder}: {', '.join(missing)} missing (see its README)")
    ops = pl.read_parquet(folder / "kernels.parquet").with_columns(
        hardware_type=pl.col("device").cast(pl.String)
    )
    devices = pl.read_csv(folder / "devices.csv")
    specs = devices.select(
        hardware_type=pl.col("Device"),
        **{
            column: pl.col(field).cast(pl.Float64) * factor
            for field, (column, factor) in DEVICE_FIELDS.items()
        },
    )
    return ops, specs
