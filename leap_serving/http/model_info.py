"""``GET /v1/model``: which model answers, the day it was evaluated on, and its w20.

The evaluation day is the day of the history snapshot the model ships (the night's day D); the
w20 on that day is on the registry version's tags (``registry.described``), read once per
version and kept, so a dashboard polling the route does not poll the registry. A folder model
has no registry record: its w20 is null.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..registry.described import version_tags

log = logging.getLogger("leap_serving")
RETRY_FAILED_S = 60.0  # after a failed registry look-up, answer without its tags this long


class ModelDescriber:
    """The serving model's description; registry tags cached per version."""

    def __init__(self, ranker: Any) -> None:
        self.ranker = ranker
        self._tags: dict[str, dict[str, str]] = {}
        self._failed: dict[str, float] = {}  # version -> when its look-up may be tried again

    def describe(self) -> dict[str, Any]:
        """Blocking (a registry look-up on a version's first ask): run it off the event loop."""
        ranker = self.ranker
        loaded = ranker._loaded  # one Loaded, swapped whole: read once for a consistent answer
        stats = ranker.stats()
        model = loaded.model if loaded is not None else None
        last_ds = model.history_index.last_ds if model is not None else None
        version = loaded.version if loaded is not None else None
        tags = self._registry_tags(version) if version is not None else {}
        metadata = model.metadata if model is not None else {}
        selection = metadata.get("selection") or {}
        window = metadata.get("training_window")
        return {
            "ready": loaded is not None,
            "model_uri": str(ranker.model_uri),
            "model_version": version,
            "stamp": loaded.stamp if loaded is not None else None,
            "evaluation_day": tags.get("evaluation_day") or (last_ds and last_ds.isoformat()),
            "w20": _number(tags.get("published_w20")),
            "published_model": tags.get("published_model") or selection.get("published"),
            "training_window": tags.get("training_window") or (window and "..".join(window)),
            "profile": metadata.get("profile"),
            "model_age_days": stats["model_age_days"],
            "model_stale": stats["model_stale"],
            "canary": stats["canary"],
            "load_error": stats["load_error"],
        }

    def _registry_tags(self, version: str) -> dict[str, str]:
        if version not in self._tags:
            if time.monotonic() < self._failed.get(version, 0.0):
                return {}  # failed a moment ago: a polling dashboard does not retry each time
            try:
                self._tags[version] = version_tags(str(self.ranker.model_uri), version)
            except Exception as exc:  # the registry may be away: the route still answers
                log.warning("leap_serving: cannot read the tags of version %s: %s", version, exc)
                self._failed[version] = time.monotonic() + RETRY_FAILED_S
                return {}
        return self._tags[version]


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
