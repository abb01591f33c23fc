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
for a whole one. ``restore`` checks every file against the manifest before it writes anything. It
writes a new folder only, and it points the absolute paths the stores recorded at that folder
(``relocate``), so the restored install reads nothing of the original.
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
from pathlib import Path, PurePosixPath
from urllib.parse import parse_qs, urlsplit

from leap_pipeline.app import backup_postgres as pg
from leap_pipeline.app.relocate import relocate_mlflow, relocate_records
from leap_pipeline.data.warehouse import WarehouseError, open_warehouse
from leap_pipeline.settings import Environment

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


def _check_new(path: Path, flag: str) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BackupError(f"{flag} {path}: not empty; it must be a new or an empty folder")


@contextlib.contextmanager
def _built_beside(final: Path, kind: str, mode: int = 0o777) -> Iterator[Path]:
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


def _hash(path: Path) -> dict:
    digest = hashlib.sha256()
    with path.open("rb") as read:
        for block in iter(lambda: read.read(1 << 20), b""):
            digest.update(block)
    return {"sha256": digest.hexdigest(), "size": path.stat().st_size}


def _copy(source: Path, target: Path) -> dict:
    """Copy a file with its mode; the sha256 and size of what was read and written."""
    digest, size = hashlib.sha256(), 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as read, target.open("wb") as write:
        for block in iter(lambda: read.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
            write.write(block)
    shutil.copymode(source, target)
    return {"sha256": digest.hexdigest(), "size": size}


def _is_sqlite(path: Path) -> bool:
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
    return _hash(target)


def _is_companion(path: Path) -> bool:
    """A SQLite database's journal or shared-memory file (``mlflow.db-wal``, say)."""
    if not path.name.endswith(SQLITE_COMPANIONS):
        return False
    database = path.with_name(path.name.rsplit("-", 1)[0])
    return database.is_file() and _is_sqlite(database)


def _is_duckdb_wal(path: Path) -> bool:
    """A DuckDB file's write-ahead log, which ``_copy_warehouse`` copies with its database."""
    return path.name.endswith(".duckdb.wal") and path.with_name(path.name[:-4]).is_file()


def _entries(folder: Path, skip: set[Path]) -> Iterator[tuple[str, Path]]:
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
        notes.append(f"MLFLOW_TRACKING_URI={install.mlflow_tracking_uri} is not in this backup: "
                     "back up that server's store and artifacts with their own tools")  # fmt: skip
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
                copied[copy] = _copy(source, copy)
    with open_warehouse(target, read_only=True) as copy:
        copy.tables()
    return copied


def backup(data: Path, dest: Path, warehouse: Path | None = None) -> Outcome:
    """Copy the install in ``data`` (its warehouse at ``warehouse``, by default
    ``data/leap.duckdb``; one outside the folder is stored as that) to the new folder
    ``dest``, closed by its manifest."""
    started, data, dest = time.monotonic(), data.resolve(), dest.resolve()
    if not data.is_dir():
        raise BackupError(f"--data {data}: no such folder")
    if dest.is_relative_to(data):
        raise BackupError(f"DEST {dest} lies inside the data folder {data}: choose one outside")
    _check_new(dest, "DEST")
    warehouse = (warehouse or data / "leap.duckdb").resolve()
    stored_as = warehouse if warehouse.is_relative_to(data) else data / "leap.duckdb"
    if stored_as != warehouse and stored_as.exists():
        raise BackupError(f"the warehouse {warehouse} lies outside {data}, which holds another "
                          f"{stored_as.name}: back up one at a time")  # fmt: skip
    outcome = Outcome(dest)
    manifest: dict = {"format": FORMAT, "source": str(data), "files": {}, "links": {},
                      "folders": {}, "dumps": {}}  # fmt: skip
    postgres = data / POSTGRES
    # its owner's only: it holds every store of the install, its secrets included
    with _built_beside(dest, "partial", mode=0o700) as staging:
        inside = staging / DATA

        def keep(copy: Path, entry: dict) -> None:
            manifest["files"][copy.relative_to(staging).as_posix()] = entry

        skip = {warehouse, warehouse.with_name(warehouse.name + ".wal")}
        skip |= {data / name for name in SKIPPED_FOLDERS}
        if warehouse.exists():
            for copy, entry in _copy_warehouse(
                warehouse, inside / stored_as.relative_to(data)
            ).items():
                keep(copy, entry)
        url = pg.running_url(postgres) if postgres.is_dir() else None
        if url:  # its files change under a copy: each database dumped instead
            for name, dump in pg.dump_databases(url, staging / DUMPS).items():
                manifest["dumps"][name] = dump.relative_to(staging).as_posix()
                keep(dump, _hash(dump))
            skip.add(postgres)
        stopped = postgres.is_dir() and not url
        with pg.up_locked_out(data) if stopped else contextlib.nullcontext():
            if stopped and pg.running_url(postgres):
                raise BackupError(f"Postgres started on {postgres} during the backup: try again")
            for kind, path in _entries(data, skip):
                name, copy = path.relative_to(data).as_posix(), inside / path.relative_to(data)
                try:
                    _keep_entry(kind, path, copy, name, data, manifest, outcome, keep)
                except FileNotFoundError:  # a temporary of an atomic write, a replaced folder
                    outcome.notes.append(f"{name} was removed during the backup: not in it")
        manifest["postgres"] = "dumped" if url else "copied stopped" if stopped else "none"
        manifest["created"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return _finish(outcome, manifest, started)


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
        manifest["links"][f"{DATA}/{name}"] = target
        copy.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, copy)
        if not (path.parent / target).resolve().is_relative_to(data):
            outcome.notes.append(f"{name} links outside the folder, to {target}: "
                                 "what it names is not in this backup")  # fmt: skip
    elif kind == "dir":
        manifest["folders"][f"{DATA}/{name}"] = path.stat().st_mode & 0o7777
        copy.mkdir(parents=True, exist_ok=True)
    elif kind == "file" and path.name.endswith(".duckdb"):  # a report's warehouse, say
        try:
            copies = _copy_warehouse(path, copy, wait_s=OTHER_DUCKDB_WAIT_S)
        except WarehouseError as exc:  # gone, busy, or not DuckDB's: bytes, and a note
            if not path.exists():
                raise FileNotFoundError(path) from None
            copy.with_name(copy.name + ".wal").unlink(missing_ok=True)
            copies = {copy: _copy(path, copy)}
            outcome.notes.append(f"{name} was copied byte for byte, not under DuckDB's lock "
                                 f"({exc}): it may not open")  # fmt: skip
        for copied, entry in copies.items():
            keep(copied, entry)
    elif kind == "file" and not (
        name.endswith(SKIPPED_SUFFIX) or _is_companion(path) or _is_duckdb_wal(path)
    ):
        keep(copy, (_copy_sqlite if _is_sqlite(path) else _copy)(path, copy))


def _finish(outcome: Outcome, manifest: dict, started: float) -> Outcome:
    outcome.files = len(manifest["files"])
    outcome.bytes = sum(entry["size"] for entry in manifest["files"].values())
    outcome.seconds = time.monotonic() - started
    return outcome


def _inside(root: Path, name: str) -> Path:
    """``root/name`` for a path the manifest names; one that is absolute, climbs out or lies
    outside ``data/`` and ``postgres-dumps/`` is refused: a damaged or forged manifest makes a
    restore write nothing elsewhere."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or path.parts[:1] not in ((DATA,), (DUMPS,)):
        raise BackupError(f"{root / MANIFEST}: the path {name!r} is not one a backup holds")
    return root.joinpath(*path.parts)


def _problems(source: Path, manifest: dict) -> list[str]:
    problems = []
    for name, entry in manifest["files"].items():
        path = _inside(source, name)
        if path.is_symlink() or not path.is_file():
            problems.append(f"{name} is missing")
        elif (size := path.stat().st_size) != entry["size"]:
            problems.append(f"{name} holds {size} bytes, the manifest says {entry['size']}")
        elif (digest := _hash(path)["sha256"]) != entry["sha256"]:
            problems.append(f"{name} has sha256 {digest}, the manifest {entry['sha256']}")
    for name, target in manifest["links"].items():
        path = _inside(source, name)
        if not path.is_symlink() or os.readlink(path) != target:
            problems.append(f"{name} is not the link to {target!r} the manifest records")
    listed = {*manifest["files"], *manifest["links"], *manifest["folders"], MANIFEST}
    for kind, path in _entries(source, set()):
        name = path.relative_to(source).as_posix()
        if kind != "dir" and name not in listed:
            problems.append(f"{name} is not in the manifest")
    return problems


def verify(source: Path) -> dict:
    """The backup's manifest, once every file it lists is there with its size and sha256, every
    link with its target, and nothing else is; else ``BackupError`` naming what differs."""
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{source}: no readable {MANIFEST} ({exc}): not a leap backup") from None
    found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
    if found != FORMAT:
        raise BackupError(f"{source / MANIFEST}: format={found!r}, expected {FORMAT!r}")
    lacking = [
        key for key in ("source", "files", "links", "folders", "dumps") if key not in manifest
    ]
    if lacking:
        raise BackupError(f"{source / MANIFEST} lacks {lacking}: not a whole leap backup")
    for name in manifest["folders"]:
        _inside(source, name)
    problems = _problems(source, manifest)
    if problems:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise BackupError(f"{source} does not match its manifest, so nothing was restored: "
                          f"{'; '.join(problems[:5])}{more}")  # fmt: skip
    return manifest


def restore(source: Path, data: Path) -> Outcome:
    """Restore the backup in ``source`` into the new data folder ``data``: every file checked
    against the manifest first, then copied and checked again as it is written."""
    started, source, data = time.monotonic(), source.resolve(), data.resolve()
    _check_new(data, "--data")
    manifest = verify(source)

    def placed(root: Path, name: str) -> Path:  # data/x/y in the backup: x/y in the folder
        return root.joinpath(*PurePosixPath(name).parts[1:])

    with _built_beside(data, "restoring") as staging:
        for name in manifest["folders"]:
            placed(staging, name).mkdir(parents=True, exist_ok=True)
        for name, entry in manifest["files"].items():
            copy = placed(staging, name)
            if name.startswith(f"{DATA}/") and _copy(_inside(source, name), copy) != entry:
                raise BackupError(f"{source / name} changed while it was restored")
        for name, target in manifest["links"].items():
            os.symlink(target, placed(staging, name))
        store, old = staging / "mlflow" / "mlflow.db", Path(manifest["source"])
        if store.is_file() and _is_sqlite(store):
            relocate_mlflow(store, old, data)
        relocate_records(staging / "records", old, data)
        if manifest["dumps"]:
            dumps = {db: _inside(source, name) for db, name in manifest["dumps"].items()}
            pg.load_dumps(staging / POSTGRES, dumps)
        for name, mode in sorted(manifest["folders"].items(), reverse=True):
            placed(staging, name).chmod(mode)  # last: a folder without write access is full
        if not manifest["dumps"] and (staging / POSTGRES).is_dir():
            pg.give_to_postgres(staging / POSTGRES)
    return _finish(Outcome(data), manifest, started)
