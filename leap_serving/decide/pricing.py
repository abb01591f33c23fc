"""The pricing, premium and trial policy: a scored launch's candidates priced and put in order.

Each candidate's predicted throughput is divided by the job's cost on the type (``job_devices``
of the contract, the definition the oracle and the routing simulation share). The order is by
that throughput per dollar (``rank_by="median"``), by the lower end of the model's interval per
dollar (``"lower"``: risk-aware), or, for a launch of a novel architecture, by the roofline
prior's.

Before either, ``fit`` removes the candidates whose device memory cannot hold the job and those
over the request's budget caps.

The premium rule: a premium type stays only if its throughput per dollar is at least
``premium_min_ratio`` times that of the best non-premium candidate (1.0 by default: a premium
type must pay for itself). With no non-premium candidate, premium types stay.

The trial rule: where the model has intervals, the candidate worth one trial run is named
(``exploration.trial_run``).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from ..launch.contract import job_devices
from .exploration import Candidate, trial_run
from .fit import none_left, screen
from .loaded import Loaded
from .results import CandidateScore, JobError, Ranking


def order_candidates(
    launch,
    types,
    log_q,
    bins,
    probability,
    history_found,
    loaded: Loaded,
    ignored,
    prior,
    novelty,
    interval,
    measured,
    *,
    rank_by: str,
    premium_min_ratio: float,
) -> Ranking:
    """One launch's ranking from its candidates' predictions (``log_q``, the bins and their
    probability, the prior, the interval, whether history was found and measured on the type)."""
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
    cost = np.array([spec["hourly_cost_usd"] for spec in specs], dtype=np.float64) * devices
    unusable = ~(cost > 0) | ~np.isfinite(cost)
    if unusable.any():
        j = int(np.flatnonzero(unusable)[0])
        raise JobError(
            f"hardware_type {types[j]} has no usable hourly cost ({float(cost[j])})", "prediction"
        )
    # whole columns turned into Python numbers at once: a ranking's per-candidate float() and
    # isfinite() calls on numpy scalars cost more than its arithmetic
    per_cost = (throughput * 3600.0 / cost).tolist()
    fields = [
        {
            "hardware_type": hardware_type,
            "predicted_throughput": q,
            "cost_per_hour": c,
            "throughput_per_cost": v,
            "bin": b,
            "bin_probability": pb,
            "history_found": h,
            "premium": bool(spec["premium"]),
            "roofline_throughput": roof,
            "throughput_low": lo,
            "throughput_high": hi,
            "devices_per_host": float(spec["devices_per_host"]),
        }
        for hardware_type, spec, q, c, v, b, pb, h, roof, lo, hi in zip(
            types,
            specs,
            throughput.tolist(),
            cost.tolist(),
            per_cost,
            np.asarray(bins, dtype=np.int64).tolist(),
            np.asarray(probability).tolist(),
            np.asarray(history_found, dtype=bool).tolist(),
            _finite(roofline),
            _finite(interval[0]),
            _finite(interval[1]),
            strict=True,
        )
    ]

    # samples per dollar as the ranking reads it: the model's (the lower end of its interval
    # when risk-aware), or the prior's when novel
    bounded = bool(np.all(np.isfinite(interval[0])))  # False: a model without intervals
    by_lower = not by_prior and rank_by == "lower" and bounded

    def value(f: dict[str, Any]) -> float:
        if by_prior:
            return f["roofline_throughput"] * 3600.0 / f["cost_per_hour"]
        if by_lower:
            return f["throughput_low"] * 3600.0 / f["cost_per_hour"]
        return f["throughput_per_cost"]

    fields, removed = screen(launch, fields, specs, devices, measured)  # memory fit, budget
    if not fields:
        return none_left(removed, loaded.version, ignored)
    bar = max((value(f) for f in fields if not f["premium"]), default=None)
    kept = []
    for f in fields:
        if f["premium"] and bar is not None and value(f) < premium_min_ratio * bar:
            reason = (
                f"premium type removed: {value(f):,.0f} samples per dollar is below "
                f"{premium_min_ratio:g} x the best non-premium candidate's {bar:,.0f}"
            )
            removed.append(
                CandidateScore(**f, rank=None, removed_reason=reason, removed_code="premium")
            )
        else:
            kept.append(f)
    kept.sort(key=lambda f: (-value(f), f["hardware_type"]))
    ranked = [CandidateScore(**f, rank=r) for r, f in enumerate(kept, start=1)]
    trial = None
    # the trial rule reads the model's intervals: both ends, finite and positive
    if bounded and not by_prior and np.all(np.isfinite(interval[1])) and np.all(interval[0] > 0):
        was_measured = dict(zip(types, measured.tolist(), strict=True))
        trial = trial_run(
            [
                Candidate(
                    f["hardware_type"],
                    f["throughput_per_cost"],
                    f["throughput_low"] * 3600.0 / f["cost_per_hour"],
                    f["throughput_high"] * 3600.0 / f["cost_per_hour"],
                    was_measured[f["hardware_type"]],
                )
                for f in kept
            ],
            loaded.model.intervals.level,
        )
    return Ranking(
        ranked,
        removed,
        loaded.version,
        None,
        ignored,
        novelty=None if novelty is None else asdict(novelty),
        order="roofline_prior" if by_prior else "model_lower" if by_lower else "model",
        interval_level=None if loaded.model.intervals is None else loaded.model.intervals.level,
        worth_a_trial=trial,
        order_reason=(
            f"novel architecture: {novelty.distance:.2f} from the nearest known model type "
            f"{novelty.nearest_model_type} (threshold {novelty.threshold:.2f}); ranked by "
            "the roofline prior's throughput per dollar"
        )
        if by_prior
        else None,
    )


def _finite(values: np.ndarray) -> list[float | None]:
    """The values as Python floats, None where not finite (unknown)."""
    return [v if math.isfinite(v) else None for v in np.asarray(values, np.float64).tolist()]
