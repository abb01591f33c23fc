"""The MLflow pyfunc face of the published model: ``mlflow.pyfunc.load_model("models:/...")`` and
``mlflow models serve -m models:/...``.

Kept in the MLflow subpackage, apart from the model (``model.published``), so serving code that
loads artifacts directly never imports MLflow.

A registered version must serve on its own, in an environment MLflow builds from the version
alone: the version ships the ``leap_serving`` package itself (``code_paths``: the project is not
on a package index, so a requirement could not install it) and pins every third-party package
``leap_serving`` imports (``SERVING_DISTRIBUTIONS``). It predicts through the same compiled tree
walk as ``Ranker`` and refuses files whose sha256 differ from those recorded at registration.

The check in ``load_context`` runs from the code the model ships, so it holds against a corrupted
or partly replaced model, not against someone who rewrites the model's code with it:
``load_checked`` (and the ``Ranker``, ``registered.load_registered``) check every file against the
registry version's tags from installed code before MLflow runs any of them
(``docs/reliability.md``, "What a folder can promise").
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc
import numpy as np
import polars as pl

from ..launch.contract import schema
from ..launch.features import expand_candidates
from ..model.compiled import CompiledCascade
from ..model.published import ARTIFACTS, LeapModel, ModelArtifactError, check_artifacts
from .bundle import BUNDLE_DIR, BUNDLE_FILE, BUNDLE_TAG, write_bundle
from .registered import SHA256_TAG, fetch_registered, tag_record
from .shipped import (
    CODE_CONFIG,
    CODE_SHA256_TAG,
    REGISTERED_META,
    differences,
    package_files,
    shipped_files,
)

log = logging.getLogger("leap_serving")

# The distributions the model's environment needs, pinned to this environment's versions at
# log time: every third-party package leap_serving's modules import (mlflow, numba, numpy,
# polars, scikit-learn, lightgbm (only to fit: a loaded model's trees are walked from their
# text), and joblib and threadpoolctl, which the cascade's fitting imports itself),
# plus two it needs without importing them: pandas (MLflow hands ``predict`` a pandas frame) and
# pyarrow (polars converts pandas frames through it). tests/test_serving.py checks this against
# the imports.
SERVING_DISTRIBUTIONS: tuple[str, ...] = (
    "mlflow",
    "numba",
    "numpy",
    "polars",
    "pyarrow",
    "pandas",
    "scikit-learn",
    "lightgbm",
    "joblib",
    "threadpoolctl",
    # `leap serve` (leap_serving/http) and the hand-off adapters (leap_serving/handoff): the
    # ASGI stack MLflow itself brings, the Prometheus client, and YAML for the manifests
    "starlette",
    "uvicorn",
    "prometheus-client",
    "pyyaml",
)
# model_config key: file name -> sha256, as the registry version's ``artifact_sha256`` tag
SHA256_CONFIG = "artifact_sha256"
MODEL_CODE = Path(__file__).with_name("mlflow_model.py")  # the model-code file MLflow stores
# what MLflow writes into a version's folder when it downloads one through ``models:/``
# The launch the logged input example describes (examples/job.json's job), on a few candidates.
EXAMPLE_LAUNCH: dict[str, Any] = {
    "job_name": "news_share_dlrm_v2.canary_jodeka/832721327/6902a9f2/1",
    "model_type": "news_share_dlrm_v2",
    "num_trainers": 2,
    "batch_size": 2816,
    "requested_devices_per_host": None,
    "num_readers": 84,
    "precision": "bf16",
    "tensor_parallel": 1,
    "pipeline_parallel": 1,
    "embedding_sharding": "row",
    "num_sparse_features": 104,
    "num_dense_features": 610,
    "hash_size": 8306168,
    "seq_len": 0,
    "training_days": 14,
    "optimizer": "adam",
    "activation_checkpointing": False,
    "package_version": "4.7.0",
    "model_definition": (
        '{"layers":[{"op":"mlp","widths":[512,256,64]},{"op":"embedding_bag","dim":64,'
        '"pooling":25},{"op":"interaction","kind":"cat"},{"op":"mlp","widths":[2048,512,256,1]}]}'
    ),
}


def pip_requirements() -> list[str]:
    """``SERVING_DISTRIBUTIONS`` pinned to the versions installed here: the ones the model was
    checked with when it was logged."""
    return [f"{name}=={version(name)}" for name in SERVING_DISTRIBUTIONS]


def code_paths() -> list[str]:
    """The ``leap_serving`` package folder (every subpackage of it), which MLflow copies into the
    model (without ``__pycache__``) and puts first on ``sys.path`` when it loads the model."""
    return [str(Path(__file__).resolve().parents[1])]


def model_config(sha256: dict[str, str]) -> dict[str, Any]:
    """The config stored in the model: the artifact files' sha256 as registration records them,
    which ``load_context`` checks the files against, and those of the code the model ships (the
    package's files and the model-code file, ``shipped.CODE_CONFIG``)."""
    return {
        SHA256_CONFIG: dict(sorted(sha256.items())),
        CODE_CONFIG: package_files(code_paths()[0], MODEL_CODE),
    }


def stored_records(model_uri: str, config: dict[str, Any], run_id: str) -> dict[str, str]:
    """The version tags registration records of the model logged at ``model_uri``, read back
    from the store after checking the stored copy against what was logged (``config``, from
    ``model_config``): the sha256 of every file it ships beside its artifacts (``code_sha256``),
    and its bundle (``bundle.py``), which this writes from that checked copy and logs under the
    run ``run_id``: the path and sha256 of the one file the loaders fetch."""
    from mlflow import MlflowClient

    with (
        tempfile.TemporaryDirectory(prefix="leap-logged-") as tmp,
        tempfile.TemporaryDirectory(prefix="leap-bundle-") as out,
    ):
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=tmp))
        if problem := differences(local, config[CODE_CONFIG], complete=False):
            raise ModelArtifactError(
                f"the model stored at {model_uri} does not ship the code it was logged with: "
                f"{problem}"
            )
        artifacts = {name: str(local / "artifacts" / file) for name, file in ARTIFACTS.items()}
        check_artifacts(artifacts, config[SHA256_CONFIG], recorded_by="when it was logged")
        shipped = shipped_files(local)
        tar = Path(out) / BUNDLE_FILE
        bundle = write_bundle(local, tar)
        MlflowClient().log_artifact(run_id, str(tar), BUNDLE_DIR)
    bundle["path"] = f"{BUNDLE_DIR}/{BUNDLE_FILE}"
    return {
        CODE_SHA256_TAG: json.dumps(shipped, sort_keys=True),
        BUNDLE_TAG: json.dumps(bundle, sort_keys=True),
    }


