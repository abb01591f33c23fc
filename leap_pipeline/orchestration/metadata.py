"""Metadata the Dagster UI shows well: tables as tables (sortable, typed columns), plots as
images. Every asset builds its metadata through these two functions."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path

import dagster as dg
import polars as pl

_COLUMN_TYPES = {"Float64": "float", "Float32": "float", "Boolean": "bool", "String": "string"}


def table_metadata(rows: pl.DataFrame | Sequence[dict], digits: int = 4) -> dg.MetadataValue:
    """A frame (or a list of row dicts) as ``MetadataValue.table``; floats rounded to ``digits``."""
    frame = rows if isinstance(rows, pl.DataFrame) else pl.DataFrame(list(rows))
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
        dg.TableRecord({k: v if isinstance(v, int | float | bool) or v is None else str(v)
                        for k, v in row.items()})
        for row in frame.iter_rows(named=True)
    ]  # fmt: skip
    return dg.MetadataValue.table(records=records, schema=schema)


def image_metadata(path: str | Path) -> dg.MetadataValue:
    """A PNG shown inline in the UI (markdown with the image embedded, as Dagster's own
    examples do: the event log keeps it whatever happens to the file)."""
    encoded = base64.b64encode(Path(path).read_bytes()).decode()
    return dg.MetadataValue.md(f"![{Path(path).stem}](data:image/png;base64,{encoded})")
