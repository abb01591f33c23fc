"""Routing on/off per model type: the switches file an operator edits while a Ranker runs.

A launch of a model type whose switch is off gets an empty ranking (``routing_off``), so an
operator can take one model type off the ranker without a deploy.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .results import shown

log = logging.getLogger("leap_serving")


class Switches:
    """Routing on/off per model type, from a JSON file re-read when it changes:
    ``{"default": true, "model_types": {"ads_ctr_dlrm_v3": false}}``."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._stamp: float | None = None
        self._default, self._types = True, {}

    def enabled(self, model_type: str) -> bool:
        self._refresh()
        return bool(self._types.get(model_type, self._default))

    def _refresh(self) -> None:
        if self.path is None:
            return
        try:
            stamp = self.path.stat().st_mtime
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        self._stamp = stamp
        if stamp is None:
            self._default, self._types = True, {}
            return
        try:
            self._default, self._types = read_switches(self.path.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            # a broken file keeps the last good switches rather than routing everything
            log.error(
                "routing switches %s unreadable, keeping the previous ones: %s", self.path, exc
            )


def read_switches(text: str) -> tuple[bool, dict[str, bool]]:
    """The routing switches file: ``default`` and each of ``model_types`` a JSON boolean (not
    ``"false"``, which ``bool`` reads as true); a ``ValueError`` naming the field otherwise."""
    config = json.loads(text)
    if not isinstance(config, dict) or set(config) - {"default", "model_types"}:
        raise ValueError("the file is not an object of 'default' and 'model_types'")
    default = config.get("default", True)
    if not isinstance(default, bool):
        raise ValueError(f"default={shown(default)} is not true or false")
    types = config.get("model_types", {})
    if not isinstance(types, dict):
        raise ValueError(f"model_types={shown(types)} is not an object")
    for model_type, enabled in types.items():
        if not isinstance(enabled, bool):
            raise ValueError(f"model_types.{shown(model_type)}={shown(enabled)} is not a boolean")
    return default, dict(types)
