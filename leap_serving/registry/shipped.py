"""What a registered model ships beside its artifacts, and the check of it.

A version of the pyfunc model (``pyfunc.py``) holds, beside its artifact files (recorded in the
version's ``artifact_sha256`` tag), the files MLflow reads or runs to serve it: ``MLmodel``, the
model-code file ``mlflow_model.py``, the ``leap_serving`` package (``code/``, put first on
``sys.path``), the environment files (``requirements.txt``, ``python_env.yaml``, ``conda.yaml``)
and the input example. Registration records the sha256 of every one of them on the version
(``CODE_SHA256_TAG``), and the package's files and the model-code file in the model's config
(``CODE_CONFIG``) as well.

Only a check that runs from installed code and reads the registry holds against someone who can
write the artifact store: the copy of this module the model ships can be rewritten along with the
files it checks (``docs/reliability.md``, "What a folder can promise").
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..model.publish import sha256_file

CODE_SHA256_TAG = "code_sha256"  # on each registry version: JSON, path in the model -> sha256
CODE_CONFIG = "code_sha256"  # model_config key: the package's files and the model-code file
CODE_DIR = "code"  # where MLflow copies ``code_paths`` in a model
# left out of the record: the artifacts (their own tag and manifest) and the file MLflow writes
# into a version's folder each time it downloads one (its name and version)
# what MLflow writes into a downloaded folder: which registry version it is
REGISTERED_META = "registered_model_meta"
NOT_SHIPPED = ("artifacts", REGISTERED_META)
# caches Python and numba write beside code that runs in place (a local store): left out, since
# every run in place writes them; the installed loaders never read them (docs/reliability.md)
CACHE = "__pycache__"


def shipped_files(model_dir: str | Path) -> dict[str, str]:
    """The sha256 of every file of a stored model but its artifacts, MLflow's download record
    and caches: path (POSIX, relative to the model) -> sha256. A link or anything but a regular
    file is listed with a value no sha256 equals, so it never matches a record."""
    root = Path(model_dir)
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):  # never follows a linked folder
        here = Path(dirpath)
        top = here == root
        dirnames[:] = sorted(d for d in dirnames if d != CACHE and not (top and d in NOT_SHIPPED))
        for name in (*dirnames, *sorted(filenames)):
            if top and name in NOT_SHIPPED:
                continue
            path = here / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[relative] = f"a link to {os.readlink(path)}"
            elif name in filenames:
                found[relative] = sha256_file(path) if path.is_file() else "not a regular file"
        dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
    return found


def package_files(package: str | Path, model_code: str | Path) -> dict[str, str]:
    """What ``log_model`` ships of this code, as ``shipped_files`` names it: every file of the
    ``package`` folder under ``code/`` (MLflow copies it without ``__pycache__``) and the
    model-code file at the model's root."""
    package = Path(package)
    files = {}
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames[:] = [d for d in dirnames if d != CACHE]
        for name in filenames:
            if name == CACHE:
                continue
            path = Path(dirpath, name)
            relative = path.relative_to(package).as_posix()
            files[f"{CODE_DIR}/{package.name}/{relative}"] = sha256_file(path)
    files[Path(model_code).name] = sha256_file(model_code)
    return dict(sorted(files.items()))


def differences(model_dir: str | Path, expected: object, complete: bool = True) -> str | None:
    """How the files a stored model ships differ from ``expected`` (path -> sha256, as
    registration recorded them), naming each file, or None when they match. ``complete``: every
    file the model ships must be recorded; else the files ``expected`` names and every file
    under ``code/`` (which is first on ``sys.path``: a file added there shadows any module)."""
    if (
        not isinstance(expected, dict)
        or not expected
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in expected.items())
    ):
        return f"the record {expected!r:.80} is not a mapping of paths to sha256"
    found = shipped_files(model_dir)
    if not complete:
        found = {p: h for p, h in found.items() if p in expected or p.startswith(f"{CODE_DIR}/")}
    kinds = {
        "changed": sorted(p for p in expected if p in found and found[p] != expected[p]),
        "missing": sorted(p for p in expected if p not in found),
        "not recorded": sorted(set(found) - set(expected)),
    }
    return "; ".join(f"{kind} {paths}" for kind, paths in kinds.items() if paths) or None


def drop_caches(model_dir: str | Path) -> None:
    """Delete every cache (``__pycache__``) from a copy of a model, which ``shipped_files``
    leaves out: Python runs an unchecked cached module in place of its checked source. Only for
    a copy the caller owns."""
    for cache in sorted(Path(model_dir).rglob(CACHE), reverse=True):
        if cache.is_symlink() or not cache.is_dir():
            cache.unlink()
        else:
            shutil.rmtree(cache)
