"""The MLflow pyfunc face of the published model: ``mlflow.pyfunc.load_model("models:/...")`` and
``mlflow models serve -m models:/...``.

Kept apart from ``model.py`` so serving code that loads artifacts directly never imports MLflow.

A registered version must serve on its own, in an environment MLflow builds from the version
alone: the version ships the ``leap_serving`` package itself (``code_paths``: the project is not
on a package index, so a requirement could not install it) and pins every third-party package
``leap_serving`` imports (``SERVING_DISTRIBUTIONS``). It predicts through the same compiled tree
walk as ``Ranker`` and refuses files whose sha256 differ from those recorded at registration.
"""

from __future__ import annotations

import datetime as dt
from importlib.metadata import version
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import polars as pl

from .compiled import CompiledCascade
from .contract import schema
from .features import expand_candidates
from .model import LeapModel, ModelArtifactError

# The distributions the model's environment needs, pinned to this environment's versions at
# log time: every third-party package leap_serving's modules import (mlflow, numba, numpy,
# polars, scikit-learn, lightgbm (only to fit: a loaded model's trees are walked from their
# text), and joblib and threadpoolctl, which cascade.py imports itself),
# plus two it needs without importing them: pandas (MLflow hands ``predict`` a pandas frame) and
# pyarrow (polars converts pandas frames through it). tests/test_serving.py checks this against
# the imports.
SERVING_DISTRIBUTIONS: tuple[str, ...] = (
    "mlflow", "numba", "numpy", "polars", "pyarrow", "pandas", "scikit-learn", "lightgbm",
    "joblib", "threadpoolctl",
)  # fmt: skip
# model_config key: file name -> sha256, as the registry version's ``artifact_sha256`` tag
SHA256_CONFIG = "artifact_sha256"
# The launch the logged input example describes (examples/job.json's job), on a few candidates.
EXAMPLE_LAUNCH: dict[str, Any] = {
    "job_name": "news_share_dlrm_v2.canary_jodeka/832721327/6902a9f2/1",
    "model_type": "news_share_dlrm_v2", "num_trainers": 2, "batch_size": 2816,
    "requested_devices_per_host": None, "num_readers": 84, "precision": "bf16",
    "tensor_parallel": 1, "pipeline_parallel": 1, "embedding_sharding": "row",
    "num_sparse_features": 104, "num_dense_features": 610, "hash_size": 8306168, "seq_len": 0,
    "training_days": 14, "optimizer": "adam", "activation_checkpointing": False,
    "package_version": "4.7.0",
    "model_definition": (
        '{"layers":[{"op":"mlp","widths":[512,256,64]},{"op":"embedding_bag","dim":64,'
        '"pooling":25},{"op":"interaction","kind":"cat"},{"op":"mlp","widths":[2048,512,256,1]}]}'
    ),
}  # fmt: skip


def pip_requirements() -> list[str]:
    """``SERVING_DISTRIBUTIONS`` pinned to the versions installed here: the ones the model was
    checked with when it was logged."""
    return [f"{name}=={version(name)}" for name in SERVING_DISTRIBUTIONS]


def code_paths() -> list[str]:
    """The ``leap_serving`` package folder, which MLflow copies into the model (without
    ``__pycache__``) and puts first on ``sys.path`` when it loads the model."""
    return [str(Path(__file__).resolve().parent)]


def model_config(sha256: dict[str, str]) -> dict[str, Any]:
    """The config stored in the model: the artifact files' sha256 as registration records them,
    which ``load_context`` checks the files against (it is not told the registry version)."""
    return {SHA256_CONFIG: dict(sorted(sha256.items()))}


def input_example(hardware_specs: pl.DataFrame, day: dt.date, n_candidates: int = 3):
    """A launch the model can rank, as MLflow logs and shows it: ``EXAMPLE_LAUNCH`` on the day
    after ``day`` on the first ``n_candidates`` hardware types of the model's spec table, in the
    contract's launch columns (``registry.model_signature``), as the pandas frame a caller
    sends."""
    types = hardware_specs["hardware_type"].head(n_candidates).to_list()
    launch = {**EXAMPLE_LAUNCH, "ds": day + dt.timedelta(days=1)}
    return expand_candidates(launch, types).to_pandas()


class LeapPyfunc(mlflow.pyfunc.PythonModel):
    """Input: launch rows in the data contract's columns (``hardware_type`` = the candidate,
    ``ds`` = the launch day). Output per row: predicted throughput, bin, bin probability and
    whether history was found (``LeapModel.predict``, through the compiled trees)."""

    def load_context(self, context) -> None:
        """Load the files only if they carry the sha256 recorded at registration, then compile
        and warm the tree walk, so the first request does not pay for it."""
        expected = (context.model_config or {}).get(SHA256_CONFIG)
        if not isinstance(expected, dict) or not expected:
            raise ModelArtifactError(
                f"the model's config has no {SHA256_CONFIG} (got {expected!r}): it was logged "
                "without integrity records and is refused; register a new version"
            )
        self.model = LeapModel.load(
            dict(context.artifacts),
            expected_sha256=expected,
            recorded_by=f"in the model's config ({SHA256_CONFIG}) at registration",
        )
        self.compiled = CompiledCascade(self.model.cascade)
        self.compiled.predict(np.zeros((1, self.model.cascade.n_features_in_)))

    def predict(self, context, model_input, params=None):
        if not isinstance(model_input, pl.DataFrame):
            model_input = pl.from_pandas(model_input)
        # pandas turns dates into timestamps: bring contract columns back to their types
        contract = schema("job_attempts")
        launches = model_input.with_columns(
            pl.col(name).cast(contract[name])
            for name in model_input.columns
            if name in contract and model_input[name].dtype != contract[name]
        )
        return self.model.predict(launches, self.compiled).to_pandas()
