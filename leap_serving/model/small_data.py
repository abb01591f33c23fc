"""A cascade's settings scaled to a fit on fewer rows than its profile was made for.

A profile is sized for a night of thousands of rows: an expert needs ``min_bin_rows`` (200 by
default) and a leaf 20. A team's first few hundred runs, or the fold of a small set in
``leap crossval``, gives a fit fewer rows than that, and the cascade refuses it. Below the
profile's ``min_bin_rows`` (and only there: a fit on more rows keeps its profile's settings, so
the nightly model and crossval on the public sets are unchanged) the fit becomes one bin (no
bin classifier, which would have nothing to learn from), and what a tree may hold shrinks with
the rows, from the profile's values at ``min_bin_rows`` down to ``MIN_FIT_ROWS``:

- rows a leaf needs: a tenth of the rows (the 20 of 200 a default expert has; at least 2); a
  bin of a feature's histogram no more than that (LightGBM's 3 otherwise);
- rows early stopping holds out: ``MIN_VALIDATION_ROWS`` (what 10% of ``min_bin_rows`` gives),
  up to a third of the rows, so a stop is not decided by three rows' noise;
- leaves: no more than the rows left to train on fill at the leaf size (at least 2), which is
  also all a tree could grow there at the profile's settings.
"""

from __future__ import annotations

import math
from typing import Any

from .boosters import MIN_DATA_IN_BIN, MIN_DATA_IN_LEAF
from .cascade import BinnedCascade

# fewer rows than this cannot be split into rows to train on and rows to stop on
MIN_FIT_ROWS = 10
# held out for early stopping on a small fit: what a fit of ``min_bin_rows`` rows holds out
MIN_VALIDATION_ROWS = 20
MAX_VALIDATION_SHARE = 1 / 3
LEAF_SHARE = 0.1


def fit_to_rows(params: dict[str, Any], n_rows: int) -> dict[str, Any]:
    """``BinnedCascade`` keyword arguments for a fit on ``n_rows`` rows: ``params`` as they are
    when the rows fill the profile's ``min_bin_rows``, else scaled down (module docstring).
    Raises ValueError, naming the count, below ``MIN_FIT_ROWS``."""
    settings = BinnedCascade().get_params() | params
    min_bin_rows = settings["min_bin_rows"]
    if n_rows >= min_bin_rows:
        return dict(params)
    if n_rows < MIN_FIT_ROWS:
        raise ValueError(f"{n_rows} training rows are fewer than the {MIN_FIT_ROWS} a GBDT needs")
    share = max(settings["validation_fraction"], MIN_VALIDATION_ROWS / n_rows)
    share = min(share, MAX_VALIDATION_SHARE)
    fit_rows = n_rows - math.ceil(share * n_rows)
    leaf = max(2, min(MIN_DATA_IN_LEAF, round(n_rows * LEAF_SHARE)))
    leaves = max(2, min(settings["max_leaf_nodes"], fit_rows // leaf))
    return params | {
        "n_bins": 1,
        "min_bin_rows": n_rows,
        "em_sample": 1.0,  # too few rows to sample
        "classifier_sample": 1.0,
        "validation_fraction": share,
        "min_data_in_leaf": leaf,
        "min_data_in_bin": min(MIN_DATA_IN_BIN, leaf),
        "max_leaf_nodes": leaves,
        "classifier_max_leaf_nodes": min(settings["classifier_max_leaf_nodes"], leaves),
    }