def load_checked(model_uri: str, version: str | None = None) -> mlflow.pyfunc.PyFuncModel:
    """``mlflow.pyfunc.load_model`` for a caller that runs installed ``leap_serving``: the
    version (``models:/name@alias`` resolved once, or ``version``) is downloaded into a fresh
    folder and every file it ships checked against the registry version's tags
    (``registered.fetch_registered``) before MLflow runs any of them. The shipped
    ``leap_serving`` is checked but not run: this process imported its own first, and Python
    keeps the first. The copy holds no cache a run in place left in the store
    (``fetch_registered``)."""
    with tempfile.TemporaryDirectory(prefix="leap-pyfunc-") as tmp:
        local, _, _ = fetch_registered(model_uri, version, dst=tmp, require_code=True)
        return mlflow.pyfunc.load_model(str(local))


def registered_tags(model_dir: Path) -> tuple[str, dict[str, str]] | None:
    """The registry version a model folder names (MLflow writes ``registered_model_meta`` into
    a version's folder when it downloads one) and that version's tags, when the registry
    answers; None for a folder that names none, or when no registry answers (logged)."""
    if not (model_dir / REGISTERED_META).is_file():
        return None
    from mlflow.utils.yaml_utils import read_yaml

    try:
        named = read_yaml(str(model_dir), REGISTERED_META)
        name, number = str(named["model_name"]), str(named["model_version"])
    except Exception as exc:  # YAML's errors, or a field missing
        raise ModelArtifactError(f"{model_dir / REGISTERED_META} cannot be read: {exc}") from exc
    registry = mlflow.get_registry_uri()
    try:
        tags = mlflow.MlflowClient().get_model_version(name, number).tags
    except Exception as exc:  # MLflow raises several types for a missing model or server
        log.warning(
            "leap_serving: %s names %s version %s, for which the registry at %s does not answer "
            "(%s): its files are checked against the model's config only",
            model_dir,
            name,
            number,
            registry,
            exc,
        )
        return None
    return f"{name} version {number} (registry {registry})", tags


