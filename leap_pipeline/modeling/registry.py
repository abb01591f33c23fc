"""MLflow: log each nightly run, register an immutable version, and move the stable pointer.

Tracking defaults to a SQLite store and an artifact folder under ``mlflow`` in the install's data
folder (``$LEAP_DATA``) unless the standard ``MLFLOW_TRACKING_URI`` names another (a shared
server, say). The pointer is the alias ``production`` of the registered model; it moves only
through ``promote``, which records who moved it, when, from which version and why, as tags on the
version it now names.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import mlflow
import polars as pl
from mlflow import MlflowClient
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.exceptions import MlflowException
from mlflow.types import ColSpec, Schema

from leap_pipeline.modeling.registry_errors import absent_or_raise
from leap_pipeline.settings import environment, set_environment, sqlite_file
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.registry.bundle import BUNDLE_TAG
from leap_serving.registry.registered import SHA256_TAG
from leap_serving.registry.shipped import CODE_SHA256_TAG

ALIAS = "production"
EXPERIMENT = "leap-nightly"
PROMOTION_TAG = "promotion"
RETIRED_TAG = "retired_version"  # on a run whose registered version retention deleted
RUN_KINDS = ("nightly", "adhoc", "test")


def model_name() -> str:
    """``$LEAP_MODEL_NAME``, validated, else the default name."""
    return environment().model_name


def model_uri(alias: str = ALIAS, name: str | None = None) -> str:
    return f"models:/{name or model_name()}@{alias}"


def configure_tracking(store: str | Path | None = None) -> str:
    """Point MLflow at a SQLite store under ``store`` when given, else ``$MLFLOW_TRACKING_URI``,
    else ``mlflow`` in the data folder (``$LEAP_DATA``); create the experiment. Returns the
    tracking URI.

    A SQLite store's experiment keeps its artifacts beside the database (``artifacts``), as a
    server keeps them where it was told: left to MLflow, a SQLite URI from the environment puts
    them under ``mlruns`` in whatever folder the process that created the experiment ran in,
    outside what ``leap backup`` copies, with that folder's permissions."""
    if store is None and environment().mlflow_tracking_uri:
        uri = environment().mlflow_tracking_uri
        database = sqlite_file(uri)
        artifacts = (database.parent / "artifacts").as_uri() if database else None
    else:
        folder = Path(store or environment().mlflow_store).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        artifacts = (folder / "artifacts").as_uri()
    set_environment(overwrite=False, MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false")
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        mlflow.create_experiment(EXPERIMENT, artifact_location=artifacts)
    mlflow.set_experiment(EXPERIMENT)
    return uri


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    reason: str
    candidate_w20: float
    production_w20: float | None
    floor: float
    margin: float


def evaluation_gate(
    candidate_w20: float, production_w20: float | None, floor: float, margin: float
) -> GateDecision:
    """Pass when w20 reaches ``floor`` and is at most ``margin`` below production's, both
    scored on the same evaluation day."""
    if not candidate_w20 >= floor:
        reason = f"w20 {candidate_w20:.3f} is below the floor {floor:.3f}"
        passed = False
    elif production_w20 is not None and candidate_w20 < production_w20 - margin:
        reason = (
            f"w20 {candidate_w20:.3f} is more than {margin:.3f} below production's "
            f"{production_w20:.3f} on the same day"
        )
        passed = False
    else:
        against = "" if production_w20 is None else f", production {production_w20:.3f}"
        reason = f"w20 {candidate_w20:.3f} >= floor {floor:.3f}{against}"
        passed = True
    return GateDecision(passed, reason, candidate_w20, production_w20, floor, margin)


def production_version(client: MlflowClient | None = None, name: str | None = None):
    """The model version the alias names, or None when there is none yet (no registered model,
    or no alias); ``RegistryUnavailable`` when the registry cannot say."""
    client = client or MlflowClient()
    try:
        return client.get_model_version_by_alias(name or model_name(), ALIAS)
    except MlflowException as exc:
        absent_or_raise(exc, f"which version {ALIAS} names")
        return None


def promote(version: str | int, reason: str, actor: str | None = None) -> dict:
    """Point the alias at ``version`` and record the move on that version's tags."""
    client = MlflowClient()
    name = model_name()
    try:
        target = client.get_model_version(name, str(version))
    except MlflowException as exc:
        raise ValueError(
            f"version={version!r} of model {name!r} cannot be promoted: {exc}"
        ) from exc
    previous = production_version(client, name)
    now = dt.datetime.now(dt.UTC)
    record = {
        "at": now.isoformat(timespec="seconds"),
        "by": actor or getpass.getuser(),
        "from_version": str(previous.version) if previous else None,
        "to_version": str(target.version),
        "reason": reason,
    }
    key = f"{PROMOTION_TAG}.{now.strftime('%Y%m%dT%H%M%S.%fZ')}"
    # the record first: a move that fails leaves no record behind, a record never lacks its move
    client.set_model_version_tag(name, str(target.version), key, json.dumps(record))
    try:
        client.set_registered_model_alias(name, ALIAS, str(target.version))
    except BaseException:
        client.delete_model_version_tag(name, str(target.version), key)
        raise
    return record


def promotion_history(name: str | None = None) -> list[dict]:
    """Every recorded move of the pointer, oldest first."""
    client = MlflowClient()
    name = name or model_name()
    records = []
    for version in client.search_model_versions(f"name='{name}'"):
        for key, value in version.tags.items():
            if key.startswith(f"{PROMOTION_TAG}."):
                records.append(json.loads(value))
    return sorted(records, key=lambda r: r["at"])


def enforce_retention(keep: int, name: str | None = None) -> list[str]:
    """Delete all but the ``keep`` newest versions, never the one the alias names nor one that
    carries a promotion record: the audit of every move (and a rollback to any version the alias
    ever named) outlives retention."""
    if keep < 1:
        raise ValueError(f"keep={keep!r} must be at least 1")
    client = MlflowClient()
    name = name or model_name()
    current = production_version(client, name)
    versions = sorted(
        client.search_model_versions(f"name='{name}'"), key=lambda v: int(v.version), reverse=True
    )
    deleted = []
    for version in versions[keep:]:
        if current is not None and str(version.version) == str(current.version):
            continue
        if any(key.startswith(f"{PROMOTION_TAG}.") for key in version.tags):
            continue
        if version.run_id:  # the run remembers its night was registered, then retired
            client.set_tag(version.run_id, RETIRED_TAG, str(version.version))
        client.delete_model_version(name, version.version)
        deleted.append(str(version.version))
    return deleted


def registered_before(day: dt.date, fingerprint: str) -> str | None:
    """The run that once registered night ``day`` from inputs with ``fingerprint``, when
    retention has since deleted its version and recorded that on the run (``RETIRED_TAG``):
    the night is not registered again, so a backfill does not bring back retired versions. A run
    whose registration never finished carries no such tag, and its night is registered again."""
    experiment = mlflow.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return None
    runs = MlflowClient().search_runs(
        [experiment.experiment_id],
        filter_string=(
            f"tags.evaluation_day = '{day.isoformat()}' and "
            f"tags.night_fingerprint = '{fingerprint}' and tags.{RETIRED_TAG} LIKE '%'"
        ),
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def record_gate(version: str, passed: bool, reason: str, name: str | None = None) -> None:
    """The gate's latest decision on ``version`` (a night run again re-decides its gate against
    the production model and settings of that run)."""
    client = MlflowClient()
    name = name or model_name()
    client.set_model_version_tag(name, version, "gate", "passed" if passed else "failed")
    client.set_model_version_tag(name, version, "gate_reason", reason)


def registered_nights(name: str | None = None) -> dict[str, list[dict]]:
    """Every registered version by the night it evaluated (``evaluation_day``), oldest version
    first: a night is trained exactly when it has one."""
    client = MlflowClient()
    name = name or model_name()
    try:
        versions = client.search_model_versions(f"name='{name}'")
    except MlflowException as exc:
        absent_or_raise(exc, "which nights are registered")
        return {}
    nights: dict[str, list[dict]] = {}
    for version in sorted(versions, key=lambda v: int(v.version)):
        day = version.tags.get("evaluation_day")
        if day:
            nights.setdefault(day, []).append({"version": str(version.version), **version.tags})
    return nights


def registered_night(day: dt.date, fingerprint: str, name: str | None = None) -> dict | None:
    """The version already registered for night ``day`` from inputs with ``fingerprint``, or
    None: a night run again on the same data reuses its version instead of adding one."""
    for version in reversed(registered_nights(name).get(day.isoformat(), [])):
        if version.get("night_fingerprint") == fingerprint:
            return version
    return None


def log_candidate(
    *,
    artifact_folder: Path,
    day: dt.date,
    window: tuple[dt.date, dt.date],
    run_kind: str,
    params: dict,
    metrics: dict[str, float | None],
    files: list[Path],
    selection: dict | None = None,
    fingerprint: str = "",
    gate_reason: str = "",
    training_source: str = "",
    training_rows: int | None = None,
) -> tuple[str, str]:
    """Log one night's run and register its model as a new version; returns (run id, version).
    ``selection`` (from ``selection.select_model``) puts the choice and its scores on the
    version; ``fingerprint`` (the night's inputs) lets a re-run of the night find it. The
    training window is the run's input: a dataset named by its days, read from
    ``training_source`` (the warehouse), with the feature columns as its schema and the night's
    fingerprint as its digest. The version records the sha256 of its artifacts (``SHA256_TAG``)
    and of every other file it ships, read back from the store (``CODE_SHA256_TAG``)."""
    from leap_serving.model.published import ARTIFACTS, check_artifacts
    from leap_serving.registry import mlflow_model, pyfunc

    if run_kind not in RUN_KINDS:
        raise ValueError(f"run_kind={run_kind!r} is not one of {RUN_KINDS}")
    name = model_name()
    folder = Path(artifact_folder).resolve()  # one published version, whatever moves meanwhile
    artifacts = {key: str(folder / file) for key, file in ARTIFACTS.items()}
    recorded = check_artifacts(artifacts)["files"]
    tags = {
        "evaluation_day": day.isoformat(),
        "training_window": f"{window[0].isoformat()}..{window[1].isoformat()}",
        "run_kind": run_kind,
        **({"night_fingerprint": fingerprint} if fingerprint else {}),
    }
    with mlflow.start_run(run_name=f"{run_kind} {day.isoformat()}", tags=tags) as run:
        mlflow.log_params(params)
        mlflow.log_input(
            training_window_dataset(window, training_source, fingerprint, training_rows),
            context="training",
        )
        mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None})
        for path in files:
            mlflow.log_artifact(str(path))
        # the signature comes from the contract; the example is a launch on the model's types
        example = pyfunc.input_example(pl.read_parquet(artifacts["hardware_specs"]), day)
        config = pyfunc.model_config(recorded)
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=mlflow_model.__file__,
            artifacts=artifacts,
            code_paths=pyfunc.code_paths(),
            model_config=config,
            signature=model_signature(),
            input_example=example,
            pip_requirements=pyfunc.pip_requirements(),
        )
    # the version and every tag in one call: a crash leaves a whole version or none, never one
    # that the night's look-up (``registered_nights``) cannot see
    version_tags_ = {
        SHA256_TAG: json.dumps(recorded, sort_keys=True),
        **pyfunc.stored_records(info.model_uri, config, run.info.run_id),
        **version_tags(tags, metrics, run.info.run_id, selection),
        **({"gate_reason": gate_reason} if gate_reason else {}),
    }
    registered = mlflow.register_model(info.model_uri, name, tags=version_tags_)
    return run.info.run_id, str(registered.version)


