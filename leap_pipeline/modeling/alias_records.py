"""What the registered model records of its ``production`` alias beside the alias itself: a
person's pin (a rollback that nights must not undo) and how the newest night ended (promoted,
held or failed), which a launcher's ``/metrics`` reads. Both are tags on the registered model,
so every host that reaches the registry sees them."""

import datetime as dt
import getpass
import json

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from leap_pipeline.modeling.registry import model_name
from leap_pipeline.modeling.registry_errors import absent_or_raise
from leap_serving.registry.registered import LAST_NIGHT_TAG

PIN_TAG = "production_pinned"  # on the registered model: nights leave the alias where it is


def pin(version: str | int, reason: str, actor: str | None = None) -> dict:
    """Hold the alias on ``version``: nights still register, but none moves the alias until
    ``unpin``. A rollback is a person's decision; the next passing night must not undo it."""
    record = {
        "version": str(version),
        "by": actor or getpass.getuser(),
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "reason": reason,
    }
    MlflowClient().set_registered_model_tag(model_name(), PIN_TAG, json.dumps(record))
    return record


def unpin() -> dict | None:
    """Let nights move the alias again; the pin that was there, if any."""
    held = pinned()
    if held is not None:
        MlflowClient().delete_registered_model_tag(model_name(), PIN_TAG)
    return held


def pinned(name: str | None = None) -> dict | None:
    """The pin on the alias (version, by, at, reason), or None when nights may move it."""
    try:
        tags = MlflowClient().get_registered_model(name or model_name()).tags
    except MlflowException as exc:
        absent_or_raise(exc, "whether the alias is pinned")
        return None  # no registered model yet: nothing is pinned
    try:
        return json.loads(tags[PIN_TAG]) if PIN_TAG in tags else None
    except ValueError:  # written by hand, not by pin(): still a pin, its text the reason
        return {"version": None, "by": None, "at": None, "reason": tags[PIN_TAG]}


def record_last_night(day: dt.date | None, outcome: str, note: str) -> dict:
    """Record how the newest night ended on the registered model (``LAST_NIGHT_TAG``), where a
    launcher's ``/metrics`` reads it: ``promoted``, ``held`` (registered, the alias left where
    it was) or ``failed`` (the run failed before its decision). An older night never replaces
    a newer one's record."""
    client, name = MlflowClient(), model_name()
    record = {
        "day": day.isoformat() if day else None,
        "outcome": outcome,
        "note": note,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    try:
        held = json.loads(client.get_registered_model(name).tags.get(LAST_NIGHT_TAG) or "{}")
    except MlflowException as exc:  # no registered model yet (a night failed before the first)
        absent_or_raise(exc, "how the last night ended")
        client.create_registered_model(name)
        held = {}
    if day is not None and (held.get("day") or "") > day.isoformat():
        return held
    client.set_registered_model_tag(name, LAST_NIGHT_TAG, json.dumps(record))
    return record
