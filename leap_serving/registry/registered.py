"""A registered model fetched from the MLflow registry and checked before anything in it is read.

A registry version carries the sha256 of its artifacts (``artifact_sha256``) and of every file it
ships beside them (``code_sha256``, ``shipped``). ``load_registered`` resolves an alias once,
downloads that version, checks every file against its tags from installed code, and loads the
artifacts as data (``model.published.LeapModel.load``): no file of the version runs. Kept in the
MLflow subpackage, with MLflow imported inside the functions, so the model itself knows nothing
of MLflow and importing this module loads none of it; a tracking server is read over its REST
API (``rest.py``) and MLflow is not imported at all.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from ..model.published import LeapModel, ModelArtifactError
from .bundle import HAS_DATA_FILTER, bundle_record, fetch_bundle
from .rest import RegistryReadError, VersionRecord, rest_registry
from .shipped import CODE_SHA256_TAG, differences, drop_caches

SHA256_TAG = "artifact_sha256"  # on each registry version: JSON, file name -> sha256
# on the registered model: JSON {day, outcome, note, at} of the newest night's end, written by
# the pipeline (promoted, held, failed) and read by the serving side's /metrics
LAST_NIGHT_TAG = "last_night"


def _split_model_uri(model_uri: str) -> tuple[str, str | None, str | None]:
    """``models:/name@alias`` -> (name, alias, None); ``models:/name/N`` -> (name, None, N)."""
    if not model_uri.startswith("models:/"):
        raise ModelArtifactError(f"model_uri={model_uri!r} is not a models:/ URI")
    path = model_uri.removeprefix("models:/")
    if "@" in path:
        name, alias = path.split("@", 1)
        return name, alias, None
    name, _, version = path.rpartition("/")
    if not name or not version:
        raise ModelArtifactError(f"model_uri={model_uri!r} names no alias or version")
    return name, None, version


def load_registered(model_uri: str, version: str | None = None) -> tuple[LeapModel, str]:
    """Download one registry version and load it without going through pyfunc; returns the
    model and its version.

    The alias is resolved once (or not at all when ``version`` is given), and the files are
    fetched by that version number, so a promotion meanwhile cannot mix two versions: one file
    (the version's bundle, ``bundle.py``) when registration stored one. Every file must carry the
    sha256 the version recorded at registration: its artifacts, and the code and MLflow files it
    ships, which this process never runs (``mlflow models serve`` would).
    """
    with tempfile.TemporaryDirectory(prefix="leap-version-") as tmp:
        local, version, expected = fetch_registered(model_uri, version, dst=tmp)
        return LeapModel.load(local / "artifacts", expected_sha256=expected), version


def fetch_registered(
    model_uri: str,
    version: str | None = None,
    dst: str | Path | None = None,
    require_code: bool = False,
) -> tuple[Path, str, dict[str, str]]:
    """One registry version downloaded (into ``dst``, else where MLflow puts it: in place, for a
    local store) and every file it ships beside its artifacts checked against the version's
    ``code_sha256`` tag before anything in it is read or run; returns the folder, the version and
    its ``artifact_sha256`` tag, which the caller checks the artifacts against. A copy in ``dst``
    holds no cache (``__pycache__``, recorded nowhere) that a run in place left in the store.
    With ``dst``, a version registered with a bundle is fetched as that one file, checked
    against its ``model_bundle`` tag and extracted there, then checked file by file the same.

    A version registered before the shipped files were recorded has no ``code_sha256``: refused
    when ``require_code`` (the caller will run its code), else fetched with a warning (a caller
    that only reads its artifacts runs none of its code).
    """
    name, alias, named = _split_model_uri(model_uri)
    try:  # one request: the alias's answer is the version's record, tags and all
        record = version_record(name, alias if version is None else None, version or named)
        version = record.version
    except ModelArtifactError:
        raise
    except Exception as exc:  # MLflow raises several types for a missing model or server
        raise ModelArtifactError(f"cannot resolve {model_uri}: {exc}") from exc
    label = f"{name} version {version}"
    expected = tag_record(record.tags, SHA256_TAG, label)
    shipped = tag_record(record.tags, CODE_SHA256_TAG, label, required=require_code)
    bundle = bundle_record(record.tags, label)
    # the tar's ``data`` filter came with Python 3.11.4: without it, file by file
    if dst is not None and bundle is not None and record.run_id and HAS_DATA_FILTER:
        local = fetch_bundle(record.run_id, bundle, label, Path(dst))
    else:
        import mlflow

        try:
            uri = f"models:/{name}/{version}"
            target = None if dst is None else str(dst)
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=target))
        except Exception as exc:  # MLflow raises several types for a missing model or server
            raise ModelArtifactError(f"cannot download {label}: {exc}") from exc
    if shipped is None:
        logging.getLogger("leap_serving").warning(
            "leap_serving: %s carries no %s tag (registered before the files it ships beside "
            "its artifacts were recorded): its artifacts are checked, its code cannot be",
            label,
            CODE_SHA256_TAG,
        )
    elif problem := differences(local, shipped):
        raise ModelArtifactError(
            f"{local} does not match the sha256 recorded on {label} ({CODE_SHA256_TAG}): "
            f"{problem}: the model's code or MLflow files were replaced after registration"
        )
    if dst is not None:
        drop_caches(local)
    return local, str(version), expected


def tag_record(
    tags: dict[str, str], key: str, label: str, required: bool = True
) -> dict[str, str] | None:
    """A registry version's sha256 record (JSON, name -> sha256) under ``key``; None when it has
    none and none is ``required``."""
    recorded = tags.get(key)
    if not recorded:
        if not required:
            return None
        raise ModelArtifactError(
            f"{label} carries no {key} tag: it was registered without integrity records and is "
            "refused; register a new version"
        )
    try:
        value = json.loads(recorded)
    except ValueError as exc:
        raise ModelArtifactError(f"{label}: {key} is not JSON") from exc
    if not isinstance(value, dict):
        raise ModelArtifactError(f"{label}: {key} is not a mapping of files to sha256")
    return value


def registry_version(model_uri: str) -> str:
    """The registry version a ``models:/name@alias`` or ``models:/name/N`` URI names now."""
    name, alias, version = _split_model_uri(model_uri)
    return version_record(name, alias, version).version


def version_record(name: str, alias: str | None, version: str | None) -> VersionRecord:
    """The registry's record of one version, by ``alias`` when given, else by number: over
    the REST API (``rest.py``: no MLflow import) for a tracking server, else through MLflow."""
    rest = rest_registry()
    if rest is not None:
        if alias is not None:
            return rest.version_by_alias(name, alias)
        return rest.version(name, str(version))
    from mlflow import MlflowClient

    client = MlflowClient()
    if alias is not None:
        record = client.get_model_version_by_alias(name, alias)
    else:
        record = client.get_model_version(name, str(version))
    return VersionRecord(str(record.version), str(record.run_id or ""), dict(record.tags))


def last_night(model_uri: str) -> dict | None:
    """What the pipeline recorded of its newest night (``LAST_NIGHT_TAG`` on the registered
    model ``model_uri`` names): None for a URI that is not the registry's, a model with no
    record, or a record this code cannot read."""
    try:
        name, _, _ = _split_model_uri(model_uri)
    except ModelArtifactError:
        return None
    try:
        text = model_tags(name).get(LAST_NIGHT_TAG)
    except RegistryReadError:
        return None
    try:
        record = json.loads(text) if text else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def model_tags(name: str) -> dict[str, str]:
    """The registered model's own tags; ``RegistryReadError`` when the registry cannot say
    (MLflow's errors are turned into it, so both paths fail alike)."""
    rest = rest_registry()
    if rest is not None:
        return rest.model_tags(name)
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        return dict(MlflowClient().get_registered_model(name).tags)
    except MlflowException as exc:
        raise RegistryReadError(str(exc)) from exc
