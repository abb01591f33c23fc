"""The simulated fleet's hardware: public spec-sheet figures for 22 accelerator types.

Specs are rounded vendor figures (dense peak, no sparsity); costs are internal prices per
device-hour. ``LEGACY_CAPACITY`` is how many devices of each type the fleet holds, which the legacy
scheduler's habits follow; it is simulator-only and never part of the spec table.
"""

from __future__ import annotations

import datetime as dt

import polars as pl

from leap_serving.launch.contract import HARDWARE_SPEC_COLUMNS, schema

# name, vendor, 12 specs in HARDWARE_SPEC_COLUMNS order, cost/device-hour, premium, entry day
_CATALOG: tuple[tuple, ...] = (
    ("T4", "nvidia", 8.1, 65, 16, 320, 4, 40, 1590, 32, 12.5, 12, 70, 8, 0.35, False, None),
    (
        "V100-16GB",
        "nvidia",
        15.7,
        125,
        16,
        900,
        6,
        80,
        1530,
        150,
        12.5,
        12,
        300,
        8,
        0.90,
        False,
        None,
    ),
    (
        "V100-32GB",
        "nvidia",
        15.7,
        125,
        32,
        900,
        6,
        80,
        1530,
        150,
        12.5,
        12,
        300,
        8,
        1.05,
        False,
        None,
    ),
    ("A10G", "nvidia", 31.2, 125, 24, 600, 6, 80, 1710, 32, 12.5, 8, 150, 8, 0.60, False, None),
    ("L4", "nvidia", 30.3, 121, 24, 300, 48, 58, 2040, 32, 12.5, 5, 72, 8, 0.45, False, None),
    (
        "A100-40GB",
        "nvidia",
        19.5,
        312,
        40,
        1555,
        40,
        108,
        1410,
        300,
        25,
        7,
        400,
        8,
        1.60,
        False,
        None,
    ),
    (
        "A100-80GB",
        "nvidia",
        19.5,
        312,
        80,
        2039,
        40,
        108,
        1410,
        300,
        25,
        7,
        400,
        8,
        1.95,
        False,
        None,
    ),
    ("L40S", "nvidia", 91.6, 362, 48, 864, 96, 142, 2520, 32, 25, 5, 350, 8, 1.20, False, None),
    (
        "RTX6000-Ada",
        "nvidia",
        91.1,
        364,
        48,
        960,
        96,
        142,
        2505,
        32,
        12.5,
        5,
        300,
        8,
        1.00,
        False,
        None,
    ),
    (
        "H100-PCIe",
        "nvidia",
        51.0,
        756,
        80,
        2000,
        50,
        114,
        1755,
        64,
        25,
        4,
        350,
        8,
        2.60,
        False,
        None,
    ),
    (
        "H100-SXM",
        "nvidia",
        67.0,
        989,
        80,
        3350,
        50,
        132,
        1980,
        450,
        50,
        4,
        700,
        8,
        3.20,
        False,
        None,
    ),
    ("H200", "nvidia", 67.0, 989, 141, 4800, 50, 132, 1980, 450, 50, 4, 700, 8, 4.10, True, None),
    ("B200", "nvidia", 80.0, 2250, 180, 8000, 126, 148, 1965, 900, 50, 4, 1000, 8, 6.00, True, 15),
    ("MI100", "amd", 23.1, 185, 32, 1229, 8, 120, 1502, 138, 12.5, 7, 300, 8, 0.80, False, None),
    ("MI210", "amd", 45.3, 181, 64, 1638, 8, 104, 1700, 150, 25, 6, 300, 8, 1.10, False, None),
    ("MI250X", "amd", 47.9, 383, 128, 3277, 16, 220, 1700, 400, 25, 6, 560, 4, 2.20, False, None),
    (
        "MI300X",
        "amd",
        163.4,
        1307,
        192,
        5300,
        256,
        304,
        2100,
        448,
        50,
        5,
        750,
        8,
        3.50,
        False,
        None,
    ),
    ("MI325X", "amd", 163.4, 1307, 256, 6000, 256, 304, 2100, 448, 50, 5, 1000, 8, 4.60, True, 40),
    ("Gaudi2", "intel", 38.0, 432, 96, 2460, 48, 24, 1650, 150, 37.5, 7, 600, 8, 1.80, False, None),
    ("Gaudi3", "intel", 57.0, 1835, 128, 3700, 96, 64, 1600, 300, 75, 5, 900, 8, 3.00, False, None),
    ("Trn1", "aws", 47.5, 190, 32, 820, 24, 2, 2800, 192, 50, 7, 400, 16, 0.70, False, None),
    ("Trn2", "aws", 181.0, 667, 96, 2900, 48, 8, 2800, 640, 100, 5, 500, 16, 2.00, False, None),
)

# devices of each type in the fleet; the legacy scheduler places work roughly in proportion
LEGACY_CAPACITY: dict[str, float] = {
    "T4": 3.0,
    "V100-16GB": 5.0,
    "V100-32GB": 6.0,
    "A10G": 3.0,
    "L4": 2.5,
    "A100-40GB": 10.0,
    "A100-80GB": 12.0,
    "L40S": 3.0,
    "RTX6000-Ada": 1.5,
    "H100-PCIe": 3.0,
    "H100-SXM": 10.0,
    "H200": 3.0,
    "B200": 2.5,
    "MI100": 1.5,
    "MI210": 2.5,
    "MI250X": 3.0,
    "MI300X": 4.0,
    "MI325X": 1.0,
    "Gaudi2": 2.0,
    "Gaudi3": 1.5,
    "Trn1": 1.5,
    "Trn2": 1.5,
}

VENDORS: tuple[str, ...] = ("nvidia", "amd", "intel", "aws")
N_HARDWARE_TYPES = len(_CATALOG)


def hardware_specs(span_start: dt.date) -> pl.DataFrame:
    """The hardware specification table, one row per type, in the contract's schema."""
    rows = []
    for name, vendor, *rest in _CATALOG:
        specs, (cost, premium, entry_day) = rest[:12], rest[12:]
        available_from = span_start + dt.timedelta(days=entry_day or -365)
        rows.append(
            {
                "hardware_type": name,
                "vendor": vendor,
                **{col: float(v) for col, v in zip(HARDWARE_SPEC_COLUMNS, specs, strict=True)},
                "hourly_cost_usd": float(cost),
                "premium": premium,
                "available_from": available_from,
            }
        )
    return pl.DataFrame(rows, schema=schema("hardware_specs"))
