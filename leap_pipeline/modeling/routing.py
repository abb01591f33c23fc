"""What routing is worth: replay held-out days through a capacity-constrained scheduler.

Every policy sees the same arrival stream and capacities. A job arrives with its candidates and a
fixed amount of work; the scheduler walks the policy's preference list and places the job on the
first type with free devices, or, when none has room, on the listed type that frees room first
(first come, first served: the job waits, and that wait is its queueing delay). An empty list
falls back to the as-logged type. The job then runs at its true throughput on the type it got, so
its duration and cost come from the oracle, never from a prediction.

``day_routing`` replays one day of a simulated fleet under every policy a user could run (as
logged, the lookup table, leap by its median, leap risk-aware by its interval's lower end, the
oracle): each night's evaluation records it, so the share of the oracle's saving the published
model captures is a nightly metric.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import polars as pl

from leap_pipeline.data.sources import Oracle
from leap_pipeline.modeling.selection import TrainedModels, serving_model
from leap_serving.decide.ranker import Ranker
from leap_serving.decide.results import Ranking

# Capacity per type: the as-logged peak of concurrent devices times this, plus one host.
CAPACITY_HEADROOM = 1.1
# a job "ran slow" when its run took more than this times its run on its fastest candidate
SLOW_FACTOR = 1.5
# the policies ``day_routing`` replays; leap's two are the Ranker's ``rank_by`` options
POLICIES = ("as_logged", "lookup", "leap", "leap_lower", "oracle")


@dataclass(frozen=True)
class PolicyOutcome:
    cost: float  # USD: device-hours x hourly cost
    device_hours: float
    mean_queue_delay_s: float
    top_choice_share: float  # jobs placed on the first type of their list
    fallback_share: float  # jobs whose list was empty or could never fit: placed as logged
    slow_share: float  # jobs whose run took > SLOW_FACTOR x their fastest candidate's (true)


PLACEMENT_SCHEMA = pl.Schema(
    {
        "attempt_id": pl.String,
        "hardware_type": pl.String,
        "arrival_s": pl.Float64,
        "start_s": pl.Float64,
        "duration_s": pl.Float64,
        "devices": pl.Float64,
        "cost_usd": pl.Float64,
        "listed_first": pl.Boolean,
        "fallback": pl.Boolean,
        "slow": pl.Boolean,
    }
)


def peak_devices(placements: pl.DataFrame) -> dict[str, float]:
    """Per type, the most devices ``placements`` (``hardware_type``, ``start_s``, ``end_s``,
    ``devices``) held at once: a run ending when another starts frees its devices first."""
    peak_by_type = {}
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
        peak_by_type[hardware_type] = peak
    return peak_by_type


def capacities(placements: pl.DataFrame, min_devices: float = 8.0) -> dict[str, float]:
    """Devices per type: the peak concurrent use of ``placements`` (``hardware_type``,
    ``start_s``, ``end_s``, ``devices``) with headroom, and at least ``min_devices``."""
    return {
        hardware_type: math.ceil(peak * CAPACITY_HEADROOM) + min_devices
        for hardware_type, peak in peak_devices(placements).items()
    }


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
    return outcome(place(jobs, options, preferences, capacity))


def outcome(placements: pl.DataFrame) -> PolicyOutcome:
    """What a replay's ``placements`` (``place``) cost and how they ran."""
    n = max(placements.height, 1)
    return PolicyOutcome(
        float(placements["cost_usd"].sum()),
        float((placements["devices"] * placements["duration_s"]).sum() / 3600.0),
        float((placements["start_s"] - placements["arrival_s"]).sum() / n),
        float(placements["listed_first"].sum() / n),
        float(placements["fallback"].sum() / n),
        float(placements["slow"].sum() / n),
    )


