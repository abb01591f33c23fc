"""The published model: what a nightly run ships and what serving loads.

One folder of plain files, stored as the artifacts of one MLflow model: the cascade (JSON with
each booster's trees as LightGBM's text model, ``model_file.py``; never pickle), the history
snapshot as of the evaluation day and the hardware spec table (Parquet), ``metadata.json`` with
the feature list, the code version, the training window and the novelty reference
(``novelty.py``), and ``MANIFEST.json`` with the sha256 of each file. The folder is published
atomically (``publish.py``).

Loading trusts nothing it is handed: every file must match the manifest (and the hashes recorded
on the registry version, when it came from the registry: ``registry.registered``) before
anything is read, and the cascade file is read as data only, every field checked, so no file can
run code. The feature list must be this code's. Nothing here imports MLflow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from ..launch.contract import schema
from ..launch.features import FEATURE_COLUMNS, PRIOR_COLUMNS, launch_matrix
from ..launch.history import HistoryIndex
from ..launch.snapshot import SNAPSHOT_SCHEMA
from ..launch.specs import SpecTable
from .cascade import BinnedCascade
from .intervals import ConformalIntervals
from .model_file import ModelFileError, dump_model, load_model
from .novelty import NoveltyReference
from .publish import PublicationError, publish_folder, verify_files

if TYPE_CHECKING:  # the compiled walk imports numba: only the callers that walk pay for it
    from .compiled import CompiledCascade

ARTIFACTS: dict[str, str] = {
    "cascade": "cascade.json",
    "history_snapshot": "history_snapshot.parquet",
    "hardware_specs": "hardware_specs.parquet",
    "metadata": "metadata.json",
    "manifest": "MANIFEST.json",
}


# what an earlier leap called the cascade file (scikit-learn trees through skops)
LEGACY_CASCADE = "cascade.skops"


class ModelArtifactError(RuntimeError):
    """An artifact cannot be loaded or does not match this code; the message says which part."""


# the libraries whose version changes what a loaded model computes (LightGBM only trains: a
# loaded model's trees are walked from their text, ``trees.py``)
MODEL_PACKAGES = ("scikit-learn", "numpy", "numba", "polars")


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in MODEL_PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "missing"
    return found


def dependency_drift(metadata: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Libraries whose version here differs from the one the model was saved with:
    name -> (saved, here)."""
    saved = metadata.get("package_versions") or {}
    here = package_versions()
    return {n: (saved[n], here[n]) for n in saved if n in here and saved[n] != here[n]}


