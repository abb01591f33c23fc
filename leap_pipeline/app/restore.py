"""``leap restore``: a backup checked whole, then written into a new data folder.

A restore checks every file against the manifest before it writes anything. It writes a new
folder only, and it points the absolute paths the stores recorded at that folder
(``relocate``), so the restored install reads nothing of the original.

Whoever can write to the backup store can edit a backup, so a restore trusts nothing in it: a
link must be relative and stay inside the folder (and nothing may lie beneath one), a folder's
mode may give no write access to others and no setuid or setgid bit, the folder is built at 0700,
its files are created 0600, never through a link, and nothing is relocated or chowned through a
link. A dump's SQL runs as a role with no privilege beyond its own databases, and a database
that comes back holding a function, trigger, rule, extension or setting is refused
(``backup_postgres.load_dumps``). A Postgres folder copied while stopped is refused when its
configuration runs a program, loads a library or names a file (``check_copied_config``), or when
a database in it holds what a dump may not (``check_copied_server``). Restore trusted backups
only all the same: the stores' contents are the install's own.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path, PurePosixPath

from leap_pipeline.app import backup_postgres as pg
from leap_pipeline.app.backup import (
    DATA,
    DUMPS,
    FORMAT,
    MANIFEST,
    POSTGRES,
    UNSAFE_FOLDER_BITS,
    BackupError,
    Outcome,
    built_beside,
    check_new,
    copy_file,
    entries,
    file_digest,
    finish,
    is_sqlite,
)
from leap_pipeline.app.relocate import relocate_mlflow, relocate_records


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
        elif (digest := file_digest(path)["sha256"]) != entry["sha256"]:
            problems.append(f"{name} has sha256 {digest}, the manifest {entry['sha256']}")
    for name, target in manifest["links"].items():
        path = _inside(source, name)
        if not path.is_symlink() or os.readlink(path) != target:
            problems.append(f"{name} is not the link to {target!r} the manifest records")
    listed = {*manifest["files"], *manifest["links"], *manifest["folders"], MANIFEST}
    for kind, path in entries(source, set()):
        name = path.relative_to(source).as_posix()
        if kind != "dir" and name not in listed:
            problems.append(f"{name} is not in the manifest")
    return problems


def _check_links_and_modes(source: Path, manifest: dict) -> None:
    """Refuse, before any file is read, a manifest whose restore could reach outside its new
    folder or open it to others: a link that is not text, is absolute or climbs out of
    ``data/``, an entry beneath a link (its path would lead through it), a folder mode that
    is not 0-0o7777 or gives others write access, setuid or setgid."""
    where = source / MANIFEST
    for name in [*manifest["files"], *manifest["links"], *manifest["folders"]]:
        _inside(source, name)
    for name, target in manifest["links"].items():
        if not isinstance(target, str) or not target or "\0" in target:
            raise BackupError(f"{where}: the link {name!r} has target {target!r}, not a path")
        if os.path.isabs(target):
            raise BackupError(
                f"{where}: the link {name!r} has the absolute target {target!r}; "
                "a backup holds relative links inside its folder only"
            )
        # from where the link sits in the restored folder (``data/`` is that folder itself)
        inside = PurePosixPath(*PurePosixPath(name).parts[1:])
        landing = os.path.normpath(os.path.join(str(inside.parent), target))
        if landing == ".." or landing.startswith("../"):
            raise BackupError(
                f"{where}: the link {name!r} to {target!r} leads out of the "
                "folder; a backup holds links inside it only"
            )
    links = set(manifest["links"])
    for name in [*manifest["files"], *manifest["links"], *manifest["folders"]]:
        parents = {parent.as_posix() for parent in PurePosixPath(name).parents}
        if through := parents & links:
            raise BackupError(
                f"{where}: {name!r} lies beneath the link {min(through)!r}, "
                "which a backup never holds"
            )
    for name, mode in manifest["folders"].items():
        if type(mode) is not int or not 0 <= mode <= 0o7777 or mode & UNSAFE_FOLDER_BITS:
            shown = oct(mode) if type(mode) is int else repr(mode)
            raise BackupError(
                f"{where}: the folder {name!r} has mode {shown}; a restore gives "
                "no folder write access for others, setuid or setgid"
            )


def _check_placed_links(staging: Path, manifest: dict) -> None:
    """Every link as placed, resolved for real (through any other link), lands inside the
    folder: a chain of links each inside on its face can still lead out."""
    root = staging.resolve()
    for name in manifest["links"]:
        placed = staging.joinpath(*PurePosixPath(name).parts[1:])
        if not placed.resolve().is_relative_to(root):
            raise BackupError(
                f"{name}: the link leads out of the restored folder (through "
                f"{os.readlink(placed)!r}); a backup holds links inside it only"
            )


def _check_shapes(where: Path, manifest: dict) -> None:
    """The manifest's tables are what this code writes: a hand-edited one that is not is a
    ``BackupError`` naming the key, never a ``TypeError`` from deeper in."""
    for key in ("files", "links", "folders", "dumps"):
        if not isinstance(manifest[key], dict):
            raise BackupError(f"{where}: {key} is not a mapping: not a whole leap backup")
    for name, entry in manifest["files"].items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and type(entry.get("size")) is int
        ):
            raise BackupError(f"{where}: the file {name!r} has no sha256 and size")
    for name in [*manifest["dumps"].values(), str(manifest.get("source", ""))]:
        if not isinstance(name, str):
            raise BackupError(f"{where}: {name!r} is not a path")


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
    _check_shapes(source / MANIFEST, manifest)
    _check_links_and_modes(source, manifest)
    problems = _problems(source, manifest)
    if problems:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise BackupError(
            f"{source} does not match its manifest, so nothing was restored: "
            f"{'; '.join(problems[:5])}{more}"
        )
    return manifest


def restore(source: Path, data: Path) -> Outcome:
    """Restore the backup in ``source`` into the new data folder ``data``: every file checked
    against the manifest first, then copied and checked again as it is written."""
    started, source, data = time.monotonic(), source.resolve(), data.resolve()
    check_new(data, "--data")
    manifest = verify(source)

    def placed(root: Path, name: str) -> Path:  # data/x/y in the backup: x/y in the folder
        return root.joinpath(*PurePosixPath(name).parts[1:])

    with built_beside(data, "restoring", mode=0o700) as staging:
        for name in manifest["folders"]:
            placed(staging, name).mkdir(mode=0o700, parents=True, exist_ok=True)
        for name, entry in manifest["files"].items():
            copy = placed(staging, name)
            if (
                name.startswith(f"{DATA}/")
                and copy_file(_inside(source, name), copy, keep_mode=False) != entry
            ):
                raise BackupError(f"{source / name} changed while it was restored")
        for name, target in manifest["links"].items():
            os.symlink(target, placed(staging, name))
        _check_placed_links(staging, manifest)  # before anything is written through one
        store, old = staging / "mlflow" / "mlflow.db", Path(manifest["source"])
        if store.is_file() and is_sqlite(store):
            relocate_mlflow(store, old, data)
        if not (staging / "records").is_symlink():  # relocated in place, never through a link
            relocate_records(staging / "records", old, data)
        if manifest["dumps"]:
            dumps = {db: _inside(source, name) for db, name in manifest["dumps"].items()}
            pg.load_dumps(staging / POSTGRES, dumps)
        for name, mode in sorted(manifest["folders"].items(), reverse=True):
            placed(staging, name).chmod(mode)  # last: a folder without write access is full
        if not manifest["dumps"] and (staging / POSTGRES).is_dir():
            pg.check_copied_config(staging / POSTGRES)  # before anything starts it
            pg.give_to_postgres(staging / POSTGRES)
            pg.check_copied_server(staging / POSTGRES)
    outcome = finish(Outcome(data), manifest, started)
    if manifest.get("secrets") == "left out":
        keep = (
            " but keep the new postgres-password and pgpass the restore's Postgres was created with"
            if manifest["dumps"]
            else ""
        )
        outcome.notes.append(
            f"the backup holds no secrets/: put yours back in {data / 'secrets'} (0700){keep}"
        )
    return outcome
