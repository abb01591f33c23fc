"""Rank candidate hardware for a job launch (paper section 2.3): the call a launcher makes.

``Ranker.rank`` builds one feature row per candidate with the training code's extraction, predicts
throughput with the published cascade, prices each candidate and puts them in order (``pricing``:
throughput per dollar, the premium and trial rules), and returns the rest best first. It never
raises into the caller: any failure gives an empty ranking with the reason and a reason code
(``results``), logged and counted (``Ranker.stats()``).

A Ranker is one object assembled from its jobs, each in a module beside this one: following the
model pointer and loading in the background (``following``), the shadow canary of a new version
(``canary``), the routing switches (``switches``), the typing of a launch (``launch_fields``),
the pricing policy (``pricing``) and the latency watch (``latency``). This module holds the
constructor, the ranking calls and the statistics.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
import zoneinfo
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..launch.features import FEATURE_COLUMNS, launch_matrix, roofline_log_q
from ..launch.rows import CandidateRows
from ..model.intervals import history_class
from ..model.published import LeapModel, dependency_drift
from .canary import Canary, CanaryJudging
from .fit import BUDGET_FIELD, check_budget, request
from .following import ModelFollowing
from .latency import LATENCY_BUDGET_MS, LatencyMonitor
from .launch_fields import check_job
from .loaded import Loaded
from .pricing import order_candidates
from .results import REASON_CODES, JobError, Ranking, empty_ranking
from .switches import Switches

_COLD_START = FEATURE_COLUMNS.index("hist_cold_start")

MODEL_URI_ENV = "LEAP_MODEL_URI"
SWITCHES_ENV = "LEAP_ROUTING_SWITCHES"
DEFAULT_MODEL_URI = "models:/leap-throughput@production"
RANK_BY: tuple[str, ...] = ("median", "lower")  # what a ranking orders by (``Ranker``)


def _zone(name: str | None) -> dt.tzinfo | None:
    """The timezone a model's age is counted in: ``name`` (IANA), else the machine's own (None),
    where the fleet's days close for a server beside it. A night's day is the calendar's, so a
    server in another zone than UTC must not count it in UTC (it read one night behind every
    evening in US zones)."""
    if name is None:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"timezone={name!r} is not an IANA timezone such as 'UTC'") from None


class Ranker(ModelFollowing, CanaryJudging):
    """Loads the model the stable pointer names once, keeps it, and follows the pointer.

    Parameters
    ----------
    model_uri : ``models:/name@alias`` (default ``$LEAP_MODEL_URI`` or the production alias), or a
        local folder holding the model's artifact files.
    check_interval_s : how often, at most, a ``rank`` call checks whether the pointer moved (the
        reload happens in the background; ``reload()`` does it now).
    premium_min_ratio : the premium rule (``pricing``): a premium type stays only if its
        throughput per dollar is at least this times the best non-premium candidate's.
    switches_path : the routing switches file (default ``$LEAP_ROUTING_SWITCHES``; none: all on).
    wait : block until the first load attempt has finished (default: load in the background).
    max_model_age_days : days past its history snapshot after which the model counts as stale
        in ``stats()`` and a warning is logged at load; None: never (a replay of past days).
    rank_by : ``"median"`` (the prediction's throughput per dollar) or ``"lower"`` (the lower
        end of its interval per dollar: risk-aware, a candidate the model is unsure of ranks
        lower; the median where the model has no intervals).
    model : a model held in memory, served instead of ``model_uri`` and never reloaded (a
        night's evaluation replays its own day through the model it just trained).
    latency_budget_ms : the p99 of ``rank`` / ``rank_many`` calls, over each window of 1,000,
        past which a warning is logged (``latency.py``); percentiles are in ``stats()``. None:
        no budget.
    canary_launches : how many launches a new version the pointer names scores in shadow,
        beside the serving model and unseen by the caller, before it may serve; 0 swaps it in
        at once. Only launches the serving model predicted for count (ranked, or failed with
        ``prediction`` or ``internal_error``; not ones refused for their input). It is promoted
        after them if it answered a ranking wherever the serving model did (any empty ranking
        there fails it, but a ``launch_date`` refusal of a launch its caller dated), failed no
        launch with ``prediction`` or ``internal_error`` that the serving model did not, and
        gave finite, positive throughput; otherwise it is refused (``stats()``'s
        ``load_error`` names it and the launches it failed), the serving model stays, and the
        version is not tried again while the pointer names it. The first model a Ranker loads
        serves at once: there is nothing to compare it with. 200 by default: at a fleet's few
        thousand launches a day that is an hour or less, a delay a nightly model can afford,
        and a night's model that breaks on one launch in 100 is caught with probability 87%
        (1 - 0.99^200), one in 50 with 98%. Longer would not help a launcher that restarts
        often: a restart loads the pointer's version as its first model, unchecked, so a
        canary protects only a Ranker that outlives it (the nightly gate checks every version
        first either way). While it runs, each launch is scored twice.
    canary_max_s : the canary's bound in time: once a canary has waited this long it is judged
        on the launches it has seen (none, on a quiet fleet: then it serves), so a new version
        never waits days for traffic. None: launches only.
    follow_in_background : check the pointer every ``check_interval_s`` on a thread of its own
        (and end a canary past ``canary_max_s``), with no ranking call needed; a server sets it,
        so a promoted model serves within a minute on a quiet fleet. ``close`` stops it.
    timezone : the IANA timezone a model's age is counted in (the calendar's); default the
        machine's local time.
    """

    def __init__(
        self,
        model_uri: str | None = None,
        *,
        check_interval_s: float = 60.0,
        premium_min_ratio: float = 1.0,
        switches_path: str | Path | None = None,
        wait: bool = False,
        max_model_age_days: int | None = 3,
        rank_by: str = "median",
        model: LeapModel | None = None,
        canary_launches: int = 200,
        canary_max_s: float | None = 300.0,
        latency_budget_ms: float | None = LATENCY_BUDGET_MS,
        follow_in_background: bool = False,
        timezone: str | None = None,
    ) -> None:
        if rank_by not in RANK_BY:
            raise ValueError(f"rank_by={rank_by!r} is not one of {list(RANK_BY)}")
        whole = isinstance(canary_launches, int) and not isinstance(canary_launches, bool)
        if not whole or canary_launches < 0:
            raise ValueError(f"canary_launches={canary_launches!r} is not a whole number >= 0")
        self.canary_launches = canary_launches
        if canary_max_s is not None and not (
            isinstance(canary_max_s, int | float) and canary_max_s > 0
        ):
            raise ValueError(f"canary_max_s={canary_max_s!r} is not a positive number of seconds")
        self.canary_max_s = canary_max_s
        self.timezone = _zone(timezone)
        self.latency = LatencyMonitor(latency_budget_ms)
        self.rank_by = rank_by
        self._model = model
        self.model_uri = (
            "a model in memory"
            if model is not None
            else model_uri or os.environ.get(MODEL_URI_ENV) or DEFAULT_MODEL_URI
        )
        self.check_interval_s = check_interval_s
        self.premium_min_ratio = premium_min_ratio
        self.max_model_age_days = max_model_age_days
        self.switches = Switches(switches_path or os.environ.get(SWITCHES_ENV))
        self._loaded: Loaded | None = None
        self._canary: Canary | None = None  # a new version scoring in shadow before it serves
        self._passed_over: str | None = None  # the stamp of the version its canary refused
        self._load_error: str | None = None
        self._checked_at = time.monotonic()
        # guards _refreshing and the counters, and every change of _loaded, _canary and
        # _passed_over after the first load (a canary is judged on a caller's thread)
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()  # one load at a time
        self._ready = threading.Event()  # set once the first load attempt has finished
        self._refreshing = False
        self._counts: Counter[str] = Counter()
        self._stop = threading.Event()  # ends the background follower (``close``)
        self._start_refresh()
        if follow_in_background:
            self._start_following()
        if wait:
            self.wait_ready()

    @property
    def hardware_types(self) -> tuple[str, ...]:
        """The hardware types the serving model knows (its spec table); none before a load."""
        loaded = self._loaded
        return tuple(loaded.specs) if loaded is not None else ()

    def stats(self) -> dict[str, Any]:
        """Answers given, rankings with candidates, empty rankings by reason code, model loads
        and refusals, the model serving now, and the new version on canary (None when none is)."""
        with self._lock:
            counts = dict(self._counts)
            canary = self._canary
            canary = canary and {
                "version": canary.loaded.name,
                "launches_seen": min(canary.seen, canary.needed),
                "needed": canary.needed,
                "failures": len(canary.failures),
            }
        loaded = self._loaded
        age = None
        if loaded is not None and loaded.model.history_index.last_ds is not None:
            age = (dt.datetime.now(self.timezone).date() - loaded.model.history_index.last_ds).days
        return {
            "answers": counts.get("answers", 0),
            "ranked": counts.get("ranked", 0),
            "empty": {c: counts[f"empty.{c}"] for c in REASON_CODES if f"empty.{c}" in counts},
            "models_loaded": counts.get("models_loaded", 0),
            "models_refused": counts.get("models_refused", 0),
            "model_version": self.model_version,
            # the new version scoring in shadow before it may serve (``canary_launches``)
            "canary": canary,
            "load_error": self._load_error,
            # the day of the model's history snapshot (its night) and the days since, counted
            # in ``timezone``; stale past max_model_age_days
            "model_day": loaded.model.history_index.last_ds if loaded is not None else None,
            "model_age_days": age,
            "model_stale": (
                age is not None
                and self.max_model_age_days is not None
                and age > self.max_model_age_days
            ),
            # libraries that differ from the ones the model was saved with: name -> [saved, here]
            "dependency_drift": dependency_drift(loaded.model.metadata) if loaded else {},
            # the last calls' p50 / p99 / max in ms against the budget (``latency.py``)
            "latency": self.latency.summary(),
        }

    # -- ranking -------------------------------------------------------------------------------

    def rank(
        self,
        job: Mapping[str, Any],
        candidates: Iterable[str],
        *,
        launch_date: dt.date | None = None,
        budget: Mapping[str, float] | None = None,
    ) -> Ranking:
        """The job's candidates best first by predicted throughput per dollar; never raises.
        ``budget``: caps ``max_cost_per_hour`` and ``max_devices`` (``fit``)."""
        return self.rank_many([(job, candidates, budget)], launch_date=launch_date)[0]

    def rank_many(
        self,
        jobs: Sequence[tuple],
        *,
        launch_date: dt.date | None = None,
    ) -> list[Ranking]:
        """``rank`` for many launches at once: one feature build and one prediction pass. Each
        item is ``(job, candidates)`` or ``(job, candidates, budget)``."""
        started = self.latency.start()
        self._maybe_refresh()
        with self._lock:  # one model for the whole call, whatever a reload does meanwhile
            loaded, canary = self._loaded, self._canary
        version = loaded.version if loaded else None
        results: list[Ranking | None] = [None] * len(jobs)
        prepared = []
        for i, item in enumerate(jobs):
            job = None
            try:
                job, candidates, budget = request(item)
                if loaded is None:
                    if not self._ready.is_set():
                        raise JobError("model loading", "model_loading")
                    raise JobError(self._load_error or "no model loaded", "no_model")
                launch, types, ignored = check_job(job, candidates, loaded, launch_date)
                launch[BUDGET_FIELD] = check_budget(budget)
                if not self.switches.enabled(launch["model_type"]):
                    raise JobError(
                        f"routing is switched off for model type {launch['model_type']}",
                        "routing_off",
                    )
                prepared.append((i, launch, types, ignored))
            except Exception as exc:  # every failure becomes a reason
                results[i] = empty_ranking(exc, version, job)
        if prepared:
            try:
                self._score(prepared, loaded, results)
            except Exception as exc:
                for i, *_ in prepared:
                    results[i] = empty_ranking(exc, version, jobs[i][0])
        self._tally(results)
        if canary is not None:
            self._shadow(canary, jobs, results, launch_date)
        self.latency.record(started)  # the call as the caller waited for it, canary included
        return results  # type: ignore[return-value]

    def _tally(self, results: list) -> None:
        counts = Counter(
            "ranked" if r.reason_code is None else f"empty.{r.reason_code}" for r in results
        )
        counts["answers"] = len(results)
        with self._lock:
            self._counts.update(counts)

    def _score(self, prepared: list, loaded: Loaded, results: list, quiet: bool = False) -> None:
        rows = CandidateRows([(launch, types) for _, launch, types, _ in prepared])
        X = launch_matrix(rows, loaded.model.spec_table, loaded.model.history_index)
        log_q, bins, probability = loaded.compiled.predict(X)
        history_found = X[:, _COLD_START] == 0.0
        measured = history_class(X) >= 2  # the family has runs on the type
        prior = roofline_log_q(X)
        intervals = loaded.model.intervals
        low = high = np.full(len(X), np.nan)
        if intervals is not None:
            types_of_rows = [t for _, _, types, _ in prepared for t in types]
            low, high = intervals.bounds(log_q, types_of_rows, X)
        start = 0
        for i, launch, types, ignored in prepared:
            stop = start + len(types)
            try:
                novelty = (
                    loaded.model.novelty.assess(launch["model_type"], X[start])
                    if loaded.model.novelty is not None
                    else None
                )
                results[i] = self._order(
                    launch,
                    types,
                    log_q[start:stop],
                    bins[start:stop],
                    probability[start:stop],
                    history_found[start:stop],
                    loaded,
                    ignored,
                    prior[start:stop],
                    novelty,
                    (low[start:stop], high[start:stop]),
                    measured[start:stop],
                )
            except Exception as exc:
                results[i] = empty_ranking(exc, loaded.version, launch, quiet)
            start = stop

    def _order(
        self,
        launch,
        types,
        log_q,
        bins,
        probability,
        history_found,
        loaded,
        ignored,
        prior,
        novelty,
        interval,
        measured,
    ):
        """One launch's ranking by this Ranker's policy (``pricing``)."""
        return order_candidates(
            launch,
            types,
            log_q,
            bins,
            probability,
            history_found,
            loaded,
            ignored,
            prior,
            novelty,
            interval,
            measured,
            rank_by=self.rank_by,
            premium_min_ratio=self.premium_min_ratio,
        )
