"""The published model: what a nightly run ships and what serving loads.

One folder of plain files, stored as the artifacts of one MLflow model: the cascade (skops, loaded
with an explicit allow-list of types rather than pickle), the history snapshot as of the
evaluation day and the hardware spec table (Parquet), and ``metadata.json`` with the feature list,
the code version, the training window and the headline metrics. Loading refuses an artifact whose
feature list differs from this code's, so a model never meets features it was not trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .cascade import BinnedCascade
from .features import FEATURE_COLUMNS, launch_matrix
from .history import HistoryIndex
from .specs import SpecTable

ARTIFACTS: dict[str, str] = {
    "cascade": "cascade.skops",
    "history_snapshot": "history_snapshot.parquet",
    "hardware_specs": "hardware_specs.parquet",
    "metadata": "metadata.json",
}
# skops loads only these modules' types; anything else in an artifact is refused.
TRUSTED_MODULE_PREFIXES = ("sklearn.", "leap_serving.", "numpy.", "builtins.")


class ModelArtifactError(RuntimeError):
    """An artifact cannot be loaded or does not match this code; the message says which part."""


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

    def __post_init__(self) -> None:
        if self.history_index is None:  # built once: every prediction reads it
            self.history_index = HistoryIndex.from_snapshot(self.history_snapshot)
        if self.spec_table is None:  # likewise
            self.spec_table = SpecTable.from_frame(self.hardware_specs)

    def save(self, folder: str | Path) -> dict[str, str]:
        """Write the artifact files; returns the MLflow ``artifacts`` mapping (name -> path)."""
        import skops.io as sio

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {name: str(folder / file) for name, file in ARTIFACTS.items()}
        sio.dump(self.cascade, paths["cascade"])
        self.history_snapshot.write_parquet(paths["history_snapshot"])
        self.hardware_specs.write_parquet(paths["hardware_specs"])
        metadata = {
            "feature_columns": list(FEATURE_COLUMNS),
            "code_version": code_version(),
            **self.metadata,
        }
        Path(paths["metadata"]).write_text(json.dumps(metadata, indent=2, sort_keys=True))
        return paths

    @classmethod
    def load(cls, artifacts: dict[str, str] | str | Path) -> LeapModel:
        """Load from an artifacts mapping (as MLflow passes it) or a folder of the files."""
        if not isinstance(artifacts, dict):
            folder = Path(artifacts)
            artifacts = {name: str(folder / file) for name, file in ARTIFACTS.items()}
        missing = [name for name in ARTIFACTS if not Path(artifacts.get(name, "")).is_file()]
        if missing:
            raise ModelArtifactError(f"model artifact lacks {missing}")
        metadata = json.loads(Path(artifacts["metadata"]).read_text())
        if metadata.get("feature_columns") != list(FEATURE_COLUMNS):
            raise ModelArtifactError(
                "model artifact was trained on another feature list than this code extracts "
                f"(artifact code version {metadata.get('code_version')}, this {code_version()})"
            )
        return cls(
            cascade=load_skops(artifacts["cascade"], BinnedCascade),
            history_snapshot=pl.read_parquet(artifacts["history_snapshot"]),
            hardware_specs=pl.read_parquet(artifacts["hardware_specs"]),
            metadata=metadata,
        )

    def predict(self, launches: pl.DataFrame) -> pl.DataFrame:
        """Predicted throughput, bin and bin probability for launch rows (one per candidate)."""
        X = launch_matrix(launches, self.spec_table, self.history_index)
        bins, probability = self.cascade.predict_bins(X)
        log_q = self.cascade.predict(X)
        return pl.DataFrame(
            {
                "predicted_throughput": np.exp(log_q),
                "bin": bins,
                "bin_probability": probability,
                "history_found": X[:, FEATURE_COLUMNS.index("hist_cold_start")] == 0.0,
            }
        )


def load_skops(path: str | Path, expected: type) -> Any:
    """Load a skops file whose types all come from trusted modules and whose object is an
    ``expected``; anything else is refused with the reason."""
    import skops.io as sio

    path = str(path)
    try:
        types = sio.get_untrusted_types(file=path)
    except Exception as exc:  # a truncated or foreign file: say so, whatever skops raised
        raise ModelArtifactError(f"{path} cannot be read: {exc}") from exc
    refused = [t for t in types if not t.startswith(TRUSTED_MODULE_PREFIXES)]
    if refused:
        raise ModelArtifactError(f"{path} holds untrusted types {refused}")
    loaded = sio.load(path, trusted=types)
    if not isinstance(loaded, expected):
        raise ModelArtifactError(f"{path} holds a {type(loaded).__name__}, not {expected.__name__}")
    return loaded


def load_registered(model_uri: str) -> tuple[LeapModel, str | None]:
    """Download a registered model (``models:/name@alias`` or ``models:/name/3``) and load it
    without going through pyfunc; returns the model and its registry version."""
    import mlflow

    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri))
    except Exception as exc:  # MLflow raises several types for a missing model or server
        raise ModelArtifactError(f"cannot download {model_uri}: {exc}") from exc
    model = LeapModel.load(local / "artifacts")
    version = None
    if model_uri.startswith("models:/"):
        try:
            version = registry_version(model_uri)
        except Exception:  # the version is informative only; the model itself loaded
            version = None
    return model, version


def registry_version(model_uri: str) -> str:
    """The registry version a ``models:/name@alias`` or ``models:/name/N`` URI names now."""
    from mlflow import MlflowClient

    path = model_uri.removeprefix("models:/")
    client = MlflowClient()
    if "@" in path:
        name, alias = path.split("@", 1)
        return str(client.get_model_version_by_alias(name, alias).version)
    name, version = path.rsplit("/", 1)
    return str(client.get_model_version(name, version).version)
