"""Train/serve skew: the features serving computes for a launch equal the feature table's.

Training reads the feature table, built for a whole day at once from the attempts frame
(``feature_table.build_feature_table``); serving builds each launch's rows from the launch's fields
as a launcher sends them, the spec table and the history index of the model's snapshot
(``Ranker._score``). Both call the one feature module, but through different row adapters and
history paths, so a change to either can make the model see at serving time what it never saw in
training. For a sample of a day's launches, this sends each launch as a launcher would (its
fields as JSON types), types and checks it as the Ranker does (``launch_fields.typed_launch``),
recomputes its features the serving way from the snapshot the day's serving model carries (as
of the day before) and compares them with the table's rows, feature by feature.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from leap_serving.decide.launch_fields import typed_launch
from leap_serving.launch.features import FEATURE_COLUMNS, launch_matrix
from leap_serving.launch.history import HistoryIndex
from leap_serving.launch.rows import CandidateRows
from leap_serving.launch.specs import SpecTable

# launches a day's check recomputes: enough to meet every history case of a day, cheap to build
SKEW_SAMPLE = 200
# two values are the same feature when they differ by no more than this, relatively
SKEW_TOLERANCE = 1e-9


def serving_skew(
    attempts: pl.DataFrame,
    table: pl.DataFrame,
    hardware_specs: pl.DataFrame,
    snapshot: pl.DataFrame,
    sample: int = SKEW_SAMPLE,
    seed: int = 0,
) -> list[dict]:
    """The features on which the serving path disagrees with ``table`` (the feature table of
    ``attempts``' day, one row per attempt) for a seeded sample of ``attempts``: one entry per
    feature that differs, with how many sampled launches and one example. Empty: no skew."""
    if attempts.height == 0:
        return []
    picked = attempts.sort("attempt_id").sample(n=min(sample, attempts.height), seed=seed)
    index, specs = HistoryIndex.from_snapshot(snapshot), SpecTable.from_frame(hardware_specs)
    known = set(hardware_specs["hardware_type"].to_list())
    launches = []
    for row in picked.iter_rows(named=True):
        # the launch as a launcher sends it (its JSON's types: dates as text), typed and checked
        # as the Ranker does before it builds the features
        job = {
            k: v.isoformat() if isinstance(v, dt.date) else v
            for k, v in row.items()
            if k not in ("candidate_hardware", "family")
        }
        launch, types, _ = typed_launch(job, [row["hardware_type"]], index.last_ds, known, None)
        launches.append((launch, types))
    served = launch_matrix(CandidateRows(launches), specs, index)
    stored = (
        picked.select("attempt_id")
        .join(table, on="attempt_id", how="left", maintain_order="left")
        .select(FEATURE_COLUMNS)
        .to_numpy()
        .astype(np.float64)
    )
    same = (np.isnan(served) & np.isnan(stored)) | (
        np.abs(served - stored) <= SKEW_TOLERANCE * np.maximum(1.0, np.abs(stored))
    )
    found = []
    ids = picked["attempt_id"].to_list()
    for j in np.flatnonzero(~same.all(axis=0)):
        rows = np.flatnonzero(~same[:, j])
        first = rows[0]
        found.append(
            {
                "feature": FEATURE_COLUMNS[j],
                "launches": len(rows),
                "sampled": len(ids),
                "example": (
                    f"{ids[first]}: table {stored[first, j]!r}, serving {served[first, j]!r}"
                ),
            }
        )
    return found