def place(
    jobs: pl.DataFrame,
    options: pl.DataFrame,
    preferences: Mapping[str, Sequence[str]],
    capacity: Mapping[str, float],
) -> pl.DataFrame:
    """``simulate``'s replay, one row per job: the type it was placed on, its arrival and start,
    its ``duration_s``, ``devices`` and ``cost_usd`` there (from ``options``), and whether it got
    its first listed type (``listed_first``), fell back to its logged type (``fallback``) or ran
    slow (``slow``). Who got which type is what a plan prices again with other durations."""
    table = {
        (a, h): (dur, dev, cost)
        for a, h, dur, dev, cost in options.select(
            "attempt_id", "hardware_type", "duration_s", "devices", "cost_usd"
        ).iter_rows()
    }
    fastest: dict[str, float] = {}
    for (attempt, _), (duration, _, _) in table.items():
        fastest[attempt] = min(duration, fastest.get(attempt, math.inf))
    running: dict[str, list[tuple[float, float]]] = {h: [] for h in capacity}
    used = dict.fromkeys(capacity, 0.0)
    rows = []
    ordered = jobs.sort("arrival_s", "attempt_id")
    for attempt, arrival, logged in ordered.select(
        "attempt_id", "arrival_s", "logged_hardware"
    ).iter_rows():
        wanted = [h for h in preferences.get(attempt, ()) if (attempt, h) in table]
        fits = [h for h in wanted if table[(attempt, h)][1] <= capacity.get(h, 0.0)]
        fallback = not fits
        if fallback:
            fits = [logged]
        choice, start = _place(arrival, fits, table, attempt, running, used, capacity)
        duration, devices, job_cost = table[(attempt, choice)]
        heapq.heappush(running[choice], (start + duration, devices))
        used[choice] += devices
        rows.append(
            (
                attempt,
                choice,
                arrival,
                start,
                duration,
                devices,
                job_cost,
                bool(wanted) and choice == wanted[0],
                fallback,
                duration > SLOW_FACTOR * fastest[attempt],
            )
        )
    return pl.DataFrame(rows, schema=PLACEMENT_SCHEMA, orient="row")


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


def day_routing(
    attempts: pl.DataFrame,
    specs: pl.DataFrame,
    snapshot: pl.DataFrame,
    models: TrainedModels,
    oracle: Oracle,
) -> dict:
    """Day D's launches (``attempts``, with their candidates) replayed under each of
    ``POLICIES``; durations and costs from the ``oracle``'s truth. leap's lists come from the
    Ranker serving the night's published model with ``snapshot`` (as of D-1) and ``specs``, as
    a launcher would have asked on day D. Returns each policy's outcome, the share of the
    oracle's saving over as-logged each captures, how many launches named a candidate worth a
    trial run and, under ``launches``, leap's first choice and those trials per launch."""
    day = attempts["ds"][0]
    model = serving_model(models, snapshot, specs)
    median = Ranker(model=model, wait=True, max_model_age_days=None)
    rankings = rank_day(median, attempts, day)
    lists = {
        "leap": {a: r.preference_list for a, r in rankings.items()},
        "leap_lower": ranked_lists(
            Ranker(model=model, wait=True, max_model_age_days=None, rank_by="lower"), attempts, day
        ),
    }
    outcomes = replay(attempts, specs, models, lists, oracle)
    logged, best = outcomes["as_logged"].cost, outcomes["oracle"].cost
    trials = [
        (a, r.worth_a_trial["hardware_type"], r.worth_a_trial["expected_saving"])
        for a, r in rankings.items()
        if r.worth_a_trial is not None
    ]
    return {
        "policies": {name: asdict(outcome) for name, outcome in outcomes.items()},
        "capture": {name: capture(logged, o.cost, best) for name, o in outcomes.items()},
        "trials_named": len(trials),
        # per launch, for a replay across nights (``studies.exploration``); not kept in files
        "launches": {
            "first": {a: lists["leap"][a][0] for a in lists["leap"] if lists["leap"][a]},
            "trials": trials,
        },
    }


