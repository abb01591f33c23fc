"""What the registry says of one version: the tags a night put on it (its evaluation day, the
published model's w20, which model the selection published, the gate's verdict).

Read as ``registered`` reads a version (over REST from a tracking server, else MLflow):
``leap serve``'s ``GET /v1/model`` asks it once per version it serves.
"""

from __future__ import annotations

from .registered import _split_model_uri, version_record

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
    name, _, _ = _split_model_uri(model_uri)
    tags = version_record(name, None, version).tags
    return {k: tags[k] for k in DESCRIBING_TAGS if k in tags}
