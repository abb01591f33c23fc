"""A request body read with a cap and checked field by field, before the Ranker sees it.

Everything a caller can get wrong is a ``RequestError`` carrying the status and the field it
names: a body past the cap (413, counted as it streams in: a missing or false Content-Length
cannot get more through), a body that is not JSON (400), a field of the wrong type or missing
(422). The launch's own fields are the Ranker's to judge: it answers an empty ranking with the
reason, which the routes turn into a 4xx of their own.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from .config import MAX_BATCH, MAX_CANDIDATES

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
BUDGET_FIELDS = ("max_cost_per_hour", "max_devices")
LAUNCH_FIELDS = ("job", "candidates", "launch_date", "budget")
JSON_TYPES = ("application/json",)


class RequestError(Exception):
    """A caller's mistake: the status to answer, the field at fault and why."""

    def __init__(self, status: int, field: str | None, reason: str, code: str) -> None:
        super().__init__(reason)
        self.status, self.field, self.reason, self.code = status, field, reason, code

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "field": self.field, "reason": self.reason}


@dataclass(frozen=True)
class Launch:
    """One launch as the Ranker takes it."""

    job: dict[str, Any]
    candidates: list[str]
    launch_date: dt.date | None = None
    budget: dict[str, Any] | None = None


def check_content_type(value: str | None) -> None:
    """JSON, or no type said; anything else is 415 naming the header."""
    if value is None:
        return
    kind = value.split(";", 1)[0].strip().lower()
    if kind not in JSON_TYPES and not (kind.startswith("application/") and kind.endswith("+json")):
        raise RequestError(
            415,
            "content-type",
            f"content-type {value[:60]!r} is not application/json",
            "unsupported_media_type",
        )


async def read_capped(chunks: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it passes ``limit`` bytes: at once when the
    Content-Length says so, else while it streams in (chunked, or a length that lies)."""
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise RequestError(
            413, "body", f"the body is {int(declared)} bytes, the limit {limit}", "body_too_large"
        )
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise RequestError(
                413, "body", f"the body passes the limit of {limit} bytes", "body_too_large"
            )
        parts.append(chunk)
    return b"".join(parts)


def parse_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object: 400 when it is not JSON, 422 when it is not an object."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise RequestError(
            400, "body", f"the body is not JSON: {str(exc)[:120]}", "invalid_json"
        ) from None
    if not isinstance(value, dict):
        raise RequestError(
            422, "body", f"the body is a JSON {_kind(value)}, not an object", "invalid_field"
        )
    return value


def parse_launch(body: Mapping[str, Any], where: str = "") -> Launch:
    """One launch: ``job`` an object, ``candidates`` a list of type names, ``launch_date``
    YYYY-MM-DD and ``budget`` caps, both optional; any other field is refused by name (a typo
    would otherwise rank without what the caller meant)."""
    for name in body:
        if name not in LAUNCH_FIELDS:
            _invalid(
                f"{where}{_name(name)}",
                f"is not a field of a launch (one of {', '.join(LAUNCH_FIELDS)})",
            )
    job = body.get("job")
    if not isinstance(job, dict):
        _invalid(f"{where}job", _missing_or(job, "must be an object: the launch config"))
    candidates = body.get("candidates")
    if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
        _invalid(
            f"{where}candidates", _missing_or(candidates, "must be a list of hardware type names")
        )
    if len(candidates) > MAX_CANDIDATES:
        _invalid(f"{where}candidates", f"holds {len(candidates)} names, at most {MAX_CANDIDATES}")
    return Launch(
        job,
        candidates,
        parse_date(body.get("launch_date"), f"{where}launch_date"),
        parse_budget(body.get("budget"), f"{where}budget"),
    )


def parse_batch(body: Mapping[str, Any]) -> list[Launch]:
    """``{"launches": [launch, ...]}``: 1 to ``MAX_BATCH`` launches sharing one launch date (the
    Ranker ranks a batch on one model and one date)."""
    for name in body:
        if name != "launches":
            _invalid(_name(name), "is not a field of a batch (only launches)")
    launches = body.get("launches")
    if not isinstance(launches, list) or not 1 <= len(launches) <= MAX_BATCH:
        _invalid("launches", _missing_or(launches, f"must be a list of 1 to {MAX_BATCH} launches"))
    parsed = []
    for i, item in enumerate(launches):
        if not isinstance(item, dict):
            _invalid(f"launches[{i}]", f"is a JSON {_kind(item)}, not an object")
        parsed.append(parse_launch(item, f"launches[{i}]."))
        if parsed[-1].launch_date != parsed[0].launch_date:
            _invalid(
                f"launches[{i}].launch_date",
                "differs from launches[0]'s: a batch ranks on one launch date",
            )
    return parsed


def parse_date(value: Any, field: str) -> dt.date | None:
    if value is None:
        return None
    if isinstance(value, str) and _DATE.fullmatch(value):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    _invalid(field, f"{_shown(value)} is not a date YYYY-MM-DD")


def parse_budget(value: Any, field: str) -> dict[str, Any] | None:
    """Caps on the cost per hour (a positive number) and the devices (a whole number >= 1);
    ``null`` for either is no cap."""
    if value is None:
        return None
    if not isinstance(value, dict):
        _invalid(field, f"is a JSON {_kind(value)}, not an object of caps")
    for name, cap in value.items():
        if name not in BUDGET_FIELDS:
            _invalid(f"{field}.{_name(name)}", f"is not a cap (one of {', '.join(BUDGET_FIELDS)})")
        if cap is None:
            continue
        whole = name == "max_devices"
        number = isinstance(cap, int if whole else (int, float)) and not isinstance(cap, bool)
        if not number or not _finite(cap) or cap <= 0:
            _invalid(
                f"{field}.{name}",
                f"{_shown(cap)} is not a {'whole number >= 1' if whole else 'positive number'}",
            )
    return {k: v for k, v in value.items() if v is not None} or None


def _finite(number: int | float) -> bool:
    """Finite as a float: JSON's integers run to 4,300 digits, past float's range."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _invalid(field: str, reason: str):
    raise RequestError(422, field, f"{field}: {reason}", "invalid_field")


def _missing_or(value: Any, reason: str) -> str:
    return "is missing" if value is None else f"{reason} (got a JSON {_kind(value)})"


def _kind(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def _name(name: str) -> str:
    return name if len(name) <= 40 and name.isprintable() else _shown(name, 40)


def _shown(value: Any, limit: int = 60) -> str:
    """A caller's value as a reason shows it: short, and a container only by its kind."""
    if isinstance(value, dict | list):
        return f"a JSON {_kind(value)}"
    text = json.dumps(value[: limit + 2] if isinstance(value, str) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
