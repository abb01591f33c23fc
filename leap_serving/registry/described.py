"""What the registry says of one version: the tags a night put on it (its evaluation day, the
published model's w20, which model the selection published, the gate's verdict).

Kept in the MLflow subpackage with MLflow imported inside the function, as ``registered`` is:
``leap serve``'s ``GET /v1/model`` asks it once per version it serves.
"""

from __future__ import annotations

from .registered import _split_model_uri

DESCRIBING_TAGS = (
    "evaluation_day",
    "training_window",
    "published_w20",
    "published_model",
    "gate",
    "run_kind",
)


def version_tags(model_uri: str, version: str) -> dict[str, str]:
    """The describing tags (``DESCRIBING_TAGS``) of the registry version ``version`` of the
    model ``model_uri`` names; a tag the version lacks is left out."""
    from mlflow import MlflowClient

    name, _, _ = _split_model_uri(model_uri)
    tags = MlflowClient().get_model_version(name, version).tags
    return {k: tags[k] for k in DESCRIBING_TAGS if k in tags}
