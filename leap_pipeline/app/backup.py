"""``leap backup`` and ``leap restore``: an install's data folder, copied whole and consistent.

An install keeps its state in several stores, and each one needs its own way to be copied while
it is in use. The DuckDB warehouse is a file one process at a time writes: it is copied while this
process holds a read connection, which keeps every writer out, so no write is half in the copy.
SQLite files (MLflow's store, Dagster's run history) are copied with sqlite3's online backup,
which reads a committed state whatever else writes. The Postgres of ``leap up`` is dumped or
copied (``backup_postgres``). Plain files (records, model folders, artifacts, the calendar) are
published by rename, so each one is whole. A backup is a folder: ``data/`` holds the files at
their paths, ``postgres-dumps/`` the dumps, and ``MANIFEST.json`` every file's sha256 and size.
It is built in a hidden sibling and renamed into place last, so a stopped backup is never taken
for a whole one. ``leap restore`` (``restore.py``) reads it back.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from leap_pipeline.app import backup_postgres as pg
from leap_pipeline.data.warehouse import WarehouseError, open_warehouse
from leap_pipeline.settings import Environment, sqlite_file

FORMAT = "leap-backup/1"
MANIFEST = "MANIFEST.json"
DATA = "data"  # the data folder's files, at their paths
DUMPS = "postgres-dumps"  # a running Postgres: one pg_dump (custom format) per database
POSTGRES = "postgres"  # where ``leap up``'s embedded Postgres keeps its files
SQLITE_HEADER = b"SQLite format 3\x00"
# a SQLite file's companions: the online backup reads them through the database
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")
# locks hold no data, and a copied one would name the processes of another machine
SKIPPED_FOLDERS = ("locks",)
SKIPPED_SUFFIX = ".lock"
# a DuckDB file beside the install's warehouse (a report's): how long its writer is waited for
OTHER_DUCKDB_WAIT_S = 10.0
# the install's passwords and keys (credentials.SECRETS), which --without-secrets leaves out
SECRETS = "secrets"
# the mode bits a restored folder may not carry: write access for others, setuid and setgid
UNSAFE_FOLDER_BITS = 0o002 | 0o4000 | 0o2000


class BackupError(ValueError):
    """A backup cannot be taken or restored; the message names the folder, file or value."""


@dataclass
class Outcome:
    """What a backup or a restore did: the folder it wrote, its files and bytes, how long it
    took, and what it left out (``notes``)."""

    folder: Path
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**self.__dict__, "folder": str(self.folder), "seconds": round(self.seconds, 2)}


def check_new(path: Path, flag: str) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BackupError(f"{flag} {path}: not empty; it must be a new or an empty folder")


@contextlib.contextmanager
def built_beside(final: Path, kind: str, mode: int = 0o777) -> Iterator[Path]:
    """A hidden sibling of ``final`` to build in, renamed to ``final`` when the block ends
    well and removed when it fails: ``final`` holds a whole result or nothing."""
    staging = final.parent / f".{final.name}.{kind}-{secrets.token_hex(4)}"
    final.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir(mode=mode)
    try:
        yield staging
        if final.exists():
            final.rmdir()  # empty: checked before anything was written
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def file_digest(path: Path) -> dict:
    digest = hashlib.sha256()
    with path.open("rb") as read:
        for block in iter(lambda: read.read(1 << 20), b""):
            digest.update(block)
    return {"sha256": digest.hexdigest(), "size": path.stat().st_size}


def _create_private(target: Path):
    """``target`` created new at 0600 for writing, never through a link: a secret is never
    readable by others, not even before a chmod, and a planted link is refused, not followed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.fdopen(os.open(target, flags, 0o600), "wb")


