"""Each transfer choice made on job-level rows, re-made leaving the scored set out.

Three choices shape what the GBDTs learn on a set they never saw, and each was once made on the
folds ``docs/transfer.md`` reports:
- the history gap: the history's prior over the cost prior, as a feature (it was one, as
  ``cost_history_gap``, until leaving one set out dropped it);
- the efficiency GBDT's offset: the cost prior alone, or the cost prior plus the family's
  efficiency against it on its other types (the family offset);
- the history prior's first carrier (``features.PRIOR_COLUMNS``): the fleet's measured ratio,
  memory bandwidth or peak compute (it was bandwidth until all three sets chose the fleet's).
Here every variant is fitted on every outer fold of Lambda, Sia and NeuSight's rows, and per
set the variant is chosen on the *other two* sets (``selection.leave_one_set_out``: the one
behind the best variant on the fewest of their set x split rows, the smaller sum of shortfalls
breaking a tie, then the shipped one), then scored on the held set; and on all three together
(``selection.fewest_misses``), what ships.
Each choice is scored by the GBDT it feeds: the first two by the efficiency GBDT, the carrier by
the GBDT on the history prior.

It also gives the "before the cost model" figures on today's labels: the two GBDTs of that time
(the single GBDT, the GBDT on the history prior) with the cost feature group blanked.

The outer folds are ``crossval.run_split``'s (the same masks and seeds, features built as
``run_fold`` builds them); the selection's validation folds are not run, so each figure is one
GBDT's, not ``leap``'s.

    python benchmarks/transfer_choices.py --json --jobs 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import joblib
import numpy as np
import polars as pl

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from transfer import SETS, load_set  # noqa: E402

from leap_pipeline.studies.crossval import EFFICIENCY_GBDT, fold_features, gbdt_predict  # noqa: E402
from leap_pipeline.studies.selection import fewest_misses, leave_one_set_out  # noqa: E402
from leap_pipeline.studies.splits import folds, inner_chunks  # noqa: E402
from leap_serving.decide import metrics  # noqa: E402
from leap_serving.launch.cost_model import COST_FEATURES  # noqa: E402
from leap_serving.launch.families import with_family  # noqa: E402
from leap_serving.launch.features import (  # noqa: E402
    FEATURE_COLUMNS,
    PRIOR_COLUMNS,
    cost_log_q,
    prior_log_q,
)

SPLITS = ("leave-model-out", "leave-hardware-out", "leave-model-hardware-out", "partial-history")
COLUMN = {name: i for i, name in enumerate(FEATURE_COLUMNS)}
CARRIERS = {  # the first carrier's feature; the shipped order's first is listed first
    "fleet ratio first": "hist_xfer_fleet_log_q",
    "bandwidth first": "hist_xfer_bandwidth_log_q",
    "compute first": "hist_xfer_compute_log_q",
}
PRIOR_GBDT = "single_gbdt_prior"


def with_gap(X: np.ndarray) -> np.ndarray:
    """``X`` and one more column, the history gap: the history's prior over the cost prior,
    what the launch's history says of its efficiency (appended: every other column keeps its
    place, the efficiency GBDT's offset with it)."""
    return np.column_stack([X, prior_log_q(X) - cost_log_q(X)])


def carrier_first(X: np.ndarray, carrier: str) -> np.ndarray:
    """``X`` whose history prior tries ``carrier`` first: its column swapped with the shipped
    first carrier's (the GBDT sees the same features, the prior takes them in another order)."""
    first, other = COLUMN[PRIOR_COLUMNS[0]], COLUMN[CARRIERS[carrier]]
    X = X.copy()
    X[:, [first, other]] = X[:, [other, first]]
    return X


