"""The pipeline's DuckDB file: every database call goes through this module.

Each table is partitioned by its ``ds`` column. Writing a partition deletes and inserts in one
transaction, so a re-run replaces exactly that day and a failure half way leaves the previous rows.
DuckDB lets one process write a file, or several read it, at a time: every call opens the file
for itself and closes it (``Warehouse``), so concurrent runs wait for one another's operations,
never for one another's runs. Serving never opens it.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import random
import re
import threading
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
    """The warehouse file, opened for each operation and closed after it.

    DuckDB lets one process write a file, or several read it, at a time. Holding a connection
    for a whole run made a night that trains for minutes lock every other run out (a day
    materialized from the UI failed after the wait). Here each call is its own short critical
    section: a read opens the file read-only, so readers in other processes proceed together;
    a write opens it for writing and replaces its days in one transaction. Another process
    waits at most one operation, not one run; a reader sees a day's old rows or its new ones,
    never part of each. ``session()`` keeps one connection across several calls when they must
    see the same state (a night's window and its day)."""

    def __init__(self, path: Path, read_only: bool = False, wait_s: float | None = None) -> None:
        self.path = path
        self.read_only = read_only
        self.wait_s = environment().warehouse_wait_s if wait_s is None else wait_s
        self._held: duckdb.DuckDBPyConnection | None = None
        self._held_read_only = True

    @contextmanager
    def _connection(self, write: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        if write and self.read_only:
            raise WarehouseError(f"{self.path} was opened read-only: it cannot be written")
        if self._held is not None:
            if write and self._held_read_only:
                raise WarehouseError(f"{self.path}: a read session cannot write; open a write one")
            yield self._held
            return
        # one connection per file at a time in this process too: DuckDB refuses a read-only
        # and a writing connection to one file side by side in a process
        with _process_lock(self.path):
            deadline = time.monotonic() + self.wait_s  # the wait for other processes
            with _lock_file_held(self.path, write, self.wait_s, deadline):
                con = _connect(self.path, not write, self.wait_s, deadline)
                try:
                    yield con
                finally:
                    con.close()

    @contextmanager
    def session(self, write: bool = False) -> Iterator[Warehouse]:
        """Hold one connection for the calls inside: they see one state of the file, and other
        processes wait until the block ends, so keep it short (no training inside)."""
        if self._held is not None:
            yield self
            return
        if not write and not self.path.exists():
            yield self  # nothing to hold: every read says so
            return
        with self._connection(write) as con:
            self._held, self._held_read_only = con, not write
            try:
                yield self
            finally:
                self._held = None

    def _stored(self, con: duckdb.DuckDBPyConnection) -> set[str]:
        return set(con.sql("SELECT table_name FROM duckdb_tables()").pl()["table_name"].to_list())

    def tables(self) -> list[str]:
        if not self.path.exists():
            return []
        with self._connection(write=False) as con:
            found = self._stored(con)
        return [t for t in TABLES if t in found]

    def has(self, table: str) -> bool:
        return _table(table) in self.tables()

    def replace_partition(self, table: str, ds: dt.date, rows: pl.DataFrame) -> int:
        """Make ``rows`` the whole of partition ``ds`` of ``table``; returns rows written."""
        return self.replace_partitions(ds, {table: rows})[table]

    def replace_partitions(self, ds: dt.date, frames: Mapping[str, pl.DataFrame]) -> dict[str, int]:
        """Replace partition ``ds`` of several tables in one transaction: all land, or none.

        A table is created from the first frame written to it. A frame whose columns differ from
        the stored table's is refused before anything changes. The file is held for writing
        only while the frames, prepared before, are written.
        """
        prepared = {}
        for table, rows in frames.items():
            _table(table)
            if "ds" not in rows.columns:
                rows = rows.with_columns(ds=pl.lit(ds, dtype=pl.Date))
            if rows.height and (rows["ds"] != ds).fill_null(True).any():
                raise WarehouseError(f"{table}: rows for partition {ds} carry other ds values")
            prepared[table] = rows
        arrow = {table: rows.to_arrow() for table, rows in prepared.items()}
        views = {table: f"_incoming_{table}" for table in prepared}
        with self._connection(write=True) as con:
            stored_tables = self._stored(con)
            for table, rows in prepared.items():
                if table in stored_tables and _columns(con, table) != rows.columns:
                    stored = _columns(con, table)
                    new = [c for c in rows.columns if c not in stored]
                    gone = [c for c in stored if c not in rows.columns]
                    change = f"new columns {new}, dropped {gone}" if new or gone else "column order"
                    raise WarehouseError(
                        f"{table}: the rows differ from the stored table ({change}); after a "
                        f"change of schema, rebuild the warehouse: move {self.path} aside and "
                        "materialize the days again"
                    )
            for table in prepared:
                con.register(views[table], arrow[table])
            try:
                con.execute("BEGIN TRANSACTION")
                try:
                    for table in prepared:
                        con.execute(_sql(_CREATE, table, view=views[table]))
                        con.execute(_sql(_DELETE, table), [ds])
                        con.execute(_sql(_INSERT, table, view=views[table]))
                    con.execute("COMMIT")
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
            finally:
                for view in views.values():
                    con.unregister(view)
        return {table: rows.height for table, rows in prepared.items()}

    def columns(self, table: str) -> list[str]:
        with self._connection(write=False) as con:
            return _columns(con, table)

    def read(
        self,
        table: str,
        first: dt.date | None = None,
        last: dt.date | None = None,
        columns: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """Rows of partitions ``first`` .. ``last`` (inclusive; open ends read everything)."""
        _table(table)
        missing = WarehouseError(f"{table}: no partition has been written to {self.path} yet")
        if not self.path.exists():
            raise missing
        with self._connection(write=False) as con:
            if table not in self._stored(con):
                raise missing
            stored = _columns(con, table)
            wanted = list(columns) if columns is not None else stored
            unknown = [c for c in wanted if c not in stored]
            if unknown:
                raise WarehouseError(f"{table}: column(s) {unknown} not stored")
            query = _sql(_SELECT, table, columns=wanted)
            low = first or dt.date.min
            high = last or dt.date.max
            return con.sql(query, params=[low, high]).pl()

    def partitions(self, table: str) -> list[dt.date]:
        _table(table)
        if not self.path.exists():
            return []
        with self._connection(write=False) as con:
            if table not in self._stored(con):
                return []
            return con.sql(_sql(_PARTITIONS, table)).pl()["ds"].to_list()

    def count(self, table: str, ds: dt.date) -> int:
        _table(table)
        if not self.path.exists():
            return 0
        with self._connection(write=False) as con:
            if table not in self._stored(con):
                return 0
            return int(con.sql(_sql(_COUNT, table), params=[ds]).pl()["n"][0])


_PROCESS_LOCKS: dict[str, threading.RLock] = {}


def _process_lock(path: Path) -> threading.RLock:
    return _PROCESS_LOCKS.setdefault(str(path.resolve()), threading.RLock())


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return con.sql(_sql(_DESCRIBE, table)).pl()["column_name"].to_list()


# per file, the lock file's descriptor and how many calls of the thread inside _process_lock
# hold it (the outermost took it; a nested call finds it held)
_LOCK_FILES_HELD: dict[str, list] = {}


def lock_file(path: Path) -> Path:
    """The warehouse's lock file, beside the file itself (``leap.duckdb.lock``): resolved, so
    processes that reach the warehouse through a link lock the same file."""
    path = path.resolve()
    return path.with_name(path.name + ".lock")


def _gate_file(path: Path) -> Path:
    """The lock file a writer holds while it waits (``leap.duckdb.gate.lock``): readers pass it
    on their way in, so a waiting writer holds new readers back."""
    found = lock_file(path)
    return found.with_name(found.name[: -len(".lock")] + ".gate.lock")


def _open_lock_file(file: Path, path: Path) -> int | None:
    """A lock file's descriptor (created 0600; a link there is refused), or None when this
    process cannot open it: then it relies on DuckDB's lock alone."""
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(file, os.O_RDWR | os.O_CREAT | flags, 0o600)
    except OSError:
        pass
    try:
        return os.open(file, os.O_RDONLY | flags)
    except OSError as exc:
        log.warning("%s: cannot open %s (%s): relying on DuckDB's lock", path, file, exc)
        return None


def _flock(fd: int, exclusive: bool, path: Path, wait_s: float, deadline: float) -> None:
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    _retried(
        lambda: fcntl.flock(fd, mode),
        BlockingIOError,
        path,
        wait_s,
        deadline,
        lambda exc: _held(path, _lock_file_holder(path), wait_s),
    )


@contextmanager
def _lock_file_held(path: Path, write: bool, wait_s: float, deadline: float) -> Iterator[None]:
    """The warehouse's lock file held, shared to read and exclusive to write, from before
    DuckDB opens the file until after it closed it.

    With DuckDB's lock alone (2.0.1), two processes each landing 12 days, one operation at a
    time, lost a committed day in 1 run of 180 on a loaded 2-core machine, with no log left to
    replay; DuckDB reads a file's headers before it takes its lock (strace shows it), which is
    where an open can overlap another's checkpoint. With this lock held across the whole
    connection, a process opens the file only once the other has closed it: 0 lost in 300 runs
    (tests/test_warehouse_concurrency.py's writers).

    A writer first holds the gate (``_gate_file``), which each reader passes through on its way
    in: without it, a reader reading in a loop kept its shared lock so nearly always that a
    writer polling for the lock waited past its deadline. A process that cannot open or lock
    the lock files (a folder it may not write, a file system without flock) relies on DuckDB's
    lock alone. Taken once per process and file: a call nested in another of the same thread
    (which holds ``_process_lock``) finds it held."""
    key = str(path.resolve())
    held = _LOCK_FILES_HELD.get(key)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    fds: list[int] = []
    try:
        for file in (_gate_file(path), lock_file(path)):
            fd = _open_lock_file(file, path)
            if fd is None:  # it said why
                break
            fds.append(fd)
        if len(fds) == 2:
            gate, lock = fds
            _flock(gate, write, path, wait_s, deadline)  # a writer holds it until it is done
            _flock(lock, write, path, wait_s, deadline)
            if not write:
                fcntl.flock(gate, fcntl.LOCK_UN)  # passed: a writer may now queue behind it
    except OSError as exc:  # no lock on this file system (ENOLCK, say)
        log.warning("%s: cannot use its lock files (%s): relying on DuckDB's lock", path, exc)
        for fd in fds:
            os.close(fd)
        fds = []
    except BaseException:  # held past the deadline (WarehouseError), or a Ctrl-C while it
        # waits: the lock files are closed, so a gate this writer took is let go too
        for fd in fds:
            os.close(fd)
        raise
    if len(fds) < 2:  # DuckDB's lock alone; the block runs outside the handler above, so an
        # error in it is its own, not one raised "during handling" of the lock's OSError
        for fd in fds:
            os.close(fd)
        yield
        return
    _LOCK_FILES_HELD[key] = [fds, 1]
    try:
        yield
    finally:
        del _LOCK_FILES_HELD[key]
        for fd in reversed(fds):
            os.close(fd)  # releases the locks


def _lock_file_holder(path: Path) -> str:
    """Who holds the lock file, as DuckDB would say it (``PID n``): read from the kernel's
    table of locks (Linux's /proc/locks, by the file's device and inode); empty elsewhere."""
    try:
        found = os.stat(lock_file(path))
        locks = Path("/proc/locks").read_text()
    except OSError:
        return ""
    device = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    for line in locks.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == device:
            return f"PID {fields[4]}"
    return ""


# retries while another process holds the file: short at first (its operation is short), up to
# this, with jitter so that two waiters do not retry in step
MAX_RETRY_DELAY_S = 2.0


def _retried(attempt, busy: type[Exception], path: Path, wait_s: float, deadline: float, error):
    """``attempt()`` again while it raises ``busy``, with backoff, a warning once the wait is
    long, and ``error(exc)`` raised at the deadline."""
    delay, waited_since, warned = 0.02, time.monotonic(), False
    while True:
        try:
            return attempt()
        except busy as exc:
            if not warned and time.monotonic() - waited_since > min(5.0, wait_s / 2):
                log.warning("%s is held by another process; waiting up to %g s", path, wait_s)
                warned = True
            left = deadline - time.monotonic()
            if left <= 0:
                raise error(exc) from exc
            time.sleep(min(delay * random.uniform(0.5, 1.5), left))
            delay = min(delay * 2, MAX_RETRY_DELAY_S)


def _held(path: Path, message: str, wait_s: float) -> WarehouseError:
    holder = re.search(r"PID (\d+)", message)
    who = f"process {holder.group(1)}" if holder else "another process"
    return WarehouseError(
        f"cannot open {path}: {who} holds it (another LEAP command, a Dagster run or "
        f"the nightly job) and did not let go within {wait_s:g} s. Each run holds "
        f"it for one read or write at a time: see the holder with `ps -p "
        f"{holder.group(1) if holder else '<pid>'}` or `fuser {path} {lock_file(path)}`, or raise "
        f"${LOCK_WAIT_ENV}"
    )


class _Locked(Exception):
    """DuckDB's file lock is held by another process."""


def _connect(
    path: Path, read_only: bool, wait_s: float, deadline: float
) -> duckdb.DuckDBPyConnection:
    """Connect, waiting with backoff while another process holds the file's lock."""

    def attempt() -> duckdb.DuckDBPyConnection:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise WarehouseError(f"cannot open {path}: {exc}") from exc
            raise _Locked(str(exc)) from exc

    return _retried(
        attempt, _Locked, path, wait_s, deadline, lambda exc: _held(path, str(exc), wait_s)
    )


@contextmanager
def open_warehouse(
    path: str | Path | None = None, read_only: bool = False, wait_s: float | None = None
) -> Iterator[Warehouse]:
    """The warehouse file (created on the first write). Each call on it opens the file and
    closes it (``Warehouse``); while another process holds the file, a call waits up to
    ``wait_s`` (default ``$LEAP_WAREHOUSE_WAIT_S`` or 120 s), then fails with an error that
    names the holder."""
    path = Path(path) if path else default_path()
    if read_only and not path.exists():
        raise WarehouseError(f"no warehouse at {path}: materialize the pipeline first")
    path.parent.mkdir(parents=True, exist_ok=True)
    yield Warehouse(path, read_only=read_only, wait_s=wait_s)


def remove_warehouse(path: str | Path) -> None:
    """Delete a warehouse file with its write-ahead log."""
    path = Path(path)
    for file in (path, path.with_name(path.name + ".wal")):
        file.unlink(missing_ok=True)