def copy_file(source: Path, target: Path, keep_mode: bool = True) -> dict:
    """Copy a file, created 0600 and then given the source's mode (``keep_mode``, a backup of
    the live folder) or left 0600 (a restore, whose modes nothing vouches for); the sha256 and
    size of what was read and written."""
    digest, size = hashlib.sha256(), 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as read, _create_private(target) as write:
        for block in iter(lambda: read.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
            write.write(block)
    if keep_mode:
        shutil.copymode(source, target)
    return {"sha256": digest.hexdigest(), "size": size}


def is_sqlite(path: Path) -> bool:
    with path.open("rb") as read:
        return read.read(len(SQLITE_HEADER)) == SQLITE_HEADER


def _copy_sqlite(source: Path, target: Path) -> dict:
    """sqlite3's online backup: a committed state, whatever another process writes meanwhile."""
    target.parent.mkdir(parents=True, exist_ok=True)
    read, write = sqlite3.connect(source, timeout=60), sqlite3.connect(target)
    try:
        read.backup(write)
    finally:
        write.close()
        read.close()
    shutil.copymode(source, target)
    return file_digest(target)


def _is_companion(path: Path) -> bool:
    """A SQLite database's journal or shared-memory file (``mlflow.db-wal``, say)."""
    if not path.name.endswith(SQLITE_COMPANIONS):
        return False
    database = path.with_name(path.name.rsplit("-", 1)[0])
    return database.is_file() and is_sqlite(database)


def _is_duckdb_wal(path: Path) -> bool:
    """A DuckDB file's write-ahead log, which ``_copy_warehouse`` copies with its database."""
    return path.name.endswith(".duckdb.wal") and path.with_name(path.name[:-4]).is_file()


def entries(folder: Path, skip: set[Path]) -> Iterator[tuple[str, Path]]:
    """("dir" | "link" | "file" | "other", path) under ``folder``, sorted, links not followed,
    the paths in ``skip`` (and what they hold) left out."""
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if here / d not in skip)
        for path in [here / name for name in [*dirs, *sorted(files)]]:
            if path in skip:
                continue
            if path.is_symlink():
                yield "link", path
            elif path.is_dir():
                yield "dir", path
            else:
                yield ("file" if path.is_file() else "other"), path  # other: a socket, a FIFO
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]


def uncovered(install: Environment) -> list[str]:
    """What an install keeps outside its data folder, which a backup of the folder leaves out.
    ``leap up``'s own servers (its Postgres socket in the folder, its MLflow server on the
    loopback address, whose store is that Postgres) are in the backup."""
    data, notes = install.data.resolve(), []
    embedded = (data / POSTGRES).is_dir()
    tracking = urlsplit(install.mlflow_tracking_uri)
    local_server = embedded and tracking.hostname in ("127.0.0.1", "localhost")
    if tracking.scheme not in ("", "sqlite", "file") and not local_server:
        notes.append(
            f"MLFLOW_TRACKING_URI={install.mlflow_tracking_uri} is not in this backup: "
            "back up that server's store and artifacts with their own tools"
        )
    database = sqlite_file(install.mlflow_tracking_uri)
    if database and not database.is_relative_to(data):
        notes.append(
            f"MLFLOW_TRACKING_URI's SQLite store {database} lies outside {data}: not "
            "backed up, nor its experiments' artifacts"
        )
    if install.dagster_home and not install.dagster_home_path.resolve().is_relative_to(data):
        notes.append(f"DAGSTER_HOME={install.dagster_home} lies outside {data}: not backed up")
    hosts = parse_qs(urlsplit(install.database_url).query).get("host", [""])
    if install.database_url and not (embedded and Path(hosts[0]).resolve() == data / POSTGRES):
        notes.append("LEAP_DATABASE_URL names a Postgres of your own: back it up with pg_dump")
    return notes


def _copy_warehouse(warehouse: Path, target: Path, wait_s: float | None = None) -> dict[Path, dict]:
    """The warehouse (and its write-ahead log, if one is left) copied while a read connection
    holds it: DuckDB lets no process write the file meanwhile. The copy is then opened, so a
    file DuckDB cannot read fails the backup, not a restore."""
    copied = {}
    wal = warehouse.with_name(warehouse.name + ".wal")
    with open_warehouse(warehouse, read_only=True, wait_s=wait_s) as held, held.session():
        for source, copy in ((warehouse, target), (wal, target.with_name(target.name + ".wal"))):
            if source.exists():
                copied[copy] = copy_file(source, copy)
    try:
        with open_warehouse(target, read_only=True) as copy:
            copy.tables()
    finally:  # the check's own lock files, not the backup's
        for lock in target.parent.glob(f"{target.name}*.lock"):
            lock.unlink(missing_ok=True)
    return copied