def blanked(X: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """``X`` with the columns ``names`` unknown (NaN), as a launch without them would be."""
    X = X.copy()
    X[:, [COLUMN[n] for n in names]] = np.nan
    return X


def family_efficiency(
    train: pl.DataFrame,
    rows: pl.DataFrame,
    efficiency: np.ndarray,
    chunk_train: np.ndarray | None,
    chunk_rows: np.ndarray | None,
) -> np.ndarray:
    """Per row of ``rows``: the mean ln(measured / cost prior) of its family's training rows on
    its *other* types (outside its own chunk, for a training row), 0 where there are none. What
    a family offset adds to the cost prior: how far this family runs from the prior elsewhere."""
    family_t, type_t = train["family"].to_numpy(), train["hardware_type"].to_numpy()
    known = np.isfinite(efficiency)
    out = np.zeros(rows.height)
    for i, (fam, hw) in enumerate(
        zip(rows["family"].to_numpy(), rows["hardware_type"].to_numpy(), strict=True)
    ):
        take = known & (family_t == fam) & (type_t != hw)
        if chunk_train is not None and chunk_rows is not None:
            take &= chunk_train != chunk_rows[i]
        if take.any():
            out[i] = float(np.mean(efficiency[take]))
    return out


def with_family_offset(X: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``X`` whose cost prior carries the family's efficiency: the efficiency GBDT's offset (and
    its roofline bound) move with it."""
    X = X.copy()
    X[:, COLUMN["cost_log_q"]] = X[:, COLUMN["cost_log_q"]] + shift
    return X


def fold_variants(
    rows: pl.DataFrame, specs: pl.DataFrame, split: str, mask: np.ndarray, seed: int, profile: str
) -> dict:
    """One outer fold: the features once, then every variant's GBDT fitted and its test rows
    predicted."""
    train, test = rows.filter(~mask), rows.filter(mask)
    chunk = inner_chunks(train, split, seed=seed)
    X_train, X_test = fold_features(train, test, specs, chunk)
    y = train["throughput"].log().to_numpy()

    def fit(name: str, transform: Callable[[np.ndarray], np.ndarray] = lambda X: X) -> list:
        return gbdt_predict(name, profile, transform(X_train), y, transform(X_test)).tolist()

    efficiency = y - cost_log_q(X_train)
    shift_train = family_efficiency(train, train, efficiency, chunk, chunk)
    shift_test = family_efficiency(train, test, efficiency, None, None)
    cost = tuple(COST_FEATURES)
    shipped = fit(EFFICIENCY_GBDT)
    predicted = {
        ("history gap", "dropped"): shipped,
        ("history gap", "a feature"): fit(EFFICIENCY_GBDT, with_gap),
        ("efficiency offset", "cost prior"): shipped,
        ("efficiency offset", "cost prior + family"): gbdt_predict(
            EFFICIENCY_GBDT,
            profile,
            with_family_offset(X_train, shift_train),
            y,
            with_family_offset(X_test, shift_test),
        ).tolist(),
        ("before the cost model", "single GBDT"): fit("single_gbdt", lambda X: blanked(X, cost)),
        ("before the cost model", "GBDT on the history prior"): fit(
            PRIOR_GBDT, lambda X: blanked(X, cost)
        ),
    }
    for carrier in CARRIERS:
        predicted[("history prior", carrier)] = fit(
            PRIOR_GBDT, lambda X, c=carrier: carrier_first(X, c)
        )
    return {"test": np.flatnonzero(mask).tolist(), "predicted": predicted}


def run_set_split(name: str, split: str, profile: str, jobs: int) -> dict:
    attempts, specs = load_set(name)
    rows = with_family(attempts.filter(pl.col("throughput") > 0))
    masks = folds(rows, split)
    if not masks:
        raise ValueError(f"{name}: split={split!r} makes no fold here")
    parallel = joblib.Parallel(n_jobs=jobs)
    done = parallel(
        joblib.delayed(fold_variants)(rows, specs, split, mask, seed, profile)
        for seed, mask in enumerate(masks, start=1)
    )
    q = rows["throughput"].to_numpy()
    predicted: dict = {}
    for fold in done:
        for key, p in fold["predicted"].items():
            predicted.setdefault(key, np.full(rows.height, np.nan))[fold["test"]] = p
    scored = np.zeros(rows.height, dtype=bool)
    for fold in done:
        scored[fold["test"]] = True
    out: dict = {}
    for (choice, variant), p in predicted.items():
        mdape = metrics.mdape(p[scored], q[scored])
        out.setdefault(choice, {})[variant] = {
            "w20": round(100 * metrics.within(p[scored], q[scored], 20), 1),
            "mdape": round(float(mdape), 1) if np.isfinite(mdape) else None,
        }
    return out


def choices_left_out(scores: dict) -> dict:
    """Per choice and held set: the variant chosen on the other sets' rows, the shipped
    variant (listed first) and both variants' held-set figures per split."""
    out = {}
    choices = next(iter(next(iter(scores.values())).values()))
    for choice in choices:
        if choice == "before the cost model":
            continue
        misses = {}
        for name, by_split in scores.items():
            for split, by_choice in by_split.items():
                w20 = {v: s["w20"] for v, s in by_choice[choice].items()}
                best = max(w20.values())
                misses[(name, split)] = {v: round(best - w, 1) for v, w in w20.items()}
        chosen = leave_one_set_out(misses)
        shipped = next(iter(choices[choice]))
        out[choice] = {"on all sets": fewest_misses(list(misses.values()))} | {
            name: {
                "chosen on the other sets": chosen.get(name),
                "shipped": shipped,
                # None: no other set to choose on (one --sets)
                "agrees": chosen[name] == shipped if name in chosen else None,
                "held set": {
                    split: {
                        v: by_choice[choice][v]
                        for v in dict.fromkeys((shipped, chosen.get(name) or shipped))
                    }
                    for split, by_choice in scores[name].items()
                },
            }
            for name in scores
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line on stdout")
    parser.add_argument("--sets", default=",".join(SETS), help=f"of {', '.join(SETS)}")
    parser.add_argument("--splits", default=",".join(SPLITS), help=f"of {', '.join(SPLITS)}")
    parser.add_argument("--jobs", type=int, default=-1, help="folds fitted at once (joblib)")
    parser.add_argument("--profile", choices=("quick", "fast", "paper"), default="fast")
    args = parser.parse_args(argv)
    started = time.monotonic()
    scores: dict = {}
    for name in args.sets.split(","):
        for split in args.splits.split(","):
            split_started = time.monotonic()
            scores.setdefault(name, {})[split] = run_set_split(name, split, args.profile, args.jobs)
            print(
                f"{name} {split}: {time.monotonic() - split_started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    result = {
        "profile": args.profile,
        "scores": scores,
        "leave_one_set_out": choices_left_out(scores),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
