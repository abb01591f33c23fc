"""Which ranking a fold of ``leap crossval`` publishes for a decision kind, from its candidates'
regrets on the validation folds (``crossval._inner_selection``), and who places the types that
ranking cannot score.

A decision is published whole: a ranking and its fallback (``decisions.fallback_regrets``),
scored as named, so ``leap``'s regret on a fold is exactly its published candidate's. The rule
made for the kind is the default; a challenger replaces it only where the validation model
types show it lower by a sign test that holds the chance of any false replacement to ``ALPHA``
however many challengers are offered (``choose_ranking``). Which selection rule to ship is
chosen across data sets, leaving one out (``leave_one_set_out``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from leap_pipeline.studies.decisions import (
    KINDS,
    LAST,
    TIE,
    decision_coverage,
    decision_regrets,
    fallback_regrets,
    fallback_regrets_of,
)

# the rule each decision kind starts from: a challenger must beat it on validation decisions
INCUMBENT = {"fastest": "highest_fp16_peak", "per_cost": "best_fp16_peak_per_dollar"}
# the chance, over all challengers of one choice, that the rule is replaced by a challenger
# that does not lead it. Chosen among 5, 10, 20, 35 and 50% by benchmarks/selection_study.py
# leaving one set out (Lambda, Sia, NeuSight's rows): 20% had the fewest split-kind rows past
# the bar over all three sets (17 of 30; 5%: 18), and was the level chosen for Lambda and for
# NeuSight on the other two sets (35% for Sia)
ALPHA = 0.20


def per_type_difference(values: np.ndarray, base: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """A candidate's mean regret minus the rule's, per validation model type (in ``np.unique``
    order): the unit a selection weighs, whatever a type's number of decisions."""
    return np.array([(values - base)[clusters == c].mean() for c in np.unique(clusters)])


def sign_test(lower: int, higher: int) -> float:
    """One-sided exact sign test: the chance of ``lower`` or more of ``lower + higher`` model
    types lower if lower and higher were a fair coin (types where both choose alike dropped)."""
    n = lower + higher
    return sum(math.comb(n, i) for i in range(lower, n + 1)) / 2**n


def choose_ranking(
    regrets: dict[str, dict[str, np.ndarray]],
    kind: str,
    clusters: np.ndarray,
    order: Sequence[str] | None = None,
    alpha: float = ALPHA,
) -> str:
    """The candidate a fold publishes for one decision kind: the rule made for the kind
    (``INCUMBENT``) unless a challenger is lower than it on enough validation model types.

    Each validation model type is one observation: its mean regret difference against the rule
    (``per_type_difference``), lower, higher, or neither (both choose alike). Decisions of one
    type are not independent draws (they share its ratios across types), and regret is
    heavy-tailed (one model where a rule is 2.5x off carries a mean), so a count of types
    decides: a challenger passes when the exact sign test (``sign_test``) puts its count of
    lower types at or below ``alpha``.

    Many challengers each tested at ``alpha`` would replace a rule nobody beats more often than
    ``alpha``. So the challengers are tested in a fixed sequence, ``order`` (set before any
    regret is seen: ``crossval`` puts the fold's GBDT, chosen by w20, first), each at
    ``alpha``, stopping at the first that fails: the chance of any false replacement stays at
    ``alpha`` however many are offered. Of those that pass, the one lower on the most types net
    (lower minus higher) is published, the larger mean lead breaking a tie. At 20%, with three
    validation types a challenger must be lower on all three (1/8); with five, on four (6/32);
    with ten, on seven (17.2%).

    A candidate whose regrets are missing, of another length or not finite is skipped (it is
    no evidence); without the rule's own regrets, or fewer than two model types, the rule
    stands."""
    incumbent = INCUMBENT[kind]
    base = regrets.get(incumbent, {}).get(kind)
    if len(np.unique(clusters)) < 2 or base is None or len(base) != len(clusters):
        return incumbent
    if not np.isfinite(base).all():
        return incumbent
    best, best_key = incumbent, (0, 0.0)
    for name in order if order is not None else list(regrets):
        values = regrets.get(name, {}).get(kind)
        if name == incumbent or values is None or len(values) != len(base):
            continue
        if not np.isfinite(values).all():
            continue
        per_type = per_type_difference(values, base, clusters)
        lower, higher = int(np.sum(per_type < -TIE)), int(np.sum(per_type > TIE))
        if lower <= higher or sign_test(lower, higher) > alpha:
            break
        key = (lower - higher, -float(per_type.mean()))
        if key > best_key:
            best, best_key = name, key
    return best


def choose_fallback(by_fallback: dict[str, np.ndarray], covered: np.ndarray) -> str:
    """Who places the types a ranking cannot score, from the validation decisions where it
    cannot (``covered`` False): the fallback with the lowest mean regret there, ``LAST`` (the
    ranking alone) on a tie or where the ranking scores every type of every decision."""
    missing = ~np.asarray(covered, dtype=bool)
    if not missing.any():
        return LAST
    best, best_mean = LAST, float(np.mean(by_fallback[LAST][missing]))
    for name, values in by_fallback.items():
        mean = float(np.mean(values[missing]))
        if np.isfinite(mean) and mean < best_mean - TIE:
            best, best_mean = name, mean
    return best


def placed_regrets(
    table: pl.DataFrame,
    predictors: list[str],
    candidates: Sequence[str],
    fallbacks: Sequence[str],
) -> tuple[dict, dict]:
    """On one table of decisions: per candidate, per fallback (``LAST`` first), per kind, the
    regret of each decision as the candidate placed by the fallback decides it
    (``decisions.fallback_regrets``), and per candidate and kind whether it scores every type
    of each decision. A candidate that scores every type of every decision, or is its own
    fallback, is its own regret under it, computed once."""
    plain, _ = decision_regrets(table, predictors)
    coverage = decision_coverage(table, predictors)
    # a candidate that scores every type, or places by itself, ranks the rest last: its own
    whole = {name: all(coverage[name][kind].all() for kind in KINDS) for name in candidates}
    pairs = [
        (name, fallback)
        for name in candidates
        for fallback in fallbacks
        if fallback != LAST and not (whole[name] or fallback == name)
    ]
    placed = fallback_regrets_of(table, predictors, pairs) if pairs else {}
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {
        name: {
            fallback: placed.get((name, fallback), plain[name])
            for fallback in (LAST, *(f for f in fallbacks if f != LAST))
        }
        for name in candidates
    }
    return out, {name: coverage[name] for name in candidates}


def published_regrets(table: pl.DataFrame, predictors: list[str], choice: dict) -> dict:
    """Per kind, the regret of each decision of ``table`` as ``choice`` publishes it: the
    ranking ``choice["ranking"][kind]`` placed by ``choice["fallback"][kind]``."""
    return {
        kind: fallback_regrets(
            table, predictors, choice["ranking"][kind], choice["fallback"][kind]
        )[kind]
        for kind in KINDS
    }


def with_published(table: pl.DataFrame, predictors: list[str], choice: dict) -> dict:
    """Every candidate's regrets on a fold's decisions (``decisions.cells``' ``table``), each
    ranking the types it cannot score last, and ``leap``'s: per kind what ``choice``
    published (``published_regrets``)."""
    regrets, _ = decision_regrets(table, predictors)
    regrets["leap"] = published_regrets(table, predictors, choice)
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
