"""leap import: a fleet's own files land as daily partitions, twice without change."""

import polars as pl
import pytest

from leap_pipeline.app.cli import main
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.simulation import SimulatedFleet


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Four days of a tiny fleet as a user would export them: one CSV of attempts without a
    ds column, allocations as Parquet, the spec table as CSV, and two broken rows."""
    root = tmp_path_factory.mktemp("export")
    fleet = SimulatedFleet(seed=5, scale=0.01)
    days = [d for _, d in fleet.days(0, 4)]
    attempts = pl.concat([d.attempts for d in days]).drop("ds")
    broken = attempts.head(2).with_columns(
        attempt_id=pl.col("attempt_id") + "-bad", hardware_type=pl.lit("TPU-v9")
    )
    pl.concat([attempts, broken]).with_columns(
        pl.col("candidate_hardware").list.join(";")
    ).write_csv(root / "attempts.csv")
    pl.concat([d.allocations for d in days]).write_parquet(root / "allocations.parquet")
    fleet.hardware_specs().write_csv(root / "hardware.csv")
    return root, attempts.height + 2


def _import(root, data):
    return main(["import", "--attempts", str(root / "attempts.csv"),
                 "--allocations", str(root / "allocations.parquet"),
                 "--hardware", str(root / "hardware.csv"), "--days-from", "launch_ts",
                 "--data", str(data)])  # fmt: skip


def _tables(data):
    with open_warehouse(data / "leap.duckdb", read_only=True) as wh:
        return {t: wh.read(t).sort("attempt_id") for t in ("job_attempts", "feature_table")} | {
            "quarantine": wh.read("quarantine").sort("attempt_id")
        }


def test_import_lands_days_quarantines_bad_rows_and_is_idempotent(
    files, tmp_path, capsys, monkeypatch
):
    """With a relative --data, as typed: the calendar still names the staged logs by their
    absolute path, since the UI and the daemon that read it start in another directory."""
    root, rows_in = files
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    assert _import(root, "data") == 0
    out = capsys.readouterr().out
    assert f"rows in {rows_in:,}" in out and "quarantined 2" in out
    assert "hardware_type: TPU-v9 is not in the spec table (2)" in out
    assert Calendar.load(data).source == f"files:{data.resolve() / 'imports' / 'staging'}"
    first = _tables(data)
    assert first["job_attempts"]["ds"].n_unique() == 4
    assert first["feature_table"].height == first["job_attempts"].height
    assert _import(root, "data") == 0  # staging moved to a new folder: read where it now is
    second = _tables(data)
    for table, rows in first.items():
        assert second[table].equals(rows), table


def test_a_missing_required_column_is_an_error_naming_it(files, tmp_path, capsys):
    root, _ = files
    pl.read_csv(root / "attempts.csv").drop("batch_size").write_csv(tmp_path / "attempts.csv")
    with pytest.raises(SystemExit) as stop:
        main(["import", "--attempts", str(tmp_path / "attempts.csv"),
              "--allocations", str(root / "allocations.parquet"),
              "--hardware", str(root / "hardware.csv"), "--days-from", "launch_ts",
              "--data", str(tmp_path)])  # fmt: skip
    assert stop.value.code == 2
    assert "lacks required column(s) ['batch_size']" in capsys.readouterr().err
