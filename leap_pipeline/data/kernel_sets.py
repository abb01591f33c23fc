"""Measured operator latencies (``public-data/neusight-kernels``), read as the kernel model
(``leap_serving.launch.kernel_efficiency``) takes them: one row per operator with its
``hardware_type``, and a spec table in the contract's columns for the GPUs that ran them.

The GPUs are named as NeuSight's collector saw them (``Tesla T4``, ``NVIDIA L4``); their specs
come from NeuSight's own device files, turned into ``HARDWARE_SPEC_COLUMNS`` units, so the
kernel model learns from the same spec columns a fleet's table gives it for a type it has not
run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
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


# each measured GPU's chip: a fleet's type of the same chip (another board, memory size or
# name) is the same GPU to the kernels, so holding a type out holds out every GPU of its chip
KERNEL_CHIPS = {
    "Tesla P4": "p4",
    "Tesla T4": "t4",
    "Tesla P100-PCIE-16GB": "p100",
    "Tesla V100-PCIE-32GB": "v100",
    "NVIDIA A100-PCIE-40GB": "a100",
    "NVIDIA A100-SXM4-40GB": "a100",
    "NVIDIA A100 80GB PCIe": "a100",
    "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA L4": "l4",
}


def chip_of(hardware_type: str) -> str | None:
    """The measured chip a fleet's type name names (``V100-16GB``: v100; ``L40S``: none, not
    the L4; ``P40``: none, not the P4), or None."""
    name = hardware_type.lower()
    for chip in dict.fromkeys(KERNEL_CHIPS.values()):
        if re.search(rf"(?<![a-z0-9]){chip}(?![0-9a-z])", name):
            return chip
    return None


def kernel_devices_held(hardware_types: Iterable[str]) -> frozenset[str]:
    """The measured GPUs whose kernels a fold holding ``hardware_types`` out must not learn
    from: every GPU of each held type's chip."""
    chips = {chip_of(t) for t in hardware_types} - {None}
    return frozenset(device for device, chip in KERNEL_CHIPS.items() if chip in chips)


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
