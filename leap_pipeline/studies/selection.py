"""Which ranking a fold of ``leap crossval`` publishes for a decision kind, from its candidates'
regrets on the validation folds (``crossval._inner_selection``): a rule unless a candidate is
lower than it on more validation model types than higher. A decision the published ranking
cannot estimate every type of goes to the published GBDT (``published_regrets``). Which
selection rule to ship is chosen across data sets, leaving one out (``leave_one_set_out``)."""

from __future__ import annotations

import numpy as np
import polars as pl

from leap_pipeline.studies.decisions import KINDS, TIE, decision_coverage, decision_regrets

# the rule each decision kind starts from: a challenger must beat it on validation decisions
INCUMBENT = {"fastest": "highest_fp16_peak", "per_cost": "best_fp16_peak_per_dollar"}


def per_type_difference(values: np.ndarray, base: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """A candidate's mean regret minus the rule's, per validation model type (in ``np.unique``
    order): the unit a selection weighs, whatever a type's number of decisions."""
    return np.array([(values - base)[clusters == c].mean() for c in np.unique(clusters)])


def choose_ranking(
    regrets: dict[str, dict[str, np.ndarray]], kind: str, clusters: np.ndarray
) -> str:
    """The candidate a fold publishes for one decision kind. Each validation model type votes
    on each candidate against the rule made for the kind (``INCUMBENT``): lower (its mean regret
    difference below zero), higher, or neither (both choose alike). The candidate with the
    largest net count (types lower minus types higher) is published if that count is positive,
    the larger mean lead breaking a tie; else the rule.

    Decisions of one model type are not independent draws (they share its ratios across
    types), so the model type is the unit, whatever its number of decisions. A count, not a
    mean, decides because regret is heavy-tailed (one model where a rule is 2.5x off carries a
    mean). Compared on the folds of both public sets (``benchmarks/selection_study.py``), this
    missed the bar (the best rule's regret, and 1.25x the best single candidate's) on 7 of 20
    split-kind rows, and on 4 with the GBDTs' blend among the candidates (6 and 7 on two more
    draws of the validation folds); the gate it replaced (a lead of one standard error, a sign
    test and no fewer decisions within 5%) on 13, keeping the rule where the lead was real but
    its standard error over five or six model types large. A candidate whose regrets are
    missing, of another length or not finite gets no vote (the rule stands against it)."""
    incumbent = INCUMBENT[kind]
    names = np.unique(clusters)
    base = regrets.get(incumbent, {}).get(kind)
    if len(names) < 2 or base is None or len(base) != len(clusters) or not np.isfinite(base).all():
        return incumbent
    best, best_key = incumbent, (0, 0.0)
    for name, by_kind in regrets.items():
        values = by_kind.get(kind)
        if values is None or len(values) != len(base) or not np.isfinite(values).all():
            continue
        per_type = per_type_difference(values, base, clusters)
        net = int(np.sum(per_type < -TIE) - np.sum(per_type > TIE))
        key = (net, -float(per_type.mean()))
        if net > 0 and key > best_key:
            best, best_key = name, key
    return best


def fallbacks(gbdt: str, kind: str) -> tuple[str, ...]:
    """Who takes a decision the published ranking cannot estimate every type of: the fold's
    published GBDT, then the rule made for the kind."""
    return (gbdt, INCUMBENT[kind])


def published_regrets(
    regrets: dict[str, dict[str, np.ndarray]],
    coverage: dict[str, dict[str, np.ndarray]],
    kind: str,
    chosen: str,
    fallback: tuple[str, ...],
) -> np.ndarray:
    """The regret of each decision as the fold publishes it for ``kind``: ``chosen``'s, but
    where ``chosen`` has no estimate for a type of the decision (``decisions.decision_coverage``),
    the first of ``fallback`` that estimates every type of it. A new type's first ranking never
    goes to a candidate that would rank it last for want of an estimate: the fleet ratio has
    none for a type no training configuration ran. Where none covers, ``chosen`` stands."""
    out = np.array(regrets[chosen][kind], dtype=float)
    missing = ~np.asarray(coverage[chosen][kind], dtype=bool)
    for name in fallback:
        if name == chosen or name not in regrets or not missing.any():
            continue
        take = missing & np.asarray(coverage[name][kind], dtype=bool)
        out[take] = regrets[name][kind][take]
        missing &= ~take
    return out


def with_published(table: pl.DataFrame, predictors: list[str], choice: dict) -> dict:
    """Every candidate's regrets on a fold's decisions (``decisions.cells``' ``table``), and
    ``leap``'s: per kind the ranking ``choice`` published (``choice["ranking"]``), each decision
    it cannot estimate every type of taken by ``choice["gbdt"]`` or the rule
    (``published_regrets``)."""
    regrets, _ = decision_regrets(table, predictors)
    coverage = decision_coverage(table, predictors)
    regrets["leap"] = {
        kind: published_regrets(
            regrets, coverage, kind, choice["ranking"][kind], fallbacks(choice["gbdt"], kind)
        )
        for kind in KINDS
    }
    return regrets


def fewest_misses(rows: list[dict[str, float]]) -> str | None:
    """Of the rules each of ``rows`` scores (how far each is past the bar there, 0 when
    within): the one past the bar on the fewest rows, the smaller sum of misses breaking a tie,
    then the order the rules are listed in. None without rows."""
    if not rows:
        return None
    labels = list(rows[0])
    return min(
        labels,
        key=lambda label: (
            sum(row[label] > 0 for row in rows),
            sum(row[label] for row in rows),
            labels.index(label),
        ),
    )


def leave_one_set_out(misses: dict[tuple, dict[str, float]]) -> dict[str, str]:
    """The selection rule each data set is scored under, chosen on the other sets alone.

    ``misses`` maps each row of the comparison (a key whose first element names its set, e.g.
    (set, split, kind)) to how far each rule is past the bar there (0 when within;
    ``benchmarks/selection_study.py``). Per set: ``fewest_misses`` over the *other* sets'
    rows. A set with no other set to choose on gets no rule."""
    chosen = {}
    for held in dict.fromkeys(key[0] for key in misses):
        rule = fewest_misses([row for key, row in misses.items() if key[0] != held])
        if rule is not None:
            chosen[held] = rule
    return chosen
