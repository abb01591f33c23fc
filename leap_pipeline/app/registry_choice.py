"""Which MLflow registry a command reads: ``$MLFLOW_TRACKING_URI``, else the data folder's own
SQLite store, never the store a demo left in a ``leap up`` folder, whose registry is the
service's MLflow server."""

from __future__ import annotations

from leap_pipeline.settings import Environment, environment, ranker_model_uri


def registry_uri(where: Environment) -> str:
    """The registry a command reads: ``$MLFLOW_TRACKING_URI``, else the folder's own SQLite
    store; ``ValueError`` for a ``leap up`` folder (its ``postgres/`` is there) with no
    ``$MLFLOW_TRACKING_URI``: its registry is leap up's MLflow server, and the SQLite store a
    demo left in it answered an old version with no warning."""
    named = environment().mlflow_tracking_uri or where.mlflow_tracking_uri
    if named:  # the environment's wins, as MLflow reads it (with --data too)
        return named
    if where.postgres_folder.is_dir():
        raise ValueError(
            f"--data {where.data}: a leap up folder (it holds postgres/), whose registry is "
            f"leap up's MLflow server, not {where.mlflow_store / 'mlflow.db'} (a demo's, left "
            "behind): run the export lines leap up printed (MLFLOW_TRACKING_URI and the "
            "account), or ask a running leap serve with --server"
        )
    return where.tracking_uri


def from_registry(model: str | None) -> bool:
    """Whether ``--model`` (or its default, ``$LEAP_MODEL_URI`` or the alias) is read from the
    registry rather than a folder."""
    return (model or ranker_model_uri()).startswith("models:/")
