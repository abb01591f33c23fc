"""The shadow canary: a new model version scores launches beside the serving one before it serves.

A new version the pointer names is held beside the serving model while the next launches are
also scored by it in shadow, its answers discarded. It is promoted only if it answered a ranking
wherever the serving model did, with finite, positive predictions; otherwise it is refused like a
model that fails its checks, naming the launches it failed. The judging runs on the caller's
thread, after the caller's answer is made. ``CanaryJudging`` is a part of ``Ranker``
(``ranker``), whose state (the lock, the serving and canary versions) it reads and changes.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .fit import BUDGET_FIELD, check_budget, request
from .launch_fields import check_job
from .loaded import Loaded
from .results import Ranking, empty_ranking, shown

log = logging.getLogger("leap_serving")

# empty rankings that say something about the model (not about the launch): a canary that gives
# one where the serving model did not fails on that launch
MODEL_FAILURES = ("prediction", "internal_error")
_CANARY_FAILURES_SHOWN = 5  # launches a refusal names; the rest are counted


@dataclass
class Canary:
    """A newly loaded version held beside the serving one while it scores ``needed`` launches
    in shadow. Changed only under ``Ranker._lock``."""

    loaded: Loaded
    needed: int
    seen: int = 0
    failures: list[str] = field(default_factory=list)  # "job 'x': what went wrong", per launch
    started: float = field(default_factory=time.monotonic)  # when it began: its bound in time


class CanaryJudging:
    """The canary's part of ``Ranker``: score in shadow, then promote or refuse."""

    def _shadow(self, canary: Canary, jobs: Sequence, results: list, launch_date) -> None:
        """Score the launches the serving model predicted for (at most as many as the canary
        still needs) with the canary's version too, and judge it. The caller's results are only
        read; nothing here raises."""
        seen, failures = 0, []
        try:
            compared = [
                i
                for i, r in enumerate(results)
                if r.reason_code is None or r.reason_code in MODEL_FAILURES
            ][: max(canary.needed - canary.seen, 0)]
            seen = len(compared)
            candidate = canary.loaded
            shadow: list[Ranking | None] = [None] * len(jobs)
            prepared = []
            for i in compared:
                job, candidates, budget = request(jobs[i])
                try:
                    launch, types, ignored = check_job(job, candidates, candidate, launch_date)
                    launch[BUDGET_FIELD] = check_budget(budget)
                    prepared.append((i, launch, types, ignored))
                except Exception as exc:  # its own snapshot and spec table judge the launch
                    shadow[i] = empty_ranking(exc, candidate.version, job, quiet=True)
            if prepared:
                try:
                    self._score(prepared, candidate, shadow, quiet=True)
                except Exception as exc:
                    for i, *_ in prepared:
                        shadow[i] = empty_ranking(exc, candidate.version, jobs[i][0], quiet=True)
            for i in compared:
                job = jobs[i][0]
                dated = launch_date is not None or (
                    isinstance(job, Mapping) and job.get("ds") is not None
                )
                problem = canary_problem(results[i], shadow[i], dated)
                if problem is not None:
                    name = shown(job.get("job_name") if isinstance(job, Mapping) else None)
                    failures.append(f"job {name}: {problem}")
                    log.warning(
                        "leap_serving: canary of model %s version %s failed on job %s: %s",
                        self.model_uri,
                        candidate.name,
                        name,
                        problem,
                    )
        except Exception as exc:  # a bug in the canary: it cannot vouch for the version
            log.error("leap_serving: canary check failed", exc_info=exc)
            failures.append(f"the canary check failed: {type(exc).__name__}: {exc}")
        try:
            self._judge(canary, seen, failures)
        except Exception as exc:
            log.error("leap_serving: judging the canary failed", exc_info=exc)

    def _end_canary_if_due(self) -> None:
        """Judge the canary on what it has seen once it has waited ``canary_max_s``: a quiet
        fleet never holds a night's model back for days (the nightly gate checked it first)."""
        canary, bound = self._canary, self.canary_max_s
        if canary is not None and bound is not None and time.monotonic() - canary.started >= bound:
            self._judge(canary, 0, [], timed_out=True)

    def _judge(
        self, canary: Canary, seen: int, failures: list[str], timed_out: bool = False
    ) -> None:
        """Add a call's shadow launches to the canary; promote or refuse it once it has seen
        enough, or once its time is up (``timed_out``). Runs on the caller's thread, after the
        caller's answer is made, or on the background follower."""
        with self._lock:
            if self._canary is not canary:
                return  # judged already, or replaced by a newer version
            canary.seen += seen
            canary.failures.extend(failures)
            if canary.seen < canary.needed and not timed_out:
                return
            self._canary = None
            held = self._loaded
            if not canary.failures:
                self._loaded = canary.loaded
            else:
                self._passed_over = canary.loaded.stamp
        if not canary.failures:
            waited = f" (its {self.canary_max_s:g} s were up)" if timed_out else ""
            self._serving(
                canary.loaded, f"serving after a canary of {canary.seen} launches{waited}"
            )
            return
        named = "; ".join(canary.failures[:_CANARY_FAILURES_SHOWN])
        more = len(canary.failures) - _CANARY_FAILURES_SHOWN
        self._refused(
            f"model {self.model_uri} version {canary.loaded.name} refused by its canary: on "
            f"{len(canary.failures)} of {canary.seen} launches it gave no sane ranking where "
            f"version {held.name if held else None} did: {named}"
            + (f"; and {more} more" if more > 0 else "")
        )


def canary_problem(served: Ranking, shadow: Ranking | None, dated: bool) -> str | None:
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
        if shadow.reason_code in MODEL_FAILURES:
            return f"no ranking ({shadow.reason_code}: {shadow.reason})"
    bad = [
        c.hardware_type
        for c in shadow.ranking + shadow.removed
        if not (
            math.isfinite(c.predicted_throughput)
            and c.predicted_throughput > 0
            and math.isfinite(c.throughput_per_cost)
        )
    ]
    return f"throughput not finite and positive for {bad}" if bad else None
