"""Rank candidate hardware for a job launch (paper section 2.3): the call a launcher makes.

``Ranker.rank`` builds one feature row per candidate with the training code's extraction, predicts
throughput with the published cascade, divides by the job's cost on each type (``job_devices`` of
the contract, the definition the oracle and the routing simulation share), removes premium types
the job would not use efficiently, and returns the rest best first. It never raises into the
caller: any failure gives an empty ranking with the reason and a reason code, logged and counted
(``Ranker.stats()``); an unexpected error is logged with its traceback.

The model loads in the background: the constructor returns at once, and a launch before the first
model is ready gets an empty ranking with the reason "model loading". A model that fails its
integrity checks is refused, and the ranker keeps serving the one it had.

A new version the pointer names later is canaried before it serves (``canary_launches``): the
serving model keeps answering every launch while the next launches are also scored by the new
one in shadow, its answers discarded. It is promoted only if it answered a ranking wherever the
serving model did, with finite, positive predictions; otherwise it is refused like a model that
fails its checks, naming the launches it failed.

The premium rule: a premium type stays only if its throughput per dollar is at least
``premium_min_ratio`` times that of the best non-premium candidate (1.0 by default: a premium
type must pay for itself). With no non-premium candidate, premium types stay.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .compiled import CompiledCascade
from .contract import job_devices, schema
from .exploration import Candidate, trial_run
from .features import FEATURE_COLUMNS, LAUNCH_COLUMNS, launch_matrix, roofline_log_q
from .intervals import history_class
from .latency import LATENCY_BUDGET_MS, LatencyMonitor
from .model import (
    LeapModel,
    ModelArtifactError,
    dependency_drift,
    load_registered,
    registry_version,
)
from .publish import PublicationError, manifest_stamp
from .rows import CandidateRows

log = logging.getLogger("leap_serving")
_COLD_START = FEATURE_COLUMNS.index("hist_cold_start")

MODEL_URI_ENV = "LEAP_MODEL_URI"
SWITCHES_ENV = "LEAP_ROUTING_SWITCHES"
DEFAULT_MODEL_URI = "models:/leap-throughput@production"
RANK_BY: tuple[str, ...] = ("median", "lower")  # what a ranking orders by (``Ranker``)
REQUIRED_JOB_FIELDS = ("job_name", "model_type", "num_trainers", "batch_size")
_POSITIVE_FIELDS = ("num_trainers", "batch_size", "requested_devices_per_host")
# why a ranking can be empty; ``Ranker.stats()`` counts each
REASON_CODES = (
    "model_loading",  # the first model is not ready yet
    "no_model",  # no model could be loaded
    "invalid_job",  # a launch field is missing or malformed
    "invalid_candidates",  # no, malformed or unknown candidate types
    "launch_date",  # the launch is not after the model's history snapshot
    "routing_off",  # the routing switch of the model type is off
    "prediction",  # the model predicted no usable throughput or the type no usable cost
    "internal_error",  # a bug: logged with its traceback
)
_NON_NEGATIVE_FIELDS = (
    "num_readers", "tensor_parallel", "pipeline_parallel", "num_sparse_features",
    "num_dense_features", "hash_size", "seq_len", "training_days",
)  # fmt: skip
# fields a launcher may send that describe the attempt, not the launch: accepted, not used
_CONTRACT = schema("job_attempts")  # read-only; built once, not per launch
_CONTRACT_FIELDS = set(_CONTRACT)


@dataclass(frozen=True)
class CandidateScore:
    hardware_type: str
    predicted_throughput: float  # samples/s
    cost_per_hour: float  # USD per hour for the job: hourly cost x contract.job_devices
    throughput_per_cost: float  # samples per USD
    rank: int | None  # 1 = best; None when removed
    bin: int  # the cascade bin the classifier chose
    bin_probability: float
    history_found: bool  # the job's family was in the model's history snapshot
    premium: bool
    removed_reason: str | None = None
    roofline_throughput: float | None = None  # samples/s by the roofline prior alone
    # the model's conformal interval on throughput at the Ranking's ``interval_level`` (None:
    # a model published before intervals existed)
    throughput_low: float | None = None
    throughput_high: float | None = None


@dataclass(frozen=True)
class Ranking:
    ranking: list[CandidateScore]
    removed: list[CandidateScore] = field(default_factory=list)
    model_version: str | None = None
    reason: str | None = None  # why the ranking is empty, in plain words
    ignored_fields: list[str] = field(default_factory=list)
    reason_code: str | None = None  # one of REASON_CODES when empty
    # the launch's architecture against the model's known types (``novelty.Novelty``)
    novelty: dict[str, Any] | None = None
    # what orders the ranking: "model", "model_lower" (the interval's lower end, risk-aware),
    # or "roofline_prior" for a novel launch
    order: str = "model"
    order_reason: str | None = None
    interval_level: float | None = None  # the coverage throughput_low/high are calibrated to
    # the candidate worth one trial run (``exploration.trial_run``): its type, the expected
    # share of the cost per sample a trial can save and why; None when none is
    worth_a_trial: dict[str, Any] | None = None

    @property
    def preference_list(self) -> list[str]:
        return [c.hardware_type for c in self.ranking]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_version": self.model_version,
            "ranking": [asdict(c) for c in self.ranking],
            "removed": [asdict(c) for c in self.removed],
            "reason": self.reason,
            "reason_code": self.reason_code,
            "ignored_fields": list(self.ignored_fields),
            "novelty": self.novelty,
            "order": self.order,
            "order_reason": self.order_reason,
            "interval_level": self.interval_level,
            "worth_a_trial": self.worth_a_trial,
        }


class JobError(ValueError):
    """The job or candidate list cannot be ranked; the message is the ranking's reason, the
    code one of ``REASON_CODES``."""

    def __init__(self, reason: str, code: str = "invalid_job") -> None:
        super().__init__(reason)
        self.code = code


@dataclass(frozen=True)
class _Loaded:
    """One model, fully prepared: swapped in as a whole, so a call never sees half of one."""

    model: LeapModel
    compiled: CompiledCascade
    version: str | None
    specs: dict[str, dict[str, Any]]
    stamp: str | None  # the registry version, or the folder manifest's sha256

    @property
    def name(self) -> str | None:
        return self.version or self.stamp


# empty rankings that say something about the model (not about the launch): a canary that gives
# one where the serving model did not fails on that launch
_MODEL_FAILURES = ("prediction", "internal_error")
_CANARY_FAILURES_SHOWN = 5  # launches a refusal names; the rest are counted


@dataclass
class _Canary:
    """A newly loaded version held beside the serving one while it scores ``needed`` launches
    in shadow. Changed only under ``Ranker._lock``."""

    loaded: _Loaded
    needed: int
    seen: int = 0
    failures: list[str] = field(default_factory=list)  # "job 'x': what went wrong", per launch


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
        raise ValueError(f"default={_show(default)} is not true or false")
    types = config.get("model_types", {})
    if not isinstance(types, dict):
        raise ValueError(f"model_types={_show(types)} is not an object")
    for model_type, enabled in types.items():
        if not isinstance(enabled, bool):
            raise ValueError(f"model_types.{_show(model_type)}={_show(enabled)} is not a boolean")
    return default, dict(types)


class Ranker:
    """Loads the model the stable pointer names once, keeps it, and follows the pointer.

    Parameters
    ----------
    model_uri : ``models:/name@alias`` (default ``$LEAP_MODEL_URI`` or the production alias), or a
        local folder holding the model's artifact files.
    check_interval_s : how often, at most, a ``rank`` call checks whether the pointer moved (the
        reload happens in the background; ``reload()`` does it now).
    premium_min_ratio : see the module docstring.
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
        latency_budget_ms: float | None = LATENCY_BUDGET_MS,
    ) -> None:
        if rank_by not in RANK_BY:
            raise ValueError(f"rank_by={rank_by!r} is not one of {list(RANK_BY)}")
        whole = isinstance(canary_launches, int) and not isinstance(canary_launches, bool)
        if not whole or canary_launches < 0:
            raise ValueError(f"canary_launches={canary_launches!r} is not a whole number >= 0")
        self.canary_launches = canary_launches
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
        self._loaded: _Loaded | None = None
        self._canary: _Canary | None = None  # a new version scoring in shadow before it serves
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
        self._start_refresh()
        if wait:
            self.wait_ready()

    # -- the model ---------------------------------------------------------------------------

    @property
    def model_version(self) -> str | None:
        loaded = self._loaded
        return loaded.version if loaded else None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the first load attempt has finished; True if a model is loaded."""
        self._ready.wait(timeout)
        return self._loaded is not None

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
            age = (dt.datetime.now(dt.UTC).date() - loaded.model.history_index.last_ds).days
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
            # days since the model's history snapshot; stale past max_model_age_days
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

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def reload(self) -> bool:
        """Load the model the URI names now if it differs from the one held; True if swapped.

        The pointer (the alias, or the folder's manifest) is read once and that exact version
        loaded. A model that cannot load or fails its checks leaves the held one serving. With
        ``canary_launches``, a new version after the first is held on canary instead (False;
        ``stats()['canary']`` shows it) and the launches that follow promote or refuse it.
        """
        with self._load_lock:
            try:
                return self._reload()
            finally:
                self._checked_at = time.monotonic()
                self._ready.set()

    def _reload(self) -> bool:
        try:
            source, stamp = self._pointer()
            with self._lock:
                if stamp is not None and stamp == self._passed_over:
                    return False  # its canary refused it: not tried again while it is named
                self._passed_over = None
                held, canary = self._loaded, self._canary
                if canary is not None and stamp is not None and stamp == canary.loaded.stamp:
                    return False  # on canary already
                self._canary = None  # the pointer names another version: the canary ends
            if canary is not None:
                log.warning(
                    "leap_serving: canary of model %s version %s abandoned after %d of %d "
                    "launches: the pointer names %s now",
                    self.model_uri, canary.loaded.name, canary.seen, canary.needed, stamp,
                )  # fmt: skip
            if held is not None and stamp is not None and stamp == held.stamp:
                return False
            loaded = self._load(source, stamp)
        except (ModelArtifactError, PublicationError, OSError) as exc:
            self._refused(f"model {self.model_uri} cannot be loaded: {exc}")
            return False
        except Exception as exc:  # MLflow's errors, or a bug: keep the traceback
            self._refused(
                f"model {self.model_uri} cannot be loaded: {type(exc).__name__}: {exc}",
                traceback=True,
            )
            return False
        return self._take(loaded)

    def _take(self, loaded: _Loaded) -> bool:
        """Serve a freshly loaded version (True), or hold it on canary beside the serving one."""
        with self._lock:
            held = self._loaded
            on_canary = held is not None and self.canary_launches > 0
            if on_canary:
                self._canary = _Canary(loaded, self.canary_launches)
            else:
                self._loaded = loaded
        if on_canary:
            log.info(
                "leap_serving: model %s version %s loaded, on canary for %d launches beside "
                "version %s",
                self.model_uri, loaded.name, self.canary_launches, held.name,
            )  # fmt: skip
            return False
        self._serving(loaded, "loaded")
        return True

    def _serving(self, loaded: _Loaded, how: str) -> None:
        self._load_error = None
        self._count("models_loaded")
        log.info("leap_serving: model %s version %s %s", self.model_uri, loaded.name, how)
        self._warn_if_outdated()

    def _judge(self, canary: _Canary, seen: int, failures: list[str]) -> None:
        """Add a call's shadow launches to the canary; promote or refuse it once it has seen
        enough. Runs on the caller's thread, after the caller's answer is made."""
        with self._lock:
            if self._canary is not canary:
                return  # judged already, or replaced by a newer version
            canary.seen += seen
            canary.failures.extend(failures)
            if canary.seen < canary.needed:
                return
            self._canary = None
            held = self._loaded
            if not canary.failures:
                self._loaded = canary.loaded
            else:
                self._passed_over = canary.loaded.stamp
        if not canary.failures:
            self._serving(canary.loaded, f"serving after a canary of {canary.seen} launches")
            return
        shown = "; ".join(canary.failures[:_CANARY_FAILURES_SHOWN])
        more = len(canary.failures) - _CANARY_FAILURES_SHOWN
        self._refused(
            f"model {self.model_uri} version {canary.loaded.name} refused by its canary: on "
            f"{len(canary.failures)} of {canary.seen} launches it gave no sane ranking where "
            f"version {held.name if held else None} did: {shown}"
            + (f"; and {more} more" if more > 0 else "")
        )

    def _warn_if_outdated(self) -> None:
        stats = self.stats()
        if stats["model_stale"]:
            log.warning(
                "leap_serving: model %s is %d days past its history snapshot (limit %d): is the "
                "nightly pipeline running?",
                self.model_uri, stats["model_age_days"], self.max_model_age_days,
            )  # fmt: skip
        if stats["dependency_drift"]:
            log.warning(
                "leap_serving: model %s was saved with other library versions than these "
                "(name: saved, here): %s",
                self.model_uri, stats["dependency_drift"],
            )  # fmt: skip

    def _refused(self, message: str, traceback: bool = False) -> None:
        held = self._loaded
        if held is not None:
            message += f"; still serving version {held.version or held.stamp}"
        self._load_error = message
        self._count("models_refused")
        (log.exception if traceback else log.error)("leap_serving: %s", message)

    def _pointer(self) -> tuple[str | Path | LeapModel, str | None]:
        """What to load and its identity, read once: (URI, registry version) or (the folder the
        path points at now, its manifest's sha256), or the model held in memory."""
        if self._model is not None:
            return self._model, "memory"
        if self.model_uri.startswith("models:/"):
            return self.model_uri, registry_version(self.model_uri)
        folder = Path(self.model_uri).resolve()
        return folder, manifest_stamp(folder)

    def _load(self, source: str | Path | LeapModel, stamp: str | None) -> _Loaded:
        if isinstance(source, LeapModel):
            model, version = source, None
        elif isinstance(source, str):
            model, version = load_registered(source, version=stamp)
        else:
            model, version = LeapModel.load(source), None
        compiled = CompiledCascade(model.cascade)
        specs = {row["hardware_type"]: row for row in model.hardware_specs.iter_rows(named=True)}
        # compile and warm the tree walk before the model serves a launch
        compiled.predict(np.zeros((1, model.cascade.n_features_in_)))
        return _Loaded(model, compiled, version, specs, stamp)

    def _start_refresh(self) -> bool:
        with self._lock:
            if self._refreshing:
                return False
            self._refreshing = True

        def refresh() -> None:
            try:
                self.reload()
            finally:
                with self._lock:
                    self._refreshing = False

        threading.Thread(target=refresh, name="leap-model-refresh", daemon=True).start()
        return True

    def _maybe_refresh(self) -> None:
        if time.monotonic() - self._checked_at < self.check_interval_s:
            return
        self._checked_at = time.monotonic()
        self._start_refresh()

    # -- ranking -------------------------------------------------------------------------------

    def rank(
        self,
        job: Mapping[str, Any],
        candidates: Iterable[str],
        *,
        launch_date: dt.date | None = None,
    ) -> Ranking:
        """The job's candidates best first by predicted throughput per dollar; never raises."""
        return self.rank_many([(job, candidates)], launch_date=launch_date)[0]

    def rank_many(
        self,
        jobs: Sequence[tuple[Mapping[str, Any], Iterable[str]]],
        *,
        launch_date: dt.date | None = None,
    ) -> list[Ranking]:
        """``rank`` for many launches at once: one feature build and one prediction pass."""
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
                job, candidates = item
                if loaded is None:
                    if not self._ready.is_set():
                        raise JobError("model loading", "model_loading")
                    raise JobError(self._load_error or "no model loaded", "no_model")
                launch, types, ignored = _check_job(job, candidates, loaded, launch_date)
                if not self.switches.enabled(launch["model_type"]):
                    raise JobError(
                        f"routing is switched off for model type {launch['model_type']}",
                        "routing_off",
                    )
                prepared.append((i, launch, types, ignored))
            except Exception as exc:  # every failure becomes a reason
                results[i] = _empty(exc, version, job)
        if prepared:
            try:
                self._score(prepared, loaded, results)
            except Exception as exc:
                for i, *_ in prepared:
                    results[i] = _empty(exc, version, jobs[i][0])
        self._tally(results)
        if canary is not None:
            self._shadow(canary, jobs, results, launch_date)
        self.latency.record(started)  # the call as the caller waited for it, canary included
        return results  # type: ignore[return-value]

    def _shadow(self, canary: _Canary, jobs: Sequence, results: list, launch_date) -> None:
        """Score the launches the serving model predicted for (at most as many as the canary
        still needs) with the canary's version too, and judge it. The caller's results are only
        read; nothing here raises."""
        seen, failures = 0, []
        try:
            compared = [
                i for i, r in enumerate(results)
                if r.reason_code is None or r.reason_code in _MODEL_FAILURES
            ][: max(canary.needed - canary.seen, 0)]  # fmt: skip
            seen = len(compared)
            candidate = canary.loaded
            shadow: list[Ranking | None] = [None] * len(jobs)
            prepared = []
            for i in compared:
                job, candidates = jobs[i]
                try:
                    launch, types, ignored = _check_job(job, candidates, candidate, launch_date)
                    prepared.append((i, launch, types, ignored))
                except Exception as exc:  # its own snapshot and spec table judge the launch
                    shadow[i] = _empty(exc, candidate.version, job, quiet=True)
            if prepared:
                try:
                    self._score(prepared, candidate, shadow, quiet=True)
                except Exception as exc:
                    for i, *_ in prepared:
                        shadow[i] = _empty(exc, candidate.version, jobs[i][0], quiet=True)
            for i in compared:
                job = jobs[i][0]
                dated = launch_date is not None or (
                    isinstance(job, Mapping) and job.get("ds") is not None
                )
                problem = _canary_problem(results[i], shadow[i], dated)
                if problem is not None:
                    name = _show(job.get("job_name") if isinstance(job, Mapping) else None)
                    failures.append(f"job {name}: {problem}")
                    log.warning(
                        "leap_serving: canary of model %s version %s failed on job %s: %s",
                        self.model_uri, candidate.name, name, problem,
                    )  # fmt: skip
        except Exception as exc:  # a bug in the canary: it cannot vouch for the version
            log.error("leap_serving: canary check failed", exc_info=exc)
            failures.append(f"the canary check failed: {type(exc).__name__}: {exc}")
        try:
            self._judge(canary, seen, failures)
        except Exception as exc:
            log.error("leap_serving: judging the canary failed", exc_info=exc)

    def _tally(self, results: list) -> None:
        counts = Counter(
            "ranked" if r.reason_code is None else f"empty.{r.reason_code}" for r in results
        )
        counts["answers"] = len(results)
        with self._lock:
            self._counts.update(counts)

    def _score(self, prepared: list, loaded: _Loaded, results: list, quiet: bool = False) -> None:
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
                    launch, types, log_q[start:stop], bins[start:stop],
                    probability[start:stop], history_found[start:stop], loaded, ignored,
                    prior[start:stop], novelty, (low[start:stop], high[start:stop]),
                    measured[start:stop],
                )  # fmt: skip
            except Exception as exc:
                results[i] = _empty(exc, loaded.version, launch, quiet)
            start = stop

    def _order(self, launch, types, log_q, bins, probability, history_found, loaded, ignored,
               prior, novelty, interval, measured):  # fmt: skip
        throughput = np.exp(log_q)
        roofline = np.exp(prior)
        # a novel launch is ordered by the roofline prior, which needs it for every candidate
        by_prior = novelty is not None and novelty.novel and bool(np.all(np.isfinite(roofline)))
        if not np.all(np.isfinite(throughput)):
            bad = [t for t, q in zip(types, throughput, strict=True) if not np.isfinite(q)]
            raise JobError(f"the model predicted no finite throughput for {bad}", "prediction")
        specs = [loaded.specs[t] for t in types]
        devices = job_devices(
            launch["num_trainers"],
            launch.get("requested_devices_per_host"),
            [spec["devices_per_host"] for spec in specs],
        )
        fields = []
        for j, hardware_type in enumerate(types):
            spec = specs[j]
            cost = float(spec["hourly_cost_usd"] * devices[j])
            if not cost > 0 or not math.isfinite(cost):
                raise JobError(
                    f"hardware_type {hardware_type} has no usable hourly cost ({cost})",
                    "prediction",
                )
            fields.append({
                "hardware_type": hardware_type,
                "predicted_throughput": float(throughput[j]),
                "cost_per_hour": cost,
                "throughput_per_cost": float(throughput[j] * 3600.0 / cost),
                "bin": int(bins[j]),
                "bin_probability": float(probability[j]),
                "history_found": bool(history_found[j]),
                "premium": bool(spec["premium"]),
                "roofline_throughput": float(roofline[j]) if math.isfinite(roofline[j]) else None,
                "throughput_low": float(interval[0][j]) if math.isfinite(interval[0][j]) else None,
                "throughput_high": float(interval[1][j]) if math.isfinite(interval[1][j]) else None,
            })  # fmt: skip

        # samples per dollar as the ranking reads it: the model's (the lower end of its interval
        # when risk-aware), or the prior's when novel
        bounded = bool(np.all(np.isfinite(interval[0])))  # False: a model without intervals
        by_lower = not by_prior and self.rank_by == "lower" and bounded

        def value(f: dict[str, Any]) -> float:
            if by_prior:
                return f["roofline_throughput"] * 3600.0 / f["cost_per_hour"]
            if by_lower:
                return f["throughput_low"] * 3600.0 / f["cost_per_hour"]
            return f["throughput_per_cost"]

        bar = max((value(f) for f in fields if not f["premium"]), default=None)
        kept, removed = [], []
        for f in fields:
            if f["premium"] and bar is not None and value(f) < self.premium_min_ratio * bar:
                reason = (
                    f"premium type removed: {value(f):,.0f} samples per dollar is below "
                    f"{self.premium_min_ratio:g} x the best non-premium candidate's {bar:,.0f}"
                )
                removed.append(CandidateScore(**f, rank=None, removed_reason=reason))
            else:
                kept.append(f)
        kept.sort(key=lambda f: (-value(f), f["hardware_type"]))
        ranked = [CandidateScore(**f, rank=r) for r, f in enumerate(kept, start=1)]
        trial = None
        # the trial rule reads the model's intervals: both ends, finite and positive
        if (
            bounded
            and not by_prior
            and np.all(np.isfinite(interval[1]))
            and np.all(interval[0] > 0)
        ):
            was_measured = dict(zip(types, measured.tolist(), strict=True))
            trial = trial_run(
                [
                    Candidate(
                        f["hardware_type"], f["throughput_per_cost"],
                        f["throughput_low"] * 3600.0 / f["cost_per_hour"],
                        f["throughput_high"] * 3600.0 / f["cost_per_hour"],
                        was_measured[f["hardware_type"]],
                    )
                    for f in kept
                ],
                loaded.model.intervals.level,
            )  # fmt: skip
        return Ranking(
            ranked, removed, loaded.version, None, ignored,
            novelty=None if novelty is None else asdict(novelty),
            order="roofline_prior" if by_prior else "model_lower" if by_lower else "model",
            interval_level=None if loaded.model.intervals is None else loaded.model.intervals.level,
            worth_a_trial=trial,
            order_reason=(
                f"novel architecture: {novelty.distance:.2f} from the nearest known model type "
                f"{novelty.nearest_model_type} (threshold {novelty.threshold:.2f}); ranked by "
                "the roofline prior's throughput per dollar"
            ) if by_prior else None,
        )  # fmt: skip


def _empty(exc: Exception, version: str | None, job: Any, quiet: bool = False) -> Ranking:
    """An empty ranking with the failure's reason, logged; ``quiet``: a canary's shadow answer,
    which no caller sees (its failures are logged as the canary's)."""
    name = _show(job.get("job_name") if isinstance(job, Mapping) else None)
    shadow = "canary's shadow " if quiet else ""
    if isinstance(exc, JobError):
        reason, code = str(exc), exc.code
        log.log(logging.DEBUG if quiet else logging.WARNING,
                "leap_serving: %sempty ranking for job %s: %s", shadow, name, reason)  # fmt: skip
    else:  # not a bad input we know of: a bug, kept with its traceback
        reason, code = f"ranking failed: {type(exc).__name__}: {exc}", "internal_error"
        log.log(logging.WARNING if quiet else logging.ERROR,
                "leap_serving: %sempty ranking for job %s: %s", shadow, name, reason,
                exc_info=exc)  # fmt: skip
    return Ranking([], [], version, reason, reason_code=code)


def _canary_problem(served: Ranking, shadow: Ranking | None, dated: bool) -> str | None:
    """What a canary's answer to a launch lacks beside the serving model's, or None: no ranking
    where the serving model ranked (whatever the reason: a spec table without the candidates is
    as broken as a prediction that fails), or one of a kind that blames the model where the
    serving model failed otherwise, or a throughput that is not finite and positive. The one
    excuse: a launch dated by its caller (``ds``, a replay) before the newer snapshot."""
    if shadow is None:
        return "no answer"
    if shadow.reason_code is not None and shadow.reason_code != served.reason_code:
        excused = dated and shadow.reason_code == "launch_date"
        if served.reason_code is None and not excused:
            why = f"{shadow.reason_code}: {shadow.reason}"
            return f"no ranking where the serving model ranked ({why})"
        if shadow.reason_code in _MODEL_FAILURES:
            return f"no ranking ({shadow.reason_code}: {shadow.reason})"
    bad = [
        c.hardware_type for c in shadow.ranking + shadow.removed
        if not (math.isfinite(c.predicted_throughput) and c.predicted_throughput > 0
                and math.isfinite(c.throughput_per_cost))
    ]  # fmt: skip
    return f"throughput not finite and positive for {bad}" if bad else None


def _check_job(
    job: Any, candidates: Any, loaded: _Loaded, launch_date: dt.date | None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The launch as contract-typed values, the candidate list, and the fields ignored."""
    return typed_launch(job, candidates, loaded.model.history_index.last_ds, loaded.specs,
                        launch_date)  # fmt: skip


def typed_launch(
    job: Any,
    candidates: Any,
    snapshot_day: dt.date | None,
    known_types: Container[str],
    launch_date: dt.date | None,
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The launch as the Ranker checks and types it before building its features: contract-typed
    values, the candidate list (each once), and the fields ignored; a ``JobError`` naming the
    field otherwise. ``snapshot_day`` is the model's history snapshot's, ``known_types`` its
    spec table's (the daily skew check types a day's launches the same way)."""
    if not isinstance(job, Mapping):
        raise JobError(f"job must be a mapping of launch fields, not {type(job).__name__}")
    launch: dict[str, Any] = {}
    for name in REQUIRED_JOB_FIELDS:
        if job.get(name) is None:
            raise JobError(f"job.{name} is missing")
    for name in LAUNCH_COLUMNS:
        if name in ("hardware_type", "ds") or job.get(name) is None:
            continue
        value = job[name]
        if isinstance(value, float) and not math.isfinite(value):
            raise JobError(f"job.{name}={_show(value)} is not a finite number")
        typed = _typed(value, _CONTRACT[name])
        if typed is None:
            raise JobError(f"job.{name}={_show(value)} is not a valid {_CONTRACT[name]}")
        if name in _POSITIVE_FIELDS and typed <= 0:
            raise JobError(f"job.{name}={_show(value)} must be positive")
        if name in _NON_NEGATIVE_FIELDS and typed < 0:
            raise JobError(f"job.{name}={_show(value)} must not be negative")
        launch[name] = typed
    launch["ds"] = _launch_day(job, launch_date)
    if snapshot_day is not None and launch["ds"] <= snapshot_day:
        raise JobError(
            f"launch date {launch['ds']} is not after the model's history snapshot "
            f"({snapshot_day}): the model cannot know that day's history",
            "launch_date",
        )
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Iterable):
        raise JobError("candidates must be a list of hardware type names", "invalid_candidates")
    types = list(candidates)
    if not types:
        raise JobError("no candidate hardware types", "invalid_candidates")
    bad = [t for t in types if not isinstance(t, str)]
    if bad:
        raise JobError(
            f"candidate {_show(bad[0])} is not a hardware type name", "invalid_candidates"
        )
    unknown = [t for t in types if t not in known_types]
    if unknown:
        raise JobError(
            f"unknown hardware type(s) {unknown}: not in the model's spec table",
            "invalid_candidates",
        )
    types = list(dict.fromkeys(types))  # a repeated candidate is ranked once
    ignored = sorted(str(k) for k in job if k not in _CONTRACT_FIELDS)
    return launch, types, ignored


_INT64 = (-(2**63), 2**63 - 1)
# at most 19 digits: int64's range, so int() never meets Python's 4,300-digit limit
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,19}")


