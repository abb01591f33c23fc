"""What routing is worth: replay held-out days through a capacity-constrained scheduler.

Every policy sees the same arrival stream and capacities. A job arrives with its candidates and a
fixed amount of work; the scheduler walks the policy's preference list and places the job on the
first type with free devices, or, when none has room, on the listed type that frees room first
(first come, first served: the job waits, and that wait is its queueing delay). An empty list
falls back to the as-logged type. The job then runs at its true throughput on the type it got, so
its duration and cost come from the oracle, never from a prediction.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

# Capacity per type: the as-logged peak of concurrent devices times this, plus one host.
CAPACITY_HEADROOM = 1.1


@dataclass(frozen=True)
class PolicyOutcome:
    cost: float  # USD: device-hours x hourly cost
    device_hours: float
    mean_queue_delay_s: float
    top_choice_share: float  # jobs placed on the first type of their list
    fallback_share: float  # jobs whose list was empty or could never fit: placed as logged


def capacities(placements: pl.DataFrame, min_devices: float = 8.0) -> dict[str, float]:
    """Devices per type: the peak concurrent use of ``placements`` (``hardware_type``,
    ``start_s``, ``end_s``, ``devices``) with headroom, and at least ``min_devices``."""
    capacity = {}
    for (hardware_type,), part in placements.group_by("hardware_type"):
        events = sorted(
            [(s, d) for s, d in zip(part["start_s"], part["devices"], strict=True)]
            + [(e, -d) for e, d in zip(part["end_s"], part["devices"], strict=True)],
            key=lambda event: (event[0], event[1]),
        )
        used = peak = 0.0
        for _, change in events:
            used += change
            peak = max(peak, used)
        capacity[hardware_type] = math.ceil(peak * CAPACITY_HEADROOM) + min_devices
    return capacity


def simulate(
    jobs: pl.DataFrame,
    options: pl.DataFrame,
    preferences: Mapping[str, Sequence[str]],
    capacity: Mapping[str, float],
) -> PolicyOutcome:
    """Replay ``jobs`` (``attempt_id``, ``arrival_s``, ``logged_hardware``) under one policy.

    ``options`` has one row per (attempt, candidate type): ``duration_s``, ``devices`` and
    ``cost_usd`` of the job's fixed work there, from the oracle.
    """
    table = {
        (a, h): (dur, dev, cost)
        for a, h, dur, dev, cost in options.select(
            "attempt_id", "hardware_type", "duration_s", "devices", "cost_usd"
        ).iter_rows()
    }
    running: dict[str, list[tuple[float, float]]] = {h: [] for h in capacity}
    used = dict.fromkeys(capacity, 0.0)
    cost = hours = delay = 0.0
    top = fallback = 0
    ordered = jobs.sort("arrival_s", "attempt_id")
    for attempt, arrival, logged in ordered.select(
        "attempt_id", "arrival_s", "logged_hardware"
    ).iter_rows():
        wanted = [h for h in preferences.get(attempt, ()) if (attempt, h) in table]
        fits = [h for h in wanted if table[(attempt, h)][1] <= capacity.get(h, 0.0)]
        if not fits:
            fallback += 1
            fits = [logged]
        choice, start = _place(arrival, fits, table, attempt, running, used, capacity)
        duration, devices, job_cost = table[(attempt, choice)]
        heapq.heappush(running[choice], (start + duration, devices))
        used[choice] += devices
        cost += job_cost
        hours += devices * duration / 3600.0
        delay += start - arrival
        top += bool(wanted) and choice == wanted[0]
    n = max(ordered.height, 1)
    return PolicyOutcome(cost, hours, delay / n, top / n, fallback / n)


def _place(arrival, fits, table, attempt, running, used, capacity) -> tuple[str, float]:
    """The first listed type with room now; else the one whose room frees first."""
    for hardware_type in fits:
        _release(running[hardware_type], used, hardware_type, arrival)
        if used[hardware_type] + table[(attempt, hardware_type)][1] <= capacity[hardware_type]:
            return hardware_type, arrival
    best = None
    for hardware_type in fits:
        need = table[(attempt, hardware_type)][1]
        free, when = capacity[hardware_type] - used[hardware_type], arrival
        for end, devices in sorted(running[hardware_type]):
            if free >= need:
                break
            free, when = free + devices, end
        if best is None or when < best[1]:
            best = (hardware_type, when)
    return best


def _release(heap: list, used: dict, hardware_type: str, now: float) -> None:
    while heap and heap[0][0] <= now:
        _, devices = heapq.heappop(heap)
        used[hardware_type] -= devices


def capture(cost_logged: float, cost_policy: float, cost_oracle: float) -> float | None:
    """The share of the oracle's saving over as-logged that a policy captures."""
    saving = cost_logged - cost_oracle
    return (cost_logged - cost_policy) / saving if saving > 0 else None
