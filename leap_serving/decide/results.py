"""What a ranking returns: the candidates' scores best first, or an empty ranking with its reason.

``Ranker.rank`` never raises into the caller: any failure gives an empty ranking with the reason
and a reason code (``REASON_CODES``), logged; an unexpected error is logged with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

log = logging.getLogger("leap_serving")

# why a ranking can be empty; ``Ranker.stats()`` counts each
REASON_CODES = (
    "model_loading",  # the first model is not ready yet
    "no_model",  # no model could be loaded
    "invalid_job",  # a launch field is missing or malformed
    "invalid_candidates",  # no, malformed or unknown candidate types
    "launch_date",  # the launch is not after the model's history snapshot
    "routing_off",  # the routing switch of the model type is off
    "prediction",  # the model predicted no usable throughput or the type no usable cost
    "does_not_fit",  # no candidate's device memory holds the job (``fit``)
    "over_budget",  # every candidate is over the request's budget caps or does not fit
    "internal_error",  # a bug: logged with its traceback
)


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
    # why it was removed, as a code (``fit.REMOVAL_CODES``: does_not_fit, over_cost_cap,
    # over_device_cap, premium); None when ranked
    removed_code: str | None = None
    # the type's host size (the spec table's ``devices_per_host``), which ``cost_per_hour``
    # priced a launch taking whole hosts on; carried so that a caller over HTTP (``leap rank
    # --server --format``) asks the scheduler for the devices the ranking priced without the
    # model's spec table. None: not known (a ranking made before this field existed)
    devices_per_host: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields by name: ``dataclasses.asdict`` copies each value deeply, which for a
        ranking's 20 candidates took 262 us, half as long as the ranking itself (every field
        here is a number, a string, a bool or None)."""
        return {name: getattr(self, name) for name in _SCORE_FIELDS}

    @classmethod
    def from_dict(cls, data: Any, where: str = "candidate") -> CandidateScore:
        """A candidate as ``to_dict`` wrote it, read back (``leap rank --server`` reads the
        server's answer): ``ValueError`` naming ``where`` and the field when one this class
        needs is missing; fields it does not know (a newer server's) are left out."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: {shown(data)} is not an object")
        missing = [name for name in _REQUIRED_SCORE_FIELDS if name not in data]
        if missing:
            raise ValueError(f"{where}: the field {missing[0]} is missing")
        return cls(**{name: data[name] for name in _SCORE_FIELDS if name in data})


_SCORE_FIELDS = tuple(f.name for f in fields(CandidateScore))
_REQUIRED_SCORE_FIELDS = tuple(
    f.name for f in fields(CandidateScore) if f.default is MISSING and f.default_factory is MISSING
)


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
            "ranking": [c.to_dict() for c in self.ranking],
            "removed": [c.to_dict() for c in self.removed],
            "reason": self.reason,
            "reason_code": self.reason_code,
            "ignored_fields": list(self.ignored_fields),
            "novelty": self.novelty,
            "order": self.order,
            "order_reason": self.order_reason,
            "interval_level": self.interval_level,
            "worth_a_trial": self.worth_a_trial,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Ranking:
        """A ranking as ``to_dict`` wrote it, read back: what ``leap serve`` answers becomes the
        same ``Ranking`` an in-process call returns, so ``leap rank --server`` prints and hands
        it on with the same code. ``ValueError`` naming the field when it is not one."""
        if not isinstance(data, Mapping):
            raise ValueError(f"the ranking {shown(data)} is not an object")
        lists = {}
        for name in ("ranking", "removed"):
            items = data.get(name, [])
            if not isinstance(items, list):
                raise ValueError(f"{name}: {shown(items)} is not a list")
            lists[name] = [
                CandidateScore.from_dict(item, f"{name}[{i}]") for i, item in enumerate(items)
            ]
        known = {f.name for f in fields(cls)} - set(lists)
        return cls(**lists, **{name: data[name] for name in known if name in data})


class JobError(ValueError):
    """The job or candidate list cannot be ranked; the message is the ranking's reason, the
    code one of ``REASON_CODES``."""

    def __init__(self, reason: str, code: str = "invalid_job") -> None:
        super().__init__(reason)
        self.code = code


def empty_ranking(exc: Exception, version: str | None, job: Any, quiet: bool = False) -> Ranking:
    """An empty ranking with the failure's reason, logged; ``quiet``: a canary's shadow answer,
    which no caller sees (its failures are logged as the canary's)."""
    name = shown(job.get("job_name") if isinstance(job, Mapping) else None)
    shadow = "canary's shadow " if quiet else ""
    if isinstance(exc, JobError):
        reason, code = str(exc), exc.code
        log.log(
            logging.DEBUG if quiet else logging.WARNING,
            "leap_serving: %sempty ranking for job %s: %s",
            shadow,
            name,
            reason,
        )
    else:  # not a bad input we know of: a bug, kept with its traceback
        reason, code = f"ranking failed: {type(exc).__name__}: {exc}", "internal_error"
        log.log(
            logging.WARNING if quiet else logging.ERROR,
            "leap_serving: %sempty ranking for job %s: %s",
            shadow,
            name,
            reason,
            exc_info=exc,
        )
    return Ranking([], [], version, reason, reason_code=code)


def shown(value: Any, limit: int = 60) -> str:
    """A caller's value as a reason shows it: short, and safe whatever its ``repr`` does."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
