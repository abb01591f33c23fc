"""Atomic publication: what one process writes for others to read appears whole or not at all.

A file is written into a temporary sibling, flushed to disk and renamed over the target. A folder
is written into a hidden versioned sibling (``.name.<token>``), closed by ``MANIFEST.json`` with
the sha256 of every file, and published by atomically replacing the symlink ``name`` with one
that points at it; the previous version is removed only after the swap. A crash at any point
leaves either the previous version or the new one behind ``name``, never a mix, and a folder
without a manifest that matches its files is refused by ``verify_folder``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

MANIFEST = "MANIFEST.json"
STALE_AFTER_S = 3600.0  # a hidden version this old that nothing points at is a crash's leftover


class PublicationError(RuntimeError):
    """A published folder is incomplete or altered; the message names the file."""


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` in one step: readers see the old file or the new one.
    A file replaced keeps its mode (a 0600 file is never readable by others, not even for a
    moment); a new one gets the process's umask."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:12]}"
    payload = data.encode() if isinstance(data, str) else data
    try:
        mode = stat.S_IMODE(path.stat().st_mode) & 0o777
    except FileNotFoundError:
        mode = 0o666
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(tmp, flags, mode), "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def _hash_tree(folder: Path) -> dict[str, str]:
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != MANIFEST:
            files[path.relative_to(folder).as_posix()] = sha256_file(path)
    return files


def publish_folder(target: str | Path, write: Callable[[Path], dict[str, Any] | None]) -> Path:
    """Build a folder with ``write(folder)`` and publish it at ``target`` atomically.

    ``write`` fills the empty folder it is given and may return extra manifest entries. Returns
    the real (versioned) folder the ``target`` symlink now points at.
    """
    target = Path(target)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    version = parent / f".{target.name}.{token}"
    version.mkdir()
    try:
        extra = write(version) or {}
        manifest = {"files": _hash_tree(version), **extra}
        for path in version.rglob("*"):
            if path.is_file() and not path.is_symlink():
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
        write_atomic(version / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
        previous = target.resolve() if target.is_symlink() else None
        link = parent / f".{target.name}.link-{token}"
        link.symlink_to(version.name)
        if target.exists() and not target.is_symlink():
            # a plain folder from before atomic publication: set aside, then replaced
            _check_replaceable(target)
            previous = parent / f".{target.name}.{token}.legacy"
            target.rename(previous)
        os.replace(link, target)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(version, ignore_errors=True)
        (parent / f".{target.name}.link-{token}").unlink(missing_ok=True)
        raise
    if (
        previous is not None
        and previous.parent == parent.resolve()
        and previous != version.resolve()
    ):
        shutil.rmtree(previous, ignore_errors=True)
    remove_stale_versions(target)
    return version


# files by which a plain folder is known as an earlier LEAP publication (a night's models, a
# model, an import's staging), and so may be replaced
_EARLIER_OUTPUT = ("trained.json", "metadata.json", "hardware_specs.parquet")


def _check_replaceable(target: Path) -> None:
    if not target.is_dir() or not any((target / name).is_file() for name in _EARLIER_OUTPUT):
        raise PublicationError(
            f"refusing to replace {target}: it exists and is not a folder LEAP published; "
            "choose another path or move it aside"
        )


def remove_stale_versions(target: str | Path, min_age_s: float = STALE_AFTER_S) -> list[Path]:
    """Delete hidden versions of ``target`` it does not point at and that are older than
    ``min_age_s``: leftovers of a crashed publication. Younger ones may belong to a writer
    still at work."""
    target = Path(target)
    current = target.resolve().name if target.is_symlink() else None
    removed = []
    now = time.time()
    for path in target.parent.glob(f".{target.name}.*"):
        if path.name == current:
            continue
        try:
            if now - path.lstat().st_mtime < min_age_s:
                continue
        except FileNotFoundError:
            continue
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def read_manifest(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise PublicationError(
            f"{folder} has no {MANIFEST}: it was never completely written"
        ) from None
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise PublicationError(f"{path} cannot be read: {exc!r:.300}") from exc


def verify_files(folder: str | Path, expected: dict[str, str]) -> None:
    """Every file named in ``expected`` exists under ``folder`` with that sha256."""
    folder = Path(folder)
    for name, digest in sorted(expected.items()):
        path = folder / name
        if not path.is_file():
            raise PublicationError(f"{path} is missing")
        actual = sha256_file(path)
        if actual != digest:
            raise PublicationError(
                f"{path} has sha256 {actual[:16]}..., its manifest records {digest[:16]}...: "
                "the file was altered or only partly written"
            )


def verify_folder(folder: str | Path) -> dict[str, Any]:
    """The folder's manifest, after checking every file it names; raises ``PublicationError``."""
    folder = Path(folder).resolve()
    manifest = read_manifest(folder)
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise PublicationError(f"{folder / MANIFEST} lists no files")
    verify_files(folder, files)
    return manifest


def manifest_stamp(folder: str | Path) -> str | None:
    """A cheap identity of the published version: the sha256 of its manifest, or None."""
    with contextlib.suppress(OSError):
        return sha256_file(Path(folder) / MANIFEST)
    return None
