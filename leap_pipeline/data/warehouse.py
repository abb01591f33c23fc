"""The pipeline's DuckDB file: every database call goes through this module.

Each table is partitioned by its ``ds`` column. Writing a partition deletes and inserts in one
transaction, so a re-run replaces exactly that day and a failure half way leaves the previous rows.
DuckDB lets one process open a file at a time: pipeline runs that write it are serialized (see
``definitions.py``), and serving never opens it.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl

from leap_pipeline.settings import LOCK_WAIT_ENV, environment

log = logging.getLogger("leap_pipeline.data.warehouse")


# Table names cannot be bound parameters; only these are ever interpolated.
TABLES: tuple[str, ...] = (
    "job_attempts",
    "allocations",
    "hardware_specs",
    "quarantine",
    "source_log",
    "landing_refusals",
    "feature_table",
    "history_snapshot",
    "evaluation",
    "routing",
)


# SQL statements. Values are always bound parameters (?); identifiers cannot be, so ``_sql``
# fills in only table names from TABLES, the warehouse's own view names and stored column names,
# each quoted.
_CREATE = "CREATE TABLE IF NOT EXISTS {table} AS SELECT * FROM {view} WITH NO DATA"
_DELETE = "DELETE FROM {table} WHERE ds = ?"
_INSERT = "INSERT INTO {table} BY NAME SELECT * FROM {view}"
_DESCRIBE = "DESCRIBE {table}"
# A day's rows in the order the day was written (rowid): ORDER BY ds alone leaves them in any
# order, which changed from one read to the next on a scale-1.0 window, and a fit on more than
# 200,000 rows depends on it (scikit-learn bins on a subsample, EM samples rows by position).
_SELECT = "SELECT {columns} FROM {table} WHERE ds >= ? AND ds <= ? ORDER BY ds, rowid"
_PARTITIONS = "SELECT DISTINCT ds FROM {table} ORDER BY ds"
_COUNT = "SELECT count(*) AS n FROM {table} WHERE ds = ?"


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _sql(template: str, table: str, view: str | None = None, columns=None) -> str:
    return template.format(
        table=_quote(_table(table)),
        view=_quote(view) if view else "",
        columns=", ".join(_quote(c) for c in columns) if columns else "*",
    )


class WarehouseError(RuntimeError):
    """The warehouse cannot be opened or written; the message says which file or table."""


def default_path() -> Path:
    """``$LEAP_WAREHOUSE`` if set, else ``leap.duckdb`` in the data folder (``$LEAP_DATA``)."""
    return environment().warehouse_path


def _table(name: str) -> str:
    if name not in TABLES:
        raise WarehouseError(f"table={name!r} is not one of {list(TABLES)}")
    return name


class Warehouse:
    """An open connection to the warehouse file; use as a context manager."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, path: Path) -> None:
        self._con = connection
        self.path = path

    def tables(self) -> list[str]:
        found = self._con.sql("SELECT table_name FROM duckdb_tables()").pl()["table_name"]
        return [t for t in TABLES if t in set(found.to_list())]

    def has(self, table: str) -> bool:
        return _table(table) in self.tables()

    def replace_partition(self, table: str, ds: dt.date, rows: pl.DataFrame) -> int:
        """Make ``rows`` the whole of partition ``ds`` of ``table``; returns rows written."""
        return self.replace_partitions(ds, {table: rows})[table]

    def replace_partitions(self, ds: dt.date, frames: Mapping[str, pl.DataFrame]) -> dict[str, int]:
        """Replace partition ``ds`` of several tables in one transaction: all land, or none.

        A table is created from the first frame written to it. A frame whose columns differ from
        the stored table's is refused before anything changes.
        """
        prepared = {}
        for table, rows in frames.items():
            _table(table)
            if "ds" not in rows.columns:
                rows = rows.with_columns(ds=pl.lit(ds, dtype=pl.Date))
            if rows.height and (rows["ds"] != ds).fill_null(True).any():
                raise WarehouseError(f"{table}: rows for partition {ds} carry other ds values")
            if self.has(table) and self.columns(table) != rows.columns:
                stored = self.columns(table)
                new = [c for c in rows.columns if c not in stored]
                gone = [c for c in stored if c not in rows.columns]
                change = f"new columns {new}, dropped {gone}" if new or gone else "column order"
                raise WarehouseError(
                    f"{table}: the rows differ from the stored table ({change}); after a change "
                    f"of schema, rebuild the warehouse: move {self.path} aside and materialize "
                    "the days again"
                )
            prepared[table] = rows
        views = {table: f"_incoming_{table}" for table in prepared}
        for table, rows in prepared.items():
            self._con.register(views[table], rows.to_arrow())
        try:
            self._con.execute("BEGIN TRANSACTION")
            try:
                for table in prepared:
                    self._con.execute(_sql(_CREATE, table, view=views[table]))
                    self._con.execute(_sql(_DELETE, table), [ds])
                    self._con.execute(_sql(_INSERT, table, view=views[table]))
                self._con.execute("COMMIT")
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
        finally:
            for view in views.values():
                self._con.unregister(view)
        return {table: rows.height for table, rows in prepared.items()}

    def columns(self, table: str) -> list[str]:
        described = self._con.sql(_sql(_DESCRIBE, table)).pl()
        return described["column_name"].to_list()

    def read(
        self,
        table: str,
        first: dt.date | None = None,
        last: dt.date | None = None,
        columns: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """Rows of partitions ``first`` .. ``last`` (inclusive; open ends read everything)."""
        _table(table)
        if not self.has(table):
            raise WarehouseError(f"{table}: no partition has been written to {self.path} yet")
        stored = self.columns(table)
        wanted = list(columns) if columns is not None else stored
        unknown = [c for c in wanted if c not in stored]
        if unknown:
            raise WarehouseError(f"{table}: column(s) {unknown} not stored")
        query = _sql(_SELECT, table, columns=wanted)
        low = first or dt.date.min
        high = last or dt.date.max
        return self._con.sql(query, params=[low, high]).pl()

    def partitions(self, table: str) -> list[dt.date]:
        if not self.has(table):
            return []
        query = _sql(_PARTITIONS, table)
        return self._con.sql(query).pl()["ds"].to_list()

    def count(self, table: str, ds: dt.date) -> int:
        if not self.has(table):
            return 0
        query = _sql(_COUNT, table)
        return int(self._con.sql(query, params=[ds]).pl()["n"][0])


def _connect(path: Path, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    """Connect, waiting with backoff while another process holds the file's lock."""
    deadline = time.monotonic() + wait_s
    delay = 0.25
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise WarehouseError(f"cannot open {path}: {exc}") from exc
            left = deadline - time.monotonic()
            if left <= 0:
                holder = re.search(r"PID (\d+)", str(exc))
                who = f"process {holder.group(1)}" if holder else "another process"
                raise WarehouseError(
                    f"cannot open {path}: {who} holds it (another LEAP command, a Dagster run or "
                    f"the nightly job) and did not let go within {wait_s:g} s. DuckDB allows one "
                    f"process per file: see it with `ps -p {holder.group(1) if holder else '<pid>'}"
                    f"` or `fuser {path}`, wait for it, or raise ${LOCK_WAIT_ENV}"
                ) from exc
            pause = min(delay, left)
            log.warning("%s is locked by another process; retrying in %.1f s", path, pause)
            time.sleep(pause)
            delay = min(delay * 2, 10.0)


@contextmanager
def open_warehouse(
    path: str | Path | None = None, read_only: bool = False, wait_s: float | None = None
) -> Iterator[Warehouse]:
    """Open (creating if needed) the warehouse file. While another process holds it, wait up to
    ``wait_s`` (default ``$LEAP_WAREHOUSE_WAIT_S`` or 120 s) with logged retries, then fail with
    an error that names the holder."""
    path = Path(path) if path else default_path()
    if read_only and not path.exists():
        raise WarehouseError(f"no warehouse at {path}: materialize the pipeline first")
    path.parent.mkdir(parents=True, exist_ok=True)
    if wait_s is None:
        wait_s = environment().warehouse_wait_s
    connection = _connect(path, read_only, wait_s)
    try:
        yield Warehouse(connection, path)
    finally:
        connection.close()


def remove_warehouse(path: str | Path) -> None:
    """Delete a warehouse file with its write-ahead log."""
    path = Path(path)
    for file in (path, path.with_name(path.name + ".wal")):
        file.unlink(missing_ok=True)