def training_window_dataset(
    window: tuple[dt.date, dt.date], source: str, fingerprint: str, rows: int | None
) -> MetaDataset:
    """The night's training window as an MLflow dataset: its metadata only (the rows stay in the
    warehouse, which the source names with the window's days)."""
    first, last = (d.isoformat() for d in window)
    uri = (
        Path(source or "warehouse").resolve().as_uri() + f"?table=feature_table&ds={first}..{last}"
    )
    schema = Schema([ColSpec("double", name) for name in FEATURE_COLUMNS])
    name = f"feature_table {first}..{last}" + (f" ({rows:,} rows)" if rows is not None else "")
    with warnings.catch_warnings():  # a file URI resolves to two equal local sources: either
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(uri)
    digest = (fingerprint or first)[:16]
    return MetaDataset(source, name=name, digest=digest, schema=schema)


# what a person scans in the version list; every metric stays on the run
VERSION_TAGS = (
    *("evaluation_day", "training_window", "run_kind", "published_w20", "published_model"),
    *("selection_w20", "gate", "gate_reason", "night_fingerprint", "run"),
    *(SHA256_TAG, CODE_SHA256_TAG, BUNDLE_TAG),
)


def version_tags(
    tags: dict, metrics: dict[str, float | None], run_id: str, selection: dict | None = None
) -> dict[str, str]:
    """The registry version's tags: the run's identity, the published model's w20, which model
    the selection published and every candidate's score on its selection day, the gate's verdict
    and the run that holds every metric."""
    out = {k: str(v) for k, v in tags.items()}
    if metrics.get("published_w20") is not None:
        out["published_w20"] = f"{metrics['published_w20']:.4f}"
    if selection is not None:
        out["published_model"] = selection["published"]
        scores = ", ".join(f"{k} {v:.4f}" for k, v in selection["scores"].items())
        out["selection_w20"] = f"{scores} (on {selection['selection_day']})"
    if metrics.get("gate_passed") is not None:
        out["gate"] = "passed" if metrics["gate_passed"] else "failed"
    out["run"] = f"runs:/{run_id}"
    return out


