"""A registry version in one file: loading a version is one download, not one per file.

A version stored by ``mlflow.pyfunc.log_model`` is about 90 files (its artifacts, MLflow's
files and the ``leap_serving`` package it ships). Downloaded file by file from an MLflow server
behind basic auth, each request checks the password again: in-process ``leap rank`` took 26 s
of wall time on 3 s of CPU, and ``leap serve`` about 15 s to load a version. Registration
therefore also stores the whole version as one uncompressed tar (``BUNDLE_FILE`` under the
run's ``BUNDLE_DIR``), named with its sha256 in the version's ``BUNDLE_TAG``; the loaders fetch
that file alone, extract it into a folder of their own and check every file in it against the
version's other tags exactly as they check a folder downloaded file by file
(``registered.fetch_registered``). The tar holds regular files and folders only, in a sorted
order with fixed times, and is extracted with the standard library's ``data`` filter (no
absolute names, no ``..``, no links, no devices, no setuid): a tar rewritten in the store is
refused by its sha256 before anything of it is written, and a file in it that differs from the
registry's record is refused by name after.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

from ..model.publish import sha256_file
from ..model.published import ModelArtifactError
from .rest import rest_registry
from .shipped import CACHE, REGISTERED_META

BUNDLE_TAG = "model_bundle"  # on each registry version: JSON {"path", "sha256", "files"}
BUNDLE_DIR = "model_bundle"  # the run's artifact folder that holds the tar
BUNDLE_FILE = "model.tar"
# a tar of a version is a few MB; one far larger is no version registration wrote
MAX_BUNDLE_BYTES = 1 << 30
# the extraction filter that refuses links, absolute names and ``..`` (Python 3.11.4 and later)
HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def bundle_files(model_dir: str | Path) -> list[Path]:
    """Every file of a stored model the bundle holds, sorted: all but MLflow's download record
    and caches. A link or anything but a regular file is refused: registration stores none."""
    root = Path(model_dir)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d != CACHE)
        for name in (*dirnames, *filenames):
            path = here / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise ModelArtifactError(
                    f"{path} is not a regular file or folder: a stored model holds none"
                )
        top = here == root
        found += [here / name for name in filenames if not (top and name == REGISTERED_META)]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def write_bundle(model_dir: str | Path, out: str | Path) -> dict:
    """Write the stored model ``model_dir`` as one tar at ``out``; returns the record for
    ``BUNDLE_TAG`` (its sha256 and how many files it holds; the path is the caller's). The
    same folder gives the same bytes: names sorted, times, owners and modes fixed."""
    root = Path(model_dir)
    files = bundle_files(root)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return {"sha256": sha256_file(Path(out)), "files": len(files)}


def bundle_record(tags: dict[str, str], label: str) -> dict | None:
    """A version's ``BUNDLE_TAG`` record, or None for a version registered before bundles (its
    files are then fetched one by one)."""
    text = tags.get(BUNDLE_TAG)
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise ModelArtifactError(f"{label}: {BUNDLE_TAG} is not JSON") from exc
    named = isinstance(record, dict) and all(
        isinstance(record.get(key), str) for key in ("path", "sha256")
    )
    if not named:
        raise ModelArtifactError(f"{label}: {BUNDLE_TAG} names no path and sha256: {text:.80}")
    return record


def fetch_bundle(run_id: str, record: dict, label: str, dst: Path) -> Path:
    """Download the version's tar (one file) into ``dst``, check it against ``record``'s
    sha256 and extract it into ``dst / "model"``; returns that folder. Its files are still to be
    checked against the version's other tags (the caller does)."""
    # by the run, whose artifact location the store keeps (a restored folder's is relocated;
    # a URI kept on the tag would still name the original folder)
    try:
        local = _download(run_id, record["path"], dst)
    except Exception as exc:  # MLflow raises several types for a missing file or server
        raise ModelArtifactError(f"cannot download {label}'s {record['path']}: {exc}") from exc
    if not local.is_file() or local.stat().st_size > MAX_BUNDLE_BYTES:
        raise ModelArtifactError(f"{label}'s {record['path']} is no file of a stored model")
    if sha256_file(local) != record["sha256"]:
        raise ModelArtifactError(
            f"{label}'s {record['path']} does not match the sha256 recorded on {label} "
            f"({BUNDLE_TAG}): the version's files were replaced after registration"
        )
    folder = dst / "model"
    folder.mkdir(mode=0o700)
    try:
        with tarfile.open(local) as tar:
            tar.extractall(folder, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise ModelArtifactError(f"{label}'s {record['path']} cannot be extracted: {exc}") from exc
    local.unlink()
    return folder


def _download(run_id: str, path: str, dst: Path) -> Path:
    """The run's artifact ``path`` in ``dst``: over the tracking server's REST API when its
    artifacts are proxied by it (``rest.py``), else through MLflow."""
    rest = rest_registry()
    local = rest and rest.download_run_artifact(run_id, path, dst, MAX_BUNDLE_BYTES)
    if local:
        return local
    import mlflow

    return Path(
        mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=str(dst))
    )