def backup(
    data: Path, dest: Path, warehouse: Path | None = None, without_secrets: bool = False
) -> Outcome:
    """Copy the install in ``data`` (its warehouse at ``warehouse``, by default
    ``data/leap.duckdb``; one outside the folder is stored as that) to the new folder
    ``dest``, closed by its manifest. ``without_secrets`` leaves ``secrets/`` out (the
    Postgres, MLflow admin and Dask keys), for a backup store others can read; the restored
    folder then needs them put back before ``leap up``."""
    started, data, dest = time.monotonic(), data.resolve(), dest.resolve()
    if not data.is_dir():
        raise BackupError(f"--data {data}: no such folder")
    if dest.is_relative_to(data):
        raise BackupError(f"DEST {dest} lies inside the data folder {data}: choose one outside")
    check_new(dest, "DEST")
    warehouse = (warehouse or data / "leap.duckdb").resolve()
    stored_as = warehouse if warehouse.is_relative_to(data) else data / "leap.duckdb"
    if stored_as != warehouse and stored_as.exists():
        raise BackupError(
            f"the warehouse {warehouse} lies outside {data}, which holds another "
            f"{stored_as.name}: back up one at a time"
        )
    outcome = Outcome(dest)
    manifest: dict = {
        "format": FORMAT,
        "source": str(data),
        "files": {},
        "links": {},
        "folders": {},
        "dumps": {},
    }
    postgres = data / POSTGRES
    # its owner's only: it holds every store of the install, its secrets included
    with built_beside(dest, "partial", mode=0o700) as staging:
        inside = staging / DATA

        def keep(copy: Path, entry: dict) -> None:
            manifest["files"][copy.relative_to(staging).as_posix()] = entry

        skip = {warehouse, warehouse.with_name(warehouse.name + ".wal")}
        skip |= {data / name for name in SKIPPED_FOLDERS}
        if without_secrets and (data / SECRETS).exists():
            skip.add(data / SECRETS)
            outcome.notes.append(
                f"{SECRETS}/ was left out (--without-secrets): put it back in the restored "
                "folder, at 0700, before leap up starts there (the restore says what to keep)"
            )
        if warehouse.exists():
            for copy, entry in _copy_warehouse(
                warehouse, inside / stored_as.relative_to(data)
            ).items():
                keep(copy, entry)
        url = pg.running_url(postgres) if postgres.is_dir() else None
        if url:  # its files change under a copy: each database dumped instead
            for name, dump in pg.dump_databases(url, staging / DUMPS).items():
                manifest["dumps"][name] = dump.relative_to(staging).as_posix()
                keep(dump, file_digest(dump))
            skip.add(postgres)
        stopped = postgres.is_dir() and not url
        with pg.up_locked_out(data) if stopped else contextlib.nullcontext():
            if stopped and pg.running_url(postgres):
                raise BackupError(f"Postgres started on {postgres} during the backup: try again")
            for kind, path in entries(data, skip):
                name, copy = path.relative_to(data).as_posix(), inside / path.relative_to(data)
                try:
                    _keep_entry(kind, path, copy, name, data, manifest, outcome, keep)
                except FileNotFoundError:  # a temporary of an atomic write, a replaced folder
                    outcome.notes.append(f"{name} was removed during the backup: not in it")
        manifest["postgres"] = "dumped" if url else "copied stopped" if stopped else "none"
        manifest["secrets"] = "left out" if without_secrets else "kept"
        manifest["created"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return finish(outcome, manifest, started)


def _keep_entry(
    kind: str,
    path: Path,
    copy: Path,
    name: str,
    data: Path,
    manifest: dict,
    outcome: Outcome,
    keep: Callable[[Path, dict], None],
) -> None:
    """One entry of the data folder into the backup: a link as its target, a folder with its
    mode, a file copied (SQLite by its online backup, DuckDB under its lock, the rest by bytes).
    A file another process removes meanwhile raises ``FileNotFoundError``."""
    if kind == "link":
        target = os.readlink(path)
        if not (path.parent / target).resolve().is_relative_to(data):
            # a restore refuses a link out of its folder: left out, and named
            outcome.notes.append(
                f"{name} links outside the folder, to {target}: neither the link nor what it "
                "names is in this backup; link it again after a restore"
            )
            return
        # kept as the relative path to where it really resolves (an absolute target, or one
        # through other links, judged as a restore judges it)
        target = os.path.relpath((path.parent / target).resolve(), path.parent.resolve())
        manifest["links"][f"{DATA}/{name}"] = target
        copy.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, copy)
    elif kind == "dir":
        manifest["folders"][f"{DATA}/{name}"] = path.stat().st_mode & 0o7777
        copy.mkdir(parents=True, exist_ok=True)
    elif kind == "file" and path.name.endswith(".duckdb"):  # a report's warehouse, say
        try:
            copies = _copy_warehouse(path, copy, wait_s=OTHER_DUCKDB_WAIT_S)
        except WarehouseError as exc:  # gone, busy, or not DuckDB's: bytes, and a note
            if not path.exists():
                raise FileNotFoundError(path) from None
            copy.unlink(missing_ok=True)  # a partial copy of the failed try: written anew
            copy.with_name(copy.name + ".wal").unlink(missing_ok=True)
            copies = {copy: copy_file(path, copy)}
            outcome.notes.append(
                f"{name} was copied byte for byte, not under DuckDB's lock ({exc}): it may not open"
            )
        for copied, entry in copies.items():
            keep(copied, entry)
    elif kind == "file" and not (
        name.endswith(SKIPPED_SUFFIX) or _is_companion(path) or _is_duckdb_wal(path)
    ):
        keep(copy, (_copy_sqlite if is_sqlite(path) else copy_file)(path, copy))


def finish(outcome: Outcome, manifest: dict, started: float) -> Outcome:
    outcome.files = len(manifest["files"])
    outcome.bytes = sum(entry["size"] for entry in manifest["files"].values())
    outcome.seconds = time.monotonic() - started
    return outcome