def model_signature():
    """What the registered model reads and returns, shown in the MLflow UI and enforced by
    ``mlflow.pyfunc``: the contract's launch columns (optional ones may be absent) and the
    prediction columns. An optional integer is typed Any: pandas holds a missing integer as NaN
    in a float column, which MLflow's long refuses; the model casts it to the contract's type."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema
    from mlflow.types.schema import AnyType

    from leap_serving.launch.contract import SOURCES
    from leap_serving.launch.features import LAUNCH_COLUMNS

    def mlflow_type(column) -> str | AnyType:
        if column.dtype == pl.String:
            return "string"
        if column.dtype == pl.Date:
            return "datetime"
        if column.dtype == pl.Boolean:
            return "boolean"
        if column.dtype.is_integer():
            return "long" if column.required else AnyType()
        return "double"

    launch = [c for c in SOURCES["job_attempts"] if c.name in LAUNCH_COLUMNS]
    inputs = Schema([ColSpec(mlflow_type(c), c.name, required=c.required) for c in launch])
    outputs = Schema(
        [
            ColSpec("double", "predicted_throughput"),
            ColSpec("long", "bin"),
            ColSpec("double", "bin_probability"),
            ColSpec("boolean", "history_found"),
        ]
    )
    return ModelSignature(inputs=inputs, outputs=outputs)
