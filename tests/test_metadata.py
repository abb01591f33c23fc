"""What the Dagster UI is shown: tables whose types hold over every row, cells it can parse."""

import math

import polars as pl

from leap_pipeline.orchestration.metadata import table_metadata


def test_a_column_first_filled_late_keeps_its_type():
    """A long backfill's first rows may lack a column (a reused night has no fit times): the
    type comes from every row, so a float after 150 empty cells is neither lost nor truncated."""
    rows = [{"ds": f"d{i}", "seconds": None} for i in range(150)] + [{"ds": "x", "seconds": 2.5}]
    table = table_metadata(rows)
    assert table.records[-1].data["seconds"] == 2.5
    assert [c.type for c in table.schema.columns] == ["string", "float"]


def test_non_finite_numbers_become_empty_cells():
    """The UI drops a row whose JSON holds NaN: such cells are sent empty, the row stays."""
    frame = pl.DataFrame({"model": ["a", "b"], "mdape": [math.nan, 0.25], "n": [1, 2]})
    records = [r.data for r in table_metadata(frame).records]
    assert records == [{"model": "a", "mdape": None, "n": 1}, {"model": "b", "mdape": 0.25, "n": 2}]