def input_example(hardware_specs: pl.DataFrame, day: dt.date, n_candidates: int = 3):
    """A launch the model can rank, as MLflow logs and shows it: ``EXAMPLE_LAUNCH`` on the day
    after ``day`` on the first ``n_candidates`` hardware types of the model's spec table, in the
    contract's launch columns (the pipeline's ``registry.model_signature``), as the pandas frame
    a caller sends."""
    types = hardware_specs["hardware_type"].head(n_candidates).to_list()
    launch = {**EXAMPLE_LAUNCH, "ds": day + dt.timedelta(days=1)}
    return expand_candidates(launch, types).to_pandas()


class LeapPyfunc(mlflow.pyfunc.PythonModel):
    """Input: launch rows in the data contract's columns (``hardware_type`` = the candidate,
    ``ds`` = the launch day). Output per row: predicted throughput, bin, bin probability and
    whether history was found (``LeapModel.predict``, through the compiled trees)."""

    # MLflow wraps ``predict`` to validate its input against type hints it has none of, and
    # advises adding them in a warning (filtered "once" inside MLflow, past any filter of the
    # caller) in every process that imports this module: each night's run worker logged it.
    # The signature logged with the model checks the input instead
    _skip_type_hint_validation = True

    def load_context(self, context) -> None:
        """Load the files only if they carry the sha256 recorded at registration: every file
        the model ships against the registry version's tags, when the folder names a version
        and the registry answers; its code against the model's config; its artifacts against
        both. Then compile and warm the tree walk, so the first request does not pay for it.

        Run from the code the model ships (unless the process imported its own leap_serving
        first), this check is rewritten by whoever rewrites that code: it catches a corrupted or
        partly replaced model. ``load_checked`` checks from installed code."""
        config = context.model_config or {}
        expected = config.get(SHA256_CONFIG)
        if not isinstance(expected, dict) or not expected:
            raise ModelArtifactError(
                f"the model's config has no {SHA256_CONFIG} (got {expected!r}): it was logged "
                "without integrity records and is refused; register a new version"
            )
        if "manifest" not in context.artifacts:
            raise ModelArtifactError("model artifact lacks ['manifest']")
        folder = Path(context.artifacts["manifest"]).resolve().parents[1]
        registered = registered_tags(folder)
        if registered is not None:
            label, tags = registered
            recorded = tag_record(tags, SHA256_TAG, label)
            if recorded != expected:
                differ = sorted(
                    n for n in {*recorded, *expected} if recorded.get(n) != expected.get(n)
                )
                raise ModelArtifactError(
                    f"the model's config ({SHA256_CONFIG}) does not match the sha256 recorded on "
                    f"{label} (files {differ}): the artifact was replaced after registration"
                )
            shipped = tag_record(tags, CODE_SHA256_TAG, label, required=False)
            if shipped is not None and (problem := differences(folder, shipped)):
                raise ModelArtifactError(
                    f"{folder} does not match the sha256 recorded on {label} ({CODE_SHA256_TAG}): "
                    f"{problem}: the model's code or MLflow files were replaced after registration"
                )
        code = config.get(CODE_CONFIG)
        if code is not None and (problem := differences(folder, code, complete=False)):
            raise ModelArtifactError(
                f"{folder} ships code that differs from the sha256 recorded in the model's config "
                f"({CODE_CONFIG}) at registration: {problem}"
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
