"""The hardware spec table arranged for look-ups, as ``HistoryIndex`` arranges a snapshot.

Feature extraction reads each candidate's specs by row; serving prepares this once per loaded
model instead of converting the spec frame's columns on every launch.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
import polars as pl

from .contract import HARDWARE_SPEC_COLUMNS

# spec-ratio transfers: history feature -> the spec whose log-ratio carries a level across types
TRANSFER_SPECS: dict[str, str] = {
    "hist_xfer_compute_log_q": "peak_bf16_tflops",
    "hist_xfer_bandwidth_log_q": "memory_bandwidth_gbps",
}


def category_code(value: str | None) -> float | None:
    """A stable numeric code for a free-form category (same across processes and versions)."""
    if value is None:
        return None
    return float(zlib.crc32(value.encode()) % 65_536)


@dataclass(frozen=True)
class SpecTable:
    row: dict[str, int]  # hardware type -> row of the arrays
    columns: dict[str, np.ndarray]  # each HARDWARE_SPEC_COLUMNS entry as float64 (NaN: unknown)
    vendor_code: np.ndarray
    log_scales: dict[str, dict[str, float]]  # TRANSFER_SPECS feature -> type -> log of the spec

    @property
    def matrix(self) -> np.ndarray:
        """The spec columns side by side (``HARDWARE_SPEC_COLUMNS`` order, then the vendor code),
        built once: a ranking takes its candidates' rows in one indexing instead of one per
        column."""
        found = self.__dict__.get("_matrix")
        if found is None:
            found = np.column_stack(
                [self.columns[c] for c in HARDWARE_SPEC_COLUMNS] + [self.vendor_code]
            ).astype(np.float64)
            object.__setattr__(self, "_matrix", found)
        return found

    @classmethod
    def from_frame(cls, hardware_specs: pl.DataFrame) -> SpecTable:
        types = hardware_specs["hardware_type"].to_list()
        columns = {c: hardware_specs[c].cast(pl.Float64).to_numpy() for c in HARDWARE_SPEC_COLUMNS}
        vendors = [category_code(v) for v in hardware_specs["vendor"].to_list()]
        log_scales = {
            feature: {
                hw: math.log(v)
                for hw, v in zip(types, columns[column].tolist(), strict=True)
                if v > 0  # NaN and non-positive specs carry nothing
            }
            for feature, column in TRANSFER_SPECS.items()
        }
        return cls(
            row={hw: i for i, hw in enumerate(types)},
            columns=columns,
            vendor_code=np.array([np.nan if v is None else v for v in vendors], dtype=float),
            log_scales=log_scales,
        )


def spec_table(hardware_specs: pl.DataFrame | SpecTable) -> SpecTable:
    return (
        hardware_specs
        if isinstance(hardware_specs, SpecTable)
        else SpecTable.from_frame(hardware_specs)
    )
