"""What a small exploration budget is worth over the report's nights, on the simulated fleet.

Each night the Ranker names, for some launches, a candidate worth one trial run
(``leap_serving.decide.exploration``). With a budget of ``EXPLORATION_BUDGET`` of a night's
launches, the launches whose trial promises the largest saving get one: ``TRIAL_WORK_SHARE`` of
the job's work run on the named type, paid on top of the job itself. What a trial buys is that
type's truth for the family: from the next night on, each launch of the family that leap sends
elsewhere, and that could run on the tried type, goes to whichever of the two is truly cheaper.
Both costs come from the oracle; the gain is reported net of the trials' cost, beside leap's
own cost over the same launches. Capacity and queueing are left out (the trials are few).

The replay is generous in one respect (a trial's measurement is taken as the type's true
median) and stingy in another (a family's measurement on a type also sharpens the model's later
predictions through its history features, which the replay does not refit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from leap_pipeline.data.sources import Oracle

EXPLORATION_BUDGET = 0.02  # of a night's launches
TRIAL_WORK_SHARE = 0.05  # of the job's work, run once on the tried type


def exploration_value(
    nights: Sequence[tuple[pl.DataFrame, dict]],
    oracle: Oracle,
    budget: float = EXPLORATION_BUDGET,
    trial_share: float = TRIAL_WORK_SHARE,
) -> dict:
    """The replay over ``nights``, in order: each night's launches (``attempt_id``, ``family``,
    ``candidate_hardware``) with leap's first choice and named trials per launch
    (``routing.day_routing``'s ``launches``)."""
    revealed: dict[str, set[str]] = {}  # family -> types a trial measured, from the next night
    leap_cost = gross = trial_cost = 0.0
    trials_run = launches_moved = 0
    for attempts, launches in nights:
        ids = attempts["attempt_id"].to_list()
        types = sorted({t for c in attempts["candidate_hardware"] for t in c})
        truth = oracle.true_medians(ids, types)
        cost = {
            (a, t): c
            for a, t, c in truth.select("attempt_id", "hardware_type", "cost_usd").iter_rows()
        }
        family = dict(zip(ids, attempts["family"], strict=True))
        candidates = dict(zip(ids, attempts["candidate_hardware"], strict=True))
        first = launches["first"]
        for a in ids:
            choice = first.get(a)
            if choice is None or (a, choice) not in cost:
                continue
            leap_cost += cost[(a, choice)]
            tried = [t for t in revealed.get(family[a], ()) if t in candidates[a] and t != choice]
            if tried:
                best = min(tried, key=lambda t: cost[(a, t)])
                if cost[(a, best)] < cost[(a, choice)]:
                    gross += cost[(a, choice)] - cost[(a, best)]
                    launches_moved += 1
        allowed = math.floor(budget * len(ids))
        tonight: dict[str, set[str]] = {}
        for a, hardware_type, _ in sorted(launches["trials"], key=lambda t: -t[2]):
            if trials_run_tonight(tonight) >= allowed:
                break
            key = family[a]
            if hardware_type in revealed.get(key, ()) or hardware_type in tonight.get(key, ()):
                continue
            if (a, hardware_type) not in cost:
                continue
            trial_cost += trial_share * cost[(a, hardware_type)]
            tonight.setdefault(key, set()).add(hardware_type)
        trials_run += trials_run_tonight(tonight)
        for key, tried_types in tonight.items():
            revealed.setdefault(key, set()).update(tried_types)
    net = gross - trial_cost
    return {
        "budget": budget,
        "trial_work_share": trial_share,
        "trials": trials_run,
        "launches_moved": launches_moved,
        "trial_cost": trial_cost,
        "gross_saving": gross,
        "net_saving": net,
        "leap_cost": leap_cost,
        "net_share_of_leap_cost": net / leap_cost if leap_cost > 0 else None,
    }


def trials_run_tonight(tonight: dict[str, set[str]]) -> int:
    return sum(len(types) for types in tonight.values())
