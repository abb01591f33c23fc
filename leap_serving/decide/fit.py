"""Candidates a launch cannot use, removed before the ranking orders the rest: memory fit and the
request's budget caps.

A prediction says how fast a job would run on a type; it does not say whether the job can run
there at all. Two rules remove a candidate whatever its predicted throughput, each with its own
code (``CandidateScore.removed_code``) and a reason in plain words:

- ``does_not_fit``: the launch's memory estimate per device (``launch.memory``, arithmetic over
  what the launcher sends) is more than the type's device memory. A type the job's family has
  finished runs on is never removed: the fleet has shown that it fits, whatever the estimate says.
- ``over_cost_cap`` / ``over_device_cap``: the request's ``budget`` (``max_cost_per_hour``, USD
  per hour for the whole job, against ``CandidateScore.cost_per_hour``; ``max_devices``, the
  devices the job would occupy on the type) is exceeded.

When no candidate is left the ranking is empty, with reason code ``does_not_fit`` when memory
removed them all and ``over_budget`` when a cap removed at least one. The request's budget
travels with the typed launch, under ``BUDGET_FIELD`` (no contract column has that name).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..launch.memory import bytes_per_device
from .results import CandidateScore, JobError, Ranking, shown

BUDGET_KEYS = ("max_cost_per_hour", "max_devices")
BUDGET_FIELD = "budget"  # the typed launch's key for the request's checked budget
# why a single candidate is removed (``CandidateScore.removed_code``)
REMOVAL_CODES = ("does_not_fit", "over_cost_cap", "over_device_cap", "premium")


def request(item: Any) -> tuple[Any, Any, Any]:
    """A ``rank_many`` item as ``(job, candidates, budget)``: it is ``(job, candidates)`` or
    ``(job, candidates, budget)``."""
    if isinstance(item, (tuple, list)) and len(item) in (2, 3):
        return item[0], item[1], item[2] if len(item) == 3 else None
    raise JobError(
        f"a launch must be (job, candidates) or (job, candidates, budget), not {shown(item)}"
    )


def check_budget(budget: Any) -> dict[str, float] | None:
    """The request's budget caps, checked: a mapping of ``BUDGET_KEYS`` to non-negative numbers
    (None or absent: no cap); a ``JobError`` naming the field and value otherwise."""
    if budget is None:
        return None
    if not isinstance(budget, Mapping):
        raise JobError(f"budget={shown(budget)} is not a mapping of {list(BUDGET_KEYS)}")
    caps = {}
    for key, value in budget.items():
        if key not in BUDGET_KEYS:
            raise JobError(f"budget.{shown(key)} is not one of {list(BUDGET_KEYS)}")
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        try:  # an integer past float's range is not a usable cap either
            finite = number and math.isfinite(value)
        except OverflowError:
            finite = False
        if not finite or value < 0:
            raise JobError(f"budget.{key}={shown(value)} is not a non-negative number")
        caps[key] = float(value)
    return caps or None


def screen(
    launch: Mapping[str, Any],
    fields: list[dict[str, Any]],
    specs: Sequence[Mapping[str, Any]],
    devices: np.ndarray,
    measured: np.ndarray,
) -> tuple[list[dict[str, Any]], list[CandidateScore]]:
    """The candidates' fields (one per type, as ``pricing`` builds them, in ``specs``' order)
    split into those kept and those removed by memory fit or the budget, with their reasons."""
    need = bytes_per_device(launch, [spec["devices_per_host"] for spec in specs])
    memory = np.array([spec["memory_gb"] for spec in specs], dtype=np.float64) * 1e9
    unfit = (need > memory) & ~np.asarray(measured, dtype=bool)  # NaN: no estimate, kept
    caps = launch.get(BUDGET_FIELD) or {}
    out = unfit
    if caps:
        cost = np.array([f["cost_per_hour"] for f in fields], dtype=np.float64)
        out = unfit | (cost > caps.get("max_cost_per_hour", math.inf))
        out |= devices > caps.get("max_devices", math.inf)
    if not out.any():  # the common case, without a loop over the candidates
        return fields, []
    kept, removed = [], []
    for j, f in enumerate(fields):
        code = reason = None
        if not out[j]:
            pass
        elif unfit[j]:
            code = "does_not_fit"
            reason = (
                f"does not fit: the job needs about {need[j] / 1e9:,.1f} GB on each of the "
                f"{devices[j]:g} devices it would occupy, more than the "
                f"{memory[j] / 1e9:g} GB of device memory of {f['hardware_type']}"
            )
        elif f["cost_per_hour"] > caps.get("max_cost_per_hour", math.inf):
            code = "over_cost_cap"
            reason = (
                f"over the cost cap: {f['cost_per_hour']:,.2f} USD per hour for the job is "
                f"more than budget.max_cost_per_hour={caps['max_cost_per_hour']:g}"
            )
        elif devices[j] > caps.get("max_devices", math.inf):
            code = "over_device_cap"
            reason = (
                f"over the device cap: the job would occupy {devices[j]:g} devices of "
                f"{f['hardware_type']}, more than budget.max_devices={caps['max_devices']:g}"
            )
        if code is None:
            kept.append(f)
        else:
            removed.append(CandidateScore(**f, rank=None, removed_code=code, removed_reason=reason))
    return kept, removed


def none_left(removed: list[CandidateScore], version: str | None, ignored: list[str]) -> Ranking:
    """The empty ranking of a launch whose every candidate was removed, with why."""
    unfit = [c.hardware_type for c in removed if c.removed_code == "does_not_fit"]
    capped = [c.hardware_type for c in removed if c.removed_code != "does_not_fit"]
    parts = [f"{unfit} do not fit in device memory"] if unfit else []
    parts += [f"{capped} are over the budget's caps"] if capped else []
    reason = f"no candidate can take the job: {'; '.join(parts)} (see removed)"
    code = "over_budget" if capped else "does_not_fit"
    return Ranking([], removed, version, reason, ignored, reason_code=code)
