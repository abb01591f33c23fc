"""Job families: the key a launch's history is kept under.

A raw job name carries run-specific identifiers (dates, run ids, attempt counters, hashes); the
normalizer strips them to a family key, so every run of one job shares its history
(``history``, ``snapshot``).
"""

from __future__ import annotations

import re

import polars as pl

# A token is a run of characters between separators; these tokens are run-specific.
_SEPARATORS = r"[_\-./]"
_RUN_TOKEN = re.compile(
    rf"(?:^|{_SEPARATORS})"
    r"(?:\d+"  # run ids, attempt numbers, dates split by '-' (2026, 01, 05), 20260105
    r"|\d{8}t\d{6}"  # timestamps 20260105T031200
    r"|f\d{5,}"  # flow ids f123456789
    r"|(?:run|attempt|retry|try|a)\d+"  # run ids and attempt counters
    r"|(?=[a-f]*\d)[0-9a-f]{8,})"  # hashes (at least one digit)
    rf"(?={_SEPARATORS}|$)"
)


def normalize_job_name(job_name: str) -> str:
    """The family key of one raw job name: lowercased, run-specific tokens removed."""
    name = job_name.lower()
    previous = None
    while previous != name:  # a removed token can expose a neighbour that shared its separator
        previous, name = name, _RUN_TOKEN.sub("", name)
    return re.sub(rf"^{_SEPARATORS}+", "", name)


def _normalize_series(names: pl.Series) -> pl.Series:
    distinct = names.unique().to_frame("name")
    table = distinct.with_columns(
        family=pl.col("name").map_elements(normalize_job_name, return_dtype=pl.String)
    )
    return names.to_frame("name").join(table, on="name", how="left", maintain_order="left")[
        "family"
    ]


def family_expr(job_name: pl.Expr) -> pl.Expr:
    """``normalize_job_name`` as a polars expression (one Python call per distinct name)."""
    return job_name.map_batches(_normalize_series, return_dtype=pl.String)


def with_family(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows with a ``family`` column; one already present (computed once upstream) is kept."""
    if "family" in rows.columns:
        return rows
    return rows.with_columns(family=family_expr(pl.col("job_name")))