def code_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("leap")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class LeapModel:
    cascade: BinnedCascade
    history_snapshot: pl.DataFrame
    hardware_specs: pl.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)
    history_index: HistoryIndex | None = field(default=None, repr=False)
    spec_table: SpecTable | None = field(default=None, repr=False)
    novelty: NoveltyReference | None = field(default=None, repr=False)
    intervals: ConformalIntervals | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.history_index is None:  # built once: every prediction reads it
            self.history_index = HistoryIndex.from_snapshot(self.history_snapshot)
        if self.spec_table is None:  # likewise
            self.spec_table = SpecTable.from_frame(self.hardware_specs)
        if self.novelty is None:  # None still for a model saved before novelty existed
            self.novelty = NoveltyReference.from_dict(self.metadata.get("novelty"))
        if self.intervals is None:  # None still for a model saved before intervals existed
            self.intervals = ConformalIntervals.from_dict(self.metadata.get("intervals"))

    def save(self, folder: str | Path) -> dict[str, str]:
        """Publish the artifact files at ``folder`` atomically; returns the MLflow ``artifacts``
        mapping (name -> path in the published version)."""

        def write(version: Path) -> dict[str, Any]:
            paths = {name: version / file for name, file in ARTIFACTS.items()}
            dump_model(self.cascade, paths["cascade"])
            self.history_snapshot.write_parquet(paths["history_snapshot"])
            self.hardware_specs.write_parquet(paths["hardware_specs"])
            metadata = {
                "feature_columns": list(FEATURE_COLUMNS),
                "prior_columns": list(PRIOR_COLUMNS),
                "code_version": code_version(),
                "package_versions": package_versions(),
                **self.metadata,
            }
            paths["metadata"].write_text(json.dumps(metadata, indent=2, sort_keys=True))
            return None

        version = publish_folder(folder, write)
        return {name: str(version / file) for name, file in ARTIFACTS.items()}

    @classmethod
    def load(
        cls,
        artifacts: dict[str, str] | str | Path,
        expected_sha256: dict[str, str] | None = None,
        recorded_by: str = "on the registry version",
    ) -> LeapModel:
        """Load from an artifacts mapping (as MLflow passes it) or a published folder.

        ``expected_sha256`` (file name -> sha256, as the registry version records them, or the
        model's config; ``recorded_by`` says which, for the error) must equal what the manifest
        records; every file must match its hash before anything loads.
        """
        if not isinstance(artifacts, dict):
            folder = Path(artifacts).resolve()  # one version, even if the pointer moves meanwhile
            artifacts = {name: str(folder / file) for name, file in ARTIFACTS.items()}
        missing = [name for name in ARTIFACTS if not Path(artifacts.get(name, "")).is_file()]
        if missing:
            raise ModelArtifactError(f"model artifact lacks {missing}")
        check_artifacts(artifacts, expected_sha256, recorded_by)
        metadata = read_metadata(artifacts["metadata"])
        cascade = load_cascade(artifacts["cascade"])
        snapshot = read_frame(artifacts["history_snapshot"], SNAPSHOT_SCHEMA)
        specs = read_frame(artifacts["hardware_specs"], schema("hardware_specs"))
        check_spec_table(specs, artifacts["hardware_specs"])
        check_snapshot(snapshot, artifacts["history_snapshot"])
        try:
            return cls(cascade, snapshot, specs, metadata)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            # the novelty reference or the intervals in metadata.json, or the snapshot's values
            raise ModelArtifactError(
                f"{artifacts['metadata']} or the snapshot cannot be served: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def predict(
        self, launches: pl.DataFrame, compiled: CompiledCascade | None = None
    ) -> pl.DataFrame:
        """Predicted throughput, bin and bin probability for launch rows (one per candidate).

        ``compiled`` (this model's cascade compiled, as the Ranker and the pyfunc hold it) walks
        a ranking's rows as groups through the trees (``trees.walk_group``); without it each
        booster walks the rows on its own: the same numbers."""
        X = launch_matrix(launches, self.spec_table, self.history_index)
        if compiled is None:
            bins, probability = self.cascade.predict_bins(X)
            log_q = self.cascade.predict(X)
        else:
            log_q, bins, probability = compiled.predict(X)
        return pl.DataFrame(
            {
                "predicted_throughput": np.exp(log_q),
                "bin": bins,
                "bin_probability": probability,
                "history_found": X[:, FEATURE_COLUMNS.index("hist_cold_start")] == 0.0,
            }
        )


def read_metadata(path: str | Path) -> dict[str, Any]:
    """``metadata.json``: a JSON object whose feature list and history-prior order are this
    code's."""
    try:
        metadata = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelArtifactError(f"{path} cannot be read: {type(exc).__name__}: {exc}") from exc
    if not isinstance(metadata, dict):
        raise ModelArtifactError(f"{path} holds a {type(metadata).__name__}, not an object")
    if metadata.get("feature_columns") != list(FEATURE_COLUMNS):
        raise ModelArtifactError(
            f"{path}: feature_columns: the model was trained on another feature list than this "
            f"code extracts (artifact code version {metadata.get('code_version')!r:.40}, this "
            f"{code_version()})"
        )
    # the order the history prior is read in: a residual model predicts prior + correction, so
    # another order gives it another prior and wrong predictions without an error. A model that
    # records none was saved before the record, under this feature list, which came with this
    # order (the two changed together)
    if metadata.get("prior_columns", list(PRIOR_COLUMNS)) != list(PRIOR_COLUMNS):
        raise ModelArtifactError(
            f"{path}: prior_columns: the model reads its history prior in another order than "
            f"this code ({metadata.get('prior_columns')!r:.200}); retrain it (one night), or "
            f"serve it with the code it was trained by ({metadata.get('code_version')!r:.40})"
        )
    return metadata


