"""Feature drift: each feature's distribution on day D against the training window's.

The population stability index (PSI) over the window's deciles, with missing values as a bin of
their own (a feature that goes missing is drift too): sum over bins of (day - window) x
ln(day / window). By the usual reading, under 0.1 is stable, 0.1-0.25 a moderate shift and over
``PSI_WARN`` a shift the model's accuracy on the day should be read against. A stated index
rather than a two-sample test: with thousands of rows a test flags shifts too small to matter.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from leap_serving.launch.features import FEATURE_COLUMNS

PSI_BINS = 10
PSI_WARN = 0.25
_FLOOR = 1e-4  # a bin empty on one side counts as this share, so the index stays finite


def population_stability(reference: np.ndarray, current: np.ndarray, bins: int = PSI_BINS) -> float:
    """PSI of ``current`` against ``reference`` over ``reference``'s quantile bins and a bin
    for missing values. A discrete feature gets one bin per distinct cut."""
    reference = np.asarray(reference, dtype=np.float64)
    current = np.asarray(current, dtype=np.float64)
    known = reference[~np.isnan(reference)]
    edges = np.unique(np.quantile(known, np.linspace(0, 1, bins + 1)[1:-1])) if len(known) else []

    def shares(values: np.ndarray) -> np.ndarray:
        missing = np.isnan(values)
        counts = np.bincount(
            np.searchsorted(edges, values[~missing], side="right"), minlength=len(edges) + 1
        )
        counts = np.append(counts, missing.sum()).astype(np.float64)
        return np.maximum(counts / max(len(values), 1), _FLOOR)

    expected, actual = shares(reference), shares(current)
    return float(np.sum((actual - expected) * np.log(actual / expected)))


def feature_drift(window: pl.DataFrame, rows: pl.DataFrame) -> list[dict]:
    """One entry per feature, largest PSI first: day D's ``rows`` against the ``window``'s, the
    share missing on each side and whether the index passes ``PSI_WARN``."""
    reference = window.select(FEATURE_COLUMNS).to_numpy().astype(np.float64)
    current = rows.select(FEATURE_COLUMNS).to_numpy().astype(np.float64)
    out = []
    for j, name in enumerate(FEATURE_COLUMNS):
        psi = population_stability(reference[:, j], current[:, j])
        out.append(
            {
                "feature": name,
                "psi": psi,
                "window_missing": float(np.isnan(reference[:, j]).mean())
                if len(reference)
                else None,
                "day_missing": float(np.isnan(current[:, j]).mean()) if len(current) else None,
                "drifted": psi > PSI_WARN,
            }
        )
    return sorted(out, key=lambda entry: -entry["psi"])