def rank_day(ranker: Ranker, attempts: pl.DataFrame, day: dt.date) -> dict[str, Ranking]:
    """Each launch's ranking as ``ranker`` answers it on ``day``, by attempt id."""
    jobs = [
        ({k: v for k, v in row.items() if k != "candidate_hardware"}, row["candidate_hardware"])
        for row in attempts.iter_rows(named=True)
    ]
    rankings = ranker.rank_many(jobs, launch_date=day)
    return dict(zip(attempts["attempt_id"], rankings, strict=True))


def ranked_lists(ranker: Ranker, attempts: pl.DataFrame, day: dt.date) -> dict[str, list]:
    """Each launch's preference list as ``ranker`` answers it on ``day``."""
    return {a: r.preference_list for a, r in rank_day(ranker, attempts, day).items()}


def replay(
    attempts: pl.DataFrame,
    specs: pl.DataFrame,
    models: TrainedModels,
    leap_lists: Mapping[str, Mapping[str, list]],
    oracle: Oracle,
) -> dict[str, PolicyOutcome]:
    """The day replayed under as-logged, the lookup table per dollar, each of ``leap_lists``
    and the oracle's cheapest type; capacities from the as-logged placements."""
    types = specs["hardware_type"].to_list()
    truth = oracle.true_medians(attempts["attempt_id"].to_list(), types)
    cost_per_hour = dict(zip(types, specs["hourly_cost_usd"].to_list(), strict=True))
    candidates = attempts.select("attempt_id", pl.col("candidate_hardware").alias("hardware_type"))
    # devices as contract.job_devices counts them: the ranker's cost uses the same definition
    options = truth.join(candidates.explode("hardware_type"), on=["attempt_id", "hardware_type"])
    day_start = dt.datetime.combine(attempts["ds"][0], dt.time())
    jobs = attempts.select(
        "attempt_id",
        arrival_s=(pl.col("launch_ts") - pl.lit(day_start)).dt.total_microseconds() / 1e6,
        logged_hardware="hardware_type",
    )
    logged = jobs.join(
        options, left_on=["attempt_id", "logged_hardware"], right_on=["attempt_id", "hardware_type"]
    )
    capacity = capacities(
        logged.select(
            hardware_type="logged_hardware",
            start_s="arrival_s",
            end_s=pl.col("arrival_s") + pl.col("duration_s"),
            devices="devices",
        )
    )
    for hardware_type in types:
        capacity.setdefault(hardware_type, 8.0)
    lookup = models.lookup.predict(
        attempts.explode("candidate_hardware")
        .drop("hardware_type")
        .rename({"candidate_hardware": "hardware_type"})
    )
    exploded = (
        attempts.explode("candidate_hardware")
        .select("attempt_id", "num_trainers", hardware_type="candidate_hardware")
        .with_columns(lookup=lookup)
    )
    per_dollar = (
        exploded.join(
            options.select("attempt_id", "hardware_type", "devices"),
            on=["attempt_id", "hardware_type"],
        )
        .with_columns(
            score=pl.col("lookup")
            / (
                pl.col("devices")
                * pl.col("hardware_type").replace_strict(cost_per_hour, return_dtype=pl.Float64)
            )
        )
        .filter(pl.col("score").is_not_null())
        .sort("score", descending=True)
    )
    lookup_lists = per_dollar.group_by("attempt_id", maintain_order=True).agg("hardware_type")
    cheapest = (
        options.sort("cost_usd").group_by("attempt_id", maintain_order=True).agg("hardware_type")
    )
    policies = {
        "as_logged": dict(
            zip(jobs["attempt_id"], ([h] for h in jobs["logged_hardware"]), strict=True)
        ),
        "lookup": dict(lookup_lists.iter_rows()),
        **leap_lists,
        "oracle": dict(cheapest.iter_rows()),
    }
    return {name: simulate(jobs, options, lists, capacity) for name, lists in policies.items()}