def read_frame(path: str | Path, expected: pl.Schema) -> pl.DataFrame:
    """A Parquet file of the model holding ``expected``'s columns with their types, in order."""
    try:
        frame = pl.read_parquet(path)
    except (Exception, pl.exceptions.PanicException) as exc:  # a panic is a BaseException
        raise ModelArtifactError(f"{path} cannot be read: {type(exc).__name__}: {exc}") from exc
    found = frame.schema
    for name, dtype in expected.items():
        if found.get(name) != dtype:
            raise ModelArtifactError(f"{path}: column {name} is {found.get(name)}, not {dtype}")
    return frame.select(expected.names())


def check_spec_table(specs: pl.DataFrame, path: str | Path) -> None:
    """The spec table a ranking prices from: each type named once, a positive finite price and
    host size, a premium flag."""
    types = specs["hardware_type"]
    if specs.height == 0:
        raise ModelArtifactError(f"{path}: the spec table is empty: no candidate can be priced")
    if types.null_count() or types.n_unique() != len(types):
        raise ModelArtifactError(f"{path}: hardware_type is null or repeated")
    for column in ("hourly_cost_usd", "devices_per_host"):
        values = specs[column].to_numpy()
        if not np.all(np.isfinite(values) & (values > 0)):
            bad = values[~(np.isfinite(values) & (values > 0))][0]
            raise ModelArtifactError(f"{path}: {column}={bad} is not a positive finite number")
    if specs["premium"].null_count():
        raise ModelArtifactError(f"{path}: premium is null")


# a history level is ln q: a throughput of e^100 samples/s is no measurement
MAX_HISTORY_LOG_Q = 100.0


def check_snapshot(snapshot: pl.DataFrame, path: str | Path) -> None:
    """The history levels a launch's features and priors read: finite where present (null is
    "no history"), within ``MAX_HISTORY_LOG_Q``, and counts of at least one run."""
    for column in ("mean_log_q", "std_log_q", "prev_log_q"):
        values = snapshot[column].drop_nulls().to_numpy()
        bad = values[~(np.abs(values) <= MAX_HISTORY_LOG_Q)]  # NaN fails too
        if len(bad):
            raise ModelArtifactError(f"{path}: {column}={bad[0]} is not a history level")
    if (snapshot["count"].drop_nulls() < 1).any():
        raise ModelArtifactError(f"{path}: count below 1")


def load_cascade(path: str | Path) -> BinnedCascade:
    """The cascade file of a model folder; a refusal is a ``ModelArtifactError`` naming it."""
    try:
        return load_model(path, BinnedCascade, n_features=len(FEATURE_COLUMNS))
    except ModelFileError as exc:
        raise ModelArtifactError(str(exc)) from exc


def check_artifacts(
    artifacts: dict[str, str],
    expected_sha256: dict[str, str] | None = None,
    recorded_by: str = "on the registry version",
) -> dict[str, Any]:
    """The manifest of a model's files, after checking each file against it (and the manifest
    against the hashes recorded at registration, ``recorded_by`` saying where); raises
    ``ModelArtifactError`` naming the file."""
    manifest_path = Path(artifacts["manifest"])
    try:
        manifest = json.loads(manifest_path.read_text())
        recorded = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ModelArtifactError(f"{manifest_path} cannot be read: {exc!r:.300}") from exc
    names = {ARTIFACTS[k] for k in ARTIFACTS if k != "manifest"}
    if isinstance(recorded, dict) and LEGACY_CASCADE in recorded:
        raise ModelArtifactError(
            f"{manifest_path.parent} holds a model saved in the skops format of an earlier leap, "
            "which this version does not read: train a night again (the latest day's "
            "cascade_model) to publish one it serves"
        )
    if not isinstance(recorded, dict) or set(recorded) != names:
        raise ModelArtifactError(
            f"{manifest_path} records files {recorded!r}, a model has {sorted(names)}"
        )
    if expected_sha256 is not None and expected_sha256 != recorded:
        expected = expected_sha256 if isinstance(expected_sha256, dict) else {}
        differ = sorted(n for n in {*expected, *recorded} if expected.get(n) != recorded.get(n))
        raise ModelArtifactError(
            f"{manifest_path} does not match the sha256 recorded {recorded_by} (files {differ}): "
            "the artifact was replaced after registration"
        )
    by_name = {ARTIFACTS[k]: Path(v) for k, v in artifacts.items()}
    try:
        for name, digest in recorded.items():
            verify_files(by_name[name].parent, {by_name[name].name: digest})
    except PublicationError as exc:
        raise ModelArtifactError(str(exc)) from exc
    return manifest
