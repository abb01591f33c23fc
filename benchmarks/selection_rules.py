"""The selection rules ``benchmarks/selection_study.py`` compares: each a function of a fold's
validation regrets alone (per candidate and decision kind, and each validation decision's model
type) that names the candidate published. The shipped one is ``selection.choose_ranking``; the
others are what it was chosen against.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from leap_pipeline.studies.combinations import COMBINED, GBDT_BLEND, GBDT_PAIR  # noqa: E402
from leap_pipeline.studies.crossval import CANDIDATES, INCUMBENT, choose_ranking  # noqa: E402
from leap_pipeline.studies.decisions import TIE, WITHIN  # noqa: E402
from leap_pipeline.studies.selection import ALPHA, per_type_difference  # noqa: E402

# -- selection rules: validation regrets -> the candidate published ----------------------------

Rule = Callable[[dict, str, np.ndarray], str]


def _by_type(values: np.ndarray, clusters: np.ndarray) -> float:
    return float(np.mean([values[clusters == c].mean() for c in np.unique(clusters)]))


def _differences(regrets: dict, kind: str, clusters: np.ndarray) -> dict | None:
    """Each candidate's mean regret difference from the rule per validation model type; None
    with fewer than two model types (the rule stands)."""
    if len(np.unique(clusters)) < 2:
        return None
    base = regrets[INCUMBENT[kind]][kind]
    return {name: per_type_difference(r[kind], base, clusters) for name, r in regrets.items()}


def gated(z: float) -> Rule:
    """The rule shipped before this study: a challenger's mean lead over model types must pass
    ``z`` standard errors of it, it must be lower on more model types than higher, and its share
    within 5% no lower; the lowest mean of those that pass."""

    def rule(regrets: dict, kind: str, clusters: np.ndarray) -> str:
        incumbent, differences = INCUMBENT[kind], _differences(regrets, kind, clusters)
        if differences is None:
            return incumbent
        base = regrets[incumbent][kind]
        best, best_mean = incumbent, _by_type(base, clusters)
        for name, per_type in differences.items():
            bar = z * float(per_type.std(ddof=1)) / np.sqrt(len(per_type))
            wins = -float(per_type.mean()) > bar
            most = np.sum(per_type < -TIE) > np.sum(per_type > TIE)
            holds = np.mean(regrets[name][kind] <= WITHIN) >= np.mean(base <= WITHIN)
            mean = _by_type(regrets[name][kind], clusters)
            if wins and most and holds and mean < best_mean:
                best, best_mean = name, mean
        return best

    return rule


def lowest_mean(regrets: dict, kind: str, clusters: np.ndarray) -> str:
    """The candidate with the lowest mean over model types of validation regret; the rule on a
    tie or with no validation decisions."""
    incumbent = INCUMBENT[kind]
    if len(np.unique(clusters)) < 2:
        return incumbent
    means = {c: _by_type(r[kind], clusters) for c, r in regrets.items()}
    best = min(means.values())
    return incumbent if means[incumbent] <= best + TIE else min(means, key=means.get)


def lower_bound(z: float) -> Rule:
    """The candidate whose lead over the rule, less ``z`` standard errors over model types, is
    largest and positive (no sign test, no within-5% gate): shrinks toward the rule by the
    evidence rather than gating on it."""

    def rule(regrets: dict, kind: str, clusters: np.ndarray) -> str:
        incumbent, differences = INCUMBENT[kind], _differences(regrets, kind, clusters)
        if differences is None:
            return incumbent
        best, best_score = incumbent, 0.0
        for name, per_type in differences.items():
            score = -per_type.mean() - z * per_type.std(ddof=1) / np.sqrt(len(per_type))
            if score > best_score + TIE:
                best, best_score = name, score
        return best

    return rule


def net_vote(regrets: dict, kind: str, clusters: np.ndarray) -> str:
    """The vote shipped before the sign test: the candidate lower than the rule on the most
    model types net (lower minus higher), if positive, the larger mean lead breaking a tie; no
    correction for the number of challengers."""
    incumbent = INCUMBENT[kind]
    base = regrets.get(incumbent, {}).get(kind)
    if len(np.unique(clusters)) < 2 or base is None or not np.isfinite(base).all():
        return incumbent
    best, best_key = incumbent, (0, 0.0)
    for name, by_kind in regrets.items():
        values = by_kind.get(kind)
        if values is None or len(values) != len(base) or not np.isfinite(values).all():
            continue
        per_type = per_type_difference(values, base, clusters)
        key = (int(np.sum(per_type < -TIE) - np.sum(per_type > TIE)), -float(per_type.mean()))
        if key[0] > 0 and key > best_key:
            best, best_key = name, key
    return best


def sign_sequence(alpha: float) -> Rule:
    """``choose_ranking`` (shipped at ``ALPHA``, 20%) at another level: challengers in the
    fold's order, each by an exact sign test over model types at ``alpha``, stopping at the
    first that fails."""
    return lambda regrets, kind, clusters: choose_ranking(regrets, kind, clusters, alpha=alpha)


def sign_majority(within: bool = False, positive_mean: bool = False) -> Rule:
    """The candidate lower than the rule on the most model types, if on more than it is higher;
    among those tied, the largest mean lead (``net_vote``). ``within``: only if its share within
    5% is no lower; ``positive_mean``: only if its mean lead is positive."""
    if not within and not positive_mean:
        return net_vote

    def rule(regrets: dict, kind: str, clusters: np.ndarray) -> str:
        base = regrets[INCUMBENT[kind]][kind]
        kept = {}
        for name, by_kind in regrets.items():
            if within and np.mean(by_kind[kind] <= WITHIN) < np.mean(base <= WITHIN):
                continue
            per_type = per_type_difference(by_kind[kind], base, clusters)
            if positive_mean and name != INCUMBENT[kind] and np.mean(per_type) >= 0:
                continue
            kept[name] = by_kind
        return net_vote(kept, kind, clusters)

    return rule


def pooled(rule: Rule, names: tuple[str, ...]) -> Rule:
    """``rule`` offered only the candidates ``names``, in the order it was given them."""
    return lambda regrets, kind, clusters: rule(
        {n: r for n, r in regrets.items() if n in names}, kind, clusters
    )


def _net_count(values: np.ndarray, base: np.ndarray, clusters: np.ndarray) -> int:
    """Validation model types on which ``values`` is lower than ``base``, less those higher."""
    per_type = per_type_difference(values, base, clusters)
    return int(np.sum(per_type < -TIE) - np.sum(per_type > TIE))


def blend_when_both_lead(regrets: dict, kind: str, clusters: np.ndarray) -> str:
    """The vote without the blend; but where it publishes a GBDT and the other GBDT also has a
    positive net count over the rule, their blend: both leads are real, which is larger is not
    known."""
    pick = net_vote({n: regrets[n] for n in SINGLES}, kind, clusters)
    if pick not in GBDT_PAIR or len(np.unique(clusters)) < 2:
        return pick
    other = GBDT_PAIR[1 - GBDT_PAIR.index(pick)]
    base = regrets[INCUMBENT[kind]][kind]
    return GBDT_BLEND if _net_count(regrets[other][kind], base, clusters) > 0 else pick


def gbdt_as_blend(regrets: dict, kind: str, clusters: np.ndarray) -> str:
    """The vote without the blend, but where it publishes either GBDT, their blend: the vote
    says a learned ranking beats the rule, not which of the two."""
    pick = net_vote({n: regrets[n] for n in SINGLES}, kind, clusters)
    return GBDT_BLEND if pick in GBDT_PAIR else pick


BASE_RULES: dict[str, Rule] = {
    "before (1 SE, sign, within 5%)": gated(1.0),
    "gated at 0.5 SE": gated(0.5),
    "gated at 0 SE": gated(0.0),
    "lowest mean": lowest_mean,
    "lower bound, 1 SE": lower_bound(1.0),
    "lower bound, 0.5 SE": lower_bound(0.5),
    "sign majority": sign_majority(),
    "sign majority, within 5% held": sign_majority(within=True),
    "sign majority, mean lead > 0": sign_majority(positive_mean=True),
}
# the candidates before the GBDTs' blend was one; the bar's "best single candidate" is theirs
SINGLES = tuple(c for c in CANDIDATES if c != GBDT_BLEND)
EVERY = (*CANDIDATES, *COMBINED)
SHIPPED = f"sign test in sequence at {ALPHA:.0%} (shipped)"  # ``choose_ranking`` on CANDIDATES
# the same test at other levels
ALPHAS = tuple(a for a in (0.05, 0.1, 0.2, 0.35, 0.5) if a != ALPHA)
RULES_COMPARED: dict[str, Rule] = {
    **{label: pooled(rule, SINGLES) for label, rule in BASE_RULES.items()},
    SHIPPED: pooled(choose_ranking, CANDIDATES),
    **{f"sign test in sequence at {a:.0%}": pooled(sign_sequence(a), CANDIDATES) for a in ALPHAS},
    "sign majority, GBDT blend offered (the vote before)": pooled(net_vote, CANDIDATES),
    "lowest mean, GBDT blend offered": pooled(lowest_mean, CANDIDATES),
    "lower bound, 0.5 SE, GBDT blend offered": pooled(lower_bound(0.5), CANDIDATES),
    "sign majority, every combination offered": pooled(net_vote, EVERY),
    "lowest mean, every combination offered": pooled(lowest_mean, EVERY),
    "sign majority, blend when both GBDTs lead": pooled(blend_when_both_lead, CANDIDATES),
    "sign majority, a GBDT published as the blend": pooled(gbdt_as_blend, CANDIDATES),
    **{f"always {name}": (lambda *_, name=name: name) for name in (GBDT_BLEND, *COMBINED)},
}