def _show(value: Any, limit: int = 60) -> str:
    """A caller's value as a reason shows it: short, and safe whatever its ``repr`` does."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _typed(value: Any, dtype: pl.DataType) -> Any:
    """A launch field as the contract types it (plain Python: this runs on every launch), or
    None when it is not one."""
    if dtype == pl.String:
        return value if isinstance(value, str) else None
    if dtype == pl.Boolean:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, str)):  # 1 / 0 and "true" / "false", as CSV exports carry
            return {"true": True, "false": False, "1": True, "0": False}.get(str(value).lower())
        return None
    if dtype == pl.Int64:
        if isinstance(value, bool):
            return None
        integral = isinstance(value, float) and value.is_integer()
        # ASCII digits only: str.isdigit() also takes "²" and lets "--5" through, and int()
        # then raises on them
        if integral or (isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip())):
            value = int(value)
        if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
            return value
        return None
    return None


def _launch_day(job: Mapping[str, Any], launch_date: dt.date | None) -> dt.date:
    if launch_date is not None:
        if not isinstance(launch_date, dt.date):
            raise JobError(f"launch_date={_show(launch_date)} is not a date")
        return launch_date if not isinstance(launch_date, dt.datetime) else launch_date.date()
    value = job.get("ds")
    if value is None:
        return dt.datetime.now(dt.UTC).date()
    if isinstance(value, dt.date):
        return value if not isinstance(value, dt.datetime) else value.date()
    try:
        if not isinstance(value, str):
            raise ValueError
        return dt.date.fromisoformat(value)
    except ValueError:
        raise JobError(f"job.ds={_show(value)} is not a date YYYY-MM-DD") from None
