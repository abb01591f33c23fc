"""Metadata the Dagster UI shows well: tables as tables (sortable, typed columns), plots as
images. Every asset builds its metadata through these two functions."""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from pathlib import Path

import dagster as dg
import polars as pl

_COLUMN_TYPES = {"Float64": "float", "Float32": "float", "Boolean": "bool", "String": "string"}


def table_metadata(rows: pl.DataFrame | Sequence[dict], digits: int = 4) -> dg.MetadataValue:
    """A frame (or a list of row dicts) as ``MetadataValue.table``; floats rounded to ``digits``."""
    # every row read for the types: a long backfill's first rows may lack a column (reused nights)
    frame = (
        rows
        if isinstance(rows, pl.DataFrame)
        else pl.DataFrame(list(rows), infer_schema_length=None)
    )
    frame = frame.with_columns(pl.col(pl.Float32, pl.Float64).round(digits))
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn(
                name,
                "int" if dtype.is_integer() else _COLUMN_TYPES.get(str(dtype), "string"),
            )
            for name, dtype in frame.schema.items()
        ]
    )
    records = [
        dg.TableRecord({k: _cell(v) for k, v in row.items()}) for row in frame.iter_rows(named=True)
    ]
    return dg.MetadataValue.table(records=records, schema=schema)


def _cell(value):
    """A value the UI can show: NaN and infinities become empty (the UI drops a row whose JSON
    holds NaN), anything not a number a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, int | float | bool) or value is None else str(value)


def image_metadata(path: str | Path) -> dg.MetadataValue:
    """A PNG shown inline in the UI (markdown with the image embedded, as Dagster's own
    examples do: the event log keeps it whatever happens to the file)."""
    encoded = base64.b64encode(Path(path).read_bytes()).decode()
    return dg.MetadataValue.md(f"![{Path(path).stem}](data:image/png;base64,{encoded})")
