"""What to measure next: the candidate worth one trial run.

A ranking puts the launch on its top candidate. When another candidate's interval overlaps the
top one's (per dollar) and the family was never measured on it, the model cannot tell which is
cheaper, and one short trial run there would settle it for every later launch of the family.
The saving such a trial can uncover is priced from the two intervals: with D the difference of
their ln samples per dollar, read as normal with the intervals' spreads, the expected share of
the cost per sample saved is E[max(0, 1 - e^-D)] (zero where the top candidate stays the best).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

# a trial is named when it can be expected to save at least this share of the cost per sample
TRIAL_MIN_SAVING = 0.02


@dataclass(frozen=True)
class Candidate:
    """One ranked candidate as the trial rule reads it: samples per dollar by the median and
    by its interval's ends, and whether the family has runs on the type."""

    hardware_type: str
    per_dollar: float
    per_dollar_low: float
    per_dollar_high: float
    measured: bool


def expected_saving(mean: float, sd: float) -> float:
    """E[max(0, 1 - exp(-D))] for D ~ N(mean, sd^2): the expected share of the cost per sample
    saved by moving to a candidate whose ln samples per dollar exceeds the top one's by D."""
    if sd <= 0:
        return max(0.0, 1.0 - math.exp(-mean))
    return _phi(mean / sd) - math.exp(-mean + sd * sd / 2) * _phi((mean - sd * sd) / sd)


def _phi(x: float) -> float:
    """The standard normal CDF (``statistics.NormalDist().cdf`` at a fifth of its cost: this
    runs for candidates of every ranking)."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def trial_run(ranked: Sequence[Candidate], level: float) -> dict | None:
    """The candidate below the top one most worth one trial run, or None: never measured for
    the family, its interval overlapping the top one's, and an expected saving of at least
    ``TRIAL_MIN_SAVING``. The spreads are the intervals' half-widths read as ``level``
    two-sided normal intervals on ln throughput."""
    if len(ranked) < 2:
        return None
    z = NormalDist().inv_cdf((1 + level) / 2)

    def spread(c: Candidate) -> float:
        return math.log(c.per_dollar_high / c.per_dollar_low) / (2 * z)

    top, best = ranked[0], None
    for candidate in ranked[1:]:
        if candidate.measured or candidate.per_dollar_high < top.per_dollar_low:
            continue
        saving = expected_saving(
            math.log(candidate.per_dollar / top.per_dollar),
            math.hypot(spread(candidate), spread(top)),
        )
        if saving >= TRIAL_MIN_SAVING and (best is None or saving > best["expected_saving"]):
            best = {
                "hardware_type": candidate.hardware_type,
                "expected_saving": saving,
                "reason": (
                    f"the family has no run on {candidate.hardware_type} and its {level:.0%} "
                    f"interval overlaps {top.hardware_type}'s: one trial run is expected to "
                    f"save {saving:.1%} of the cost per sample"
                ),
            }
    return best
