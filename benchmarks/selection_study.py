"""How ``leap crossval`` should choose the ranking it publishes, compared on splits the choice
did not see.

Every fold of every split is run once, as ``leap crossval`` runs it (``crossval.run_fold``), and
two things are kept per fold: each candidate's regret on the fold's *validation* decisions (the
inner chunks of its training rows, all a choice may look at) and each candidate's regret on the
fold's *test* decisions (what the split's table scores). A selection rule is then a function of
the validation regrets alone, so any number of rules are scored on the same folds without
refitting, each nested: the rule never sees the test decisions it is scored on.

Choosing *among rules* by their test scores would be selection on the scoring folds again, so
the rule is chosen across data sets, leaving one set out: each set is scored under the rule
with the fewest rows past the issue's bar (at most the best rule's mean regret and at most 1.25x
the best single candidate's) on the *other* sets' splits (``selection.leave_one_set_out``).
The sets: Lambda, Sia and NeuSight's 52 rows (a folder in the data contract, read as
``leap crossval --source contract`` reads one).

A rule's pick is scored ranking the types it cannot score last; ``leap crossval`` places them
by a fallback chosen on the validation folds (``selection.choose_fallback``).

    python benchmarks/selection_study.py --jobs 1            # the three sets, every split
    python benchmarks/selection_study.py --draws 3           # and on two more validation draws
    python benchmarks/selection_study.py --explain sia:partial-history

Beside the rules, the combined candidates of ``studies.combinations`` (other blends, rank
means) are offered to some, and some rules are scored with no selection at all ("always ...").

The per-fold regrets are cached in ``data/selection-study/`` (a fold's fits do not change with
the rule); ``--refresh`` runs them again.
"""

from __future__ import annotations

import argparse
import hashlib
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

from selection_rules import EVERY, RULES_COMPARED, SHIPPED, SINGLES  # noqa: E402

from leap_pipeline.data.static_sets import read_static_set  # noqa: E402
from leap_pipeline.studies.combinations import (  # noqa: E402
    COMBINED,
    GBDT_BLEND,
    combined_scores,
    with_blends,
)
from leap_pipeline.studies.crossval import (  # noqa: E402
    CANDIDATES,
    INCUMBENT,
    PREDICTORS,
    SPLITS,
    _inner_selection,
    folds,
    run_fold,
)
from leap_pipeline.studies.decisions import (  # noqa: E402
    KINDS,
    LAST,
    RULES,
    TIE,
    WITHIN,
    cells,
    decision_regrets,
)
from leap_pipeline.studies.selection import (  # noqa: E402
    fewest_misses,
    leave_one_set_out,
    per_type_difference,
)
from leap_pipeline.studies.splits import validation_folds  # noqa: E402
from leap_serving.launch.families import with_family  # noqa: E402

PUBLIC = PROJECT.parent / "shared" / "data" / "public"
HARDWARE = PUBLIC / "epoch-ml-hardware" / "ml_hardware.csv"
# each set as `leap crossval` reads it: --source, --path, --hardware
SETS = {
    "lambda": ("lambda", PUBLIC / "lambda-dl-benchmark" / "head-aa5addb" / "pytorch", HARDWARE),
    "sia": ("sia", PUBLIC / "sia-sosp23-traces" / "traces", HARDWARE),
    "neusight": ("contract", PUBLIC / "neusight-asplos25" / "contract", None),
}
CACHE = PROJECT / "data" / "selection-study"
BAR = 1.25  # leap's mean regret at most this times the best single candidate's
RULE_SLACK = 0.005  # and at most the best rule's plus this (issue 69's bar)


# -- the folds, run once -----------------------------------------------------------------------


def _code_version() -> str:
    """A digest of the code a fold's regrets come from (the studies, and the features, models
    and kernels they fit: a dropped feature changes every fold): a cache from other code is not
    reused."""
    digest = hashlib.sha256()
    for folder in ("leap_pipeline/studies", "leap_pipeline/data", "leap_serving"):
        for path in sorted((PROJECT / folder).rglob("*.py")):
            digest.update(path.relative_to(PROJECT).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def _stem(name: str, split: str, profile: str) -> str:
    """The cache files' name for a set's split at this code (a draw's adds ``-r<draw>``)."""
    return f"{name}-{split}-{profile}-{_code_version()}"


def load_set(name: str):
    """A set's (job_attempts, hardware_specs), read as ``leap crossval`` reads them."""
    source, path, hardware = SETS[name]
    read = read_static_set(source, path, hardware)
    return read.attempts, read.specs


def _lists(value):
    """A fold's regrets as JSON can hold them (the cache is data, never unpickled)."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value.tolist() if isinstance(value, np.ndarray) else value


def _arrays(value):
    """``_lists`` undone: every list back to an array (model types stay strings)."""
    if isinstance(value, dict):
        return {k: _arrays(v) for k, v in value.items()}
    return np.asarray(value) if isinstance(value, list) else value


REPEAT_SEED = 1000  # repeat r of fold k validates with seed k + r * REPEAT_SEED


def _load(path: Path, compute: Callable[[], list[dict]], refresh: bool) -> list[dict]:
    """The cached list at ``path``, or ``compute()``'s, written whole (a stopped run leaves no
    cut-off file)."""
    if path.exists() and not refresh:
        return [_arrays(fold) for fold in json.loads(path.read_text())]
    kept = compute()
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps([_lists(fold) for fold in kept]))
    partial.replace(path)
    return kept


def fold_regrets(
    name: str,
    split: str,
    profile: str,
    n_jobs: int,
    refresh: bool,
    repeats: int = 1,
    draw: int = 0,
) -> list[dict]:
    """Per fold: validation regrets and their model types, and test regrets, per candidate.
    With ``repeats`` > 1, each fold is validated again on validation
    folds drawn with other seeds, and ``validation``/``clusters`` pool every repeat's (each
    repeat's model types voting apart). ``draw`` > 0 validates on that repeat's folds alone
    instead of the fold's own: how much a choice hangs on one draw of validation folds."""
    attempts, specs = load_set(name)
    rows = with_family(attempts.filter(pl.col("throughput") > 0))
    masks = folds(rows, split)
    if not masks:
        raise ValueError(f"{name}: split={split!r} makes no fold here")
    stem = _stem(name, split, profile)

    def outer() -> list[dict]:
        started = time.monotonic()
        jobs = (
            joblib.delayed(run_fold)(rows, specs, split, mask, profile, seed)
            for seed, mask in enumerate(masks, start=1)
        )
        kept = [{
            "validation": fold["choice"]["validation"],
            "clusters": fold["choice"]["clusters"],
            "published": fold["choice"]["ranking"],
            "gbdt": fold["choice"]["gbdt"],
            # who places what each candidate cannot score, and the order challengers are tried
            "fallbacks": fold["choice"]["fallbacks"],
            "order": fold["choice"]["order"],
            "test": {c: r for c, r in fold["regrets"].items() if c != "leap"},
            "test_placed": fold["placed"],
            # what the combined candidates are built from (``with_combined``)
            "validation_predictions": {
                n: fold["choice"]["validation_predictions"][n] for n in PREDICTORS
            },
            "test_predictions": {n: fold["predicted"][n] for n in PREDICTORS},
        } for fold in joblib.Parallel(n_jobs=n_jobs)(jobs)]  # fmt: skip
        print(f"{name} {split}: {len(masks)} folds in {time.monotonic() - started:.0f} s",
              file=sys.stderr)  # fmt: skip
        return kept

    def repeat(r: int) -> list[dict]:
        started = time.monotonic()
        jobs = (
            joblib.delayed(_inner_selection)(
                rows.filter(~mask), split, specs, profile, seed + r * REPEAT_SEED
            )
            for seed, mask in enumerate(masks, start=1)
        )
        kept = [{
            "validation": choice["validation"],
            "clusters": choice["clusters"],
            "fallbacks": choice["fallbacks"],
            "order": choice["order"],
            "validation_predictions": {n: choice["validation_predictions"][n] for n in PREDICTORS},
        } for choice in joblib.Parallel(n_jobs=n_jobs)(jobs)]  # fmt: skip
        print(f"{name} {split}: repeat {r} in {time.monotonic() - started:.0f} s", file=sys.stderr)
        return kept

    kept = _load(CACHE / f"{stem}.json", outer, refresh)
    with_combined(rows, specs, split, masks, kept)
    if draw and _draws_differ(rows, split, masks, draw):
        extra = _load(CACHE / f"{stem}-r{draw}.json", lambda: repeat(draw), refresh)
        with_combined(rows, specs, split, masks, extra, seed_offset=draw * REPEAT_SEED)
        for fold, other in zip(kept, extra, strict=True):
            fold["validation"], fold["clusters"] = other["validation"], other["clusters"]
            fold["order"] = other["order"]
    for r in (r for r in range(1, repeats) if _draws_differ(rows, split, masks, r)):
        extra = _load(CACHE / f"{stem}-r{r}.json", lambda r=r: repeat(r), refresh)
        with_combined(rows, specs, split, masks, extra, seed_offset=r * REPEAT_SEED)
        for fold, more in zip(kept, extra, strict=True):
            # each repeat's model types vote apart: pooled into one mean per type, a heavy
            # tail in one repeat would carry the type's vote
            tagged = np.array([f"{c}#r{r}" for c in more["clusters"]], dtype=object)
            fold["clusters"] = np.concatenate([fold["clusters"].astype(object), tagged])
            fold["validation"] = {
                c: {k: np.concatenate([v[k], more["validation"][c][k]]) for k in KINDS}
                for c, v in fold["validation"].items()
            }
    return kept


def _draws_differ(rows, split: str, masks: list, draw: int) -> bool:
    """Whether draw ``draw``'s validation folds differ from the fold's own in any fold: one
    model or type per validation fold (up to ``MAX_INNER_FOLDS`` of them) is the same in every
    draw, and a repeat of it would only refit the same folds."""
    for seed, mask in enumerate(masks, start=1):
        train = rows.filter(~mask)
        own = validation_folds(train, split, seed=seed)
        other = validation_folds(train, split, seed=seed + draw * REPEAT_SEED)
        if len(own) != len(other):
            return True
        key = lambda folds: sorted(np.flatnonzero(m).tobytes() for m in folds)  # noqa: E731
        if key(own) != key(other):
            return True
    return False


def _regrets(rows, specs, held, predicted: dict) -> tuple:
    """Every candidate's regrets, the combined ones too, on the decisions ``held`` touches, and
    their model types."""
    full = with_blends({n: np.where(held, p, np.nan) for n, p in predicted.items()})
    table = cells(rows, specs, held, full)
    return decision_regrets(table, list(full), scores=combined_scores(list(full)))


def _same(rebuilt: dict, kept: dict, where: str, fallbacks: dict | None = None) -> None:
    """The regrets rebuilt from kept predictions must be those ``run_fold`` computed."""
    for c in CANDIDATES:
        for k in KINDS:
            if fallbacks is not None and fallbacks[c][k] != LAST:
                continue  # kept as its fallback placed it: not the plain regrets rebuilt here
            a, b = rebuilt[c][k], kept[c][k]
            if a.shape != b.shape or not np.allclose(a, b, equal_nan=True):
                raise RuntimeError(f"{where}: rebuilt regrets of {c} ({k}) differ from the fold's")


def with_combined(
    rows, specs, split: str, masks: list, kept: list[dict], seed_offset: int = 0
) -> list[dict]:
    """Each fold's validation (and, where kept, test) regrets of the combined candidates
    (``studies.combinations``), from the predictions the fold kept, rebuilt as ``run_fold``
    builds its own; the rebuilt regrets of the plain candidates must equal the fold's."""
    for seed, (mask, fold) in enumerate(zip(masks, kept, strict=True), start=1):
        train = rows.filter(~mask)
        pieces = []
        for held in validation_folds(train, split, seed=seed + seed_offset):
            predicted = {n: np.where(held, p, np.nan)
                         for n, p in fold["validation_predictions"].items()}  # fmt: skip
            pieces.append(_regrets(train, specs, held, predicted)[0])
        for name in COMBINED:
            fold["validation"][name] = {
                k: np.concatenate([r[name][k] for r in pieces] or [np.empty(0)]) for k in KINDS
            }
        rebuilt = {
            c: {k: np.concatenate([r[c][k] for r in pieces] or [np.empty(0)]) for k in KINDS}
            for c in CANDIDATES
        }
        _same(rebuilt, fold["validation"], f"{split} fold {seed}, validation", fold["fallbacks"])
        if "test_predictions" in fold:
            full = {}
            for n, p in fold["test_predictions"].items():
                full[n] = np.full(rows.height, np.nan)
                full[n][mask] = p
            test, _ = _regrets(rows, specs, mask, full)
            _same(test, fold["test"], f"{split} fold {seed}, test")
            fold["test"] |= {name: test[name] for name in COMBINED}
    return kept


# -- scoring ------------------------------------------------------------------------------------


def published(fold: dict, kind: str, pick: str) -> np.ndarray:
    """The test regrets of ``pick`` as ``leap crossval`` would publish it: placed by the
    fallback the fold chose for it on its validation folds (``selection.choose_fallback``). A
    combined candidate, which has none, ranks what it cannot score last."""
    placed = fold.get("test_placed", {})
    return placed[pick][kind] if pick in placed else fold["test"][pick][kind]


def _in_order(fold: dict, kind: str) -> dict:
    """The fold's validation regrets, the challengers in the order the fold tried them (a
    sequential test's order is part of the rule), the rest after."""
    first = [INCUMBENT[kind], *fold.get("order", {}).get(kind, [])]
    regrets = fold["validation"]
    return {n: regrets[n] for n in dict.fromkeys([*first, *regrets]) if n in regrets}


def split_scores(fold_list: list[dict], kind: str) -> dict:
    """Mean test regret of each candidate, and of each rule's choice as published, over the
    split's decisions."""
    candidates = {
        c: float(np.mean(np.concatenate([f["test"][c][kind] for f in fold_list]))) for c in EVERY
    }
    chosen = {}
    for label, rule in RULES_COMPARED.items():
        picks = [rule(_in_order(f, kind), kind, f["clusters"]) for f in fold_list]
        regret = np.concatenate([published(f, kind, p) for f, p in zip(fold_list, picks,
                                                                      strict=True)])  # fmt: skip
        chosen[label] = {"mean": float(np.mean(regret)), "picks": picks}
    return {"candidates": candidates, "rules": chosen}


def misses(scores: dict, label: str) -> float:
    """How far a rule's choice is past the bar, summed: over the best rule's mean +
    ``RULE_SLACK``, and over ``BAR`` x the best single candidate's (0 when within)."""
    mean = scores["rules"][label]["mean"]
    best_rule = min(scores["candidates"][r] for r in RULES)
    best_single = min(scores["candidates"][c] for c in SINGLES)
    return max(0.0, mean - best_rule - RULE_SLACK) + max(0.0, mean - BAR * best_single - TIE)


def held_out_result(table: dict, held: str, label: str) -> dict:
    """Set ``held``'s rows under the rule ``label``: its mean regret per split and kind beside
    the bar's two terms, and its rows past the bar."""
    per_row = []
    for (name, split, kind), scores in table.items():
        if name != held:
            continue
        cands = scores["candidates"]
        best_single = min(SINGLES, key=cands.get)
        per_row.append({"split": split, "kind": kind, "mean": scores["rules"][label]["mean"],
                        "best_rule": min(cands[r] for r in RULES), "best_single": best_single,
                        "best_single_mean": cands[best_single],
                        "miss": misses(scores, label)})  # fmt: skip
    return {"rule": label, "rows": len(per_row),
            "rows_past_bar": sum(r["miss"] > 0 for r in per_row),
            "misses": sum(r["miss"] for r in per_row), "per_row": per_row}  # fmt: skip


def explain(fold_list: list[dict], kind: str) -> None:
    """Why the shipped rule kept what it kept, fold by fold: each challenger's lead over the
    incumbent per validation model type, the one-SE bar, the sign count and the within-5% gate."""
    incumbent = INCUMBENT[kind]
    for i, fold in enumerate(fold_list, start=1):
        clusters, regrets = fold["clusters"], fold["validation"]
        names = np.unique(clusters)
        base = regrets[incumbent][kind]
        print(f"fold {i}: {len(base)} validation decisions on {len(names)} model types; "
              f"published {fold['published'][kind]}")  # fmt: skip
        per_type = "; ".join(
            f"{c} {regrets[incumbent][kind][clusters == c].mean():.2f}/"
            f"{regrets['single_gbdt'][kind][clusters == c].mean():.2f}"
            for c in names
        )
        print(f"  validation mean regret by model type, rule/single GBDT: {per_type}")
        for name in CANDIDATES:
            if name == incumbent or len(names) < 2:
                continue
            per_type = per_type_difference(regrets[name][kind], base, clusters)
            lead = -per_type.mean()
            se = per_type.std(ddof=1) / np.sqrt(len(names))
            lower = int(np.sum(per_type < -TIE))
            higher = int(np.sum(per_type > TIE))
            holds = np.mean(regrets[name][kind] <= WITHIN) >= np.mean(base <= WITHIN)
            test = float(np.mean(fold["test"][name][kind]))
            print(f"  {name:26s} lead {lead:+.3f} (SE {se:.3f}) lower/higher {lower}/{higher} "
                  f"within-5% held {holds!s:5s} | test mean {test:.3f} "
                  f"(incumbent {float(np.mean(fold['test'][incumbent][kind])):.3f})")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--profile", default="fast")
    parser.add_argument("--jobs", type=int, default=-1)
    parser.add_argument("--refresh", action="store_true", help="run the folds again")
    parser.add_argument("--repeats", type=int, default=1, help="validate each fold this many "
                        "times, on validation folds drawn with other seeds (splits whose "
                        "validation folds are random), pooling them")  # fmt: skip
    parser.add_argument("--draws", type=int, default=1, help="score every rule again on "
                        "validation folds drawn with other seeds, each draw alone, and print "
                        "its rows past the bar per draw")  # fmt: skip
    parser.add_argument("--explain", default="", help="SET:SPLIT[:KIND]: the shipped rule's "
                        "evidence fold by fold")  # fmt: skip
    parser.add_argument("--among", default="", help="choose leaving one set out only among "
                        "the rules whose label holds this text (e.g. 'sign test')")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.explain:
        name, split, *kind = args.explain.split(":")
        fold_list = fold_regrets(name, split, args.profile, args.jobs, args.refresh, args.repeats)
        for k in kind or KINDS:
            print(f"== {name} {split} {k}")
            explain(fold_list, k)
        return 0
    table, by_draw = {}, {}
    for name in args.sets.split(","):
        for split in SPLITS:
            if args.refresh:  # every cache of the split, its draws too, run again once
                for path in CACHE.glob(f"{_stem(name, split, args.profile)}*.json"):
                    path.unlink()
            try:
                fold_list = fold_regrets(name, split, args.profile, args.jobs, False,
                                         args.repeats)  # fmt: skip
            except ValueError as exc:  # a split this set cannot make; the others still count
                print(f"{name} {split}: skipped: {exc}", file=sys.stderr)
                continue
            for kind in KINDS:
                table[(name, split, kind)] = split_scores(fold_list, kind)
            for draw in range(1, args.draws):
                fold_list = fold_regrets(name, split, args.profile, args.jobs, False, draw=draw)
                for kind in KINDS:
                    by_draw[(name, split, kind, draw)] = split_scores(fold_list, kind)
    labels = list(RULES_COMPARED)
    draws = {
        lb: [sum(misses(v, lb) > 0 for v in table.values())]
        + [
            sum(misses(v, lb) > 0 for k, v in by_draw.items() if k[3] == d)
            for d in range(1, args.draws)
        ]
        for lb in labels
    }
    # each set scored under the rule chosen on the other sets alone; a fleet outside them all
    # (what `leap crossval` ships for) under the rule chosen on every set
    eligible = [lb for lb in labels if args.among in lb]
    by_row = {key: {lb: misses(v, lb) for lb in eligible} for key, v in table.items()}
    transfer = leave_one_set_out(by_row)
    every_set = fewest_misses(list(by_row.values()))
    held_out = {held: held_out_result(table, held, label) for held, label in transfer.items()}
    out = []
    for (name, split, kind), scores in table.items():
        cands = scores["candidates"]
        best_single = min(SINGLES, key=cands.get)
        row = {
            "set": name, "split": split, "kind": kind,
            "best_rule": min(cands[r] for r in RULES),
            "best_single": best_single, "best_single_mean": cands[best_single],
            **{f"candidate {c}": cands[c] for c in (GBDT_BLEND, *COMBINED)},
            **{lb: scores["rules"][lb]["mean"] for lb in labels},
            "chosen_elsewhere": transfer.get(name),
        }  # fmt: skip
        out.append(row)
    if args.json:
        print(json.dumps({"rows": out, "transfer": transfer, "leave_one_set_out": held_out,
                          "chosen_on_every_set": every_set, "shipped": SHIPPED,
                          "rows_past_bar_by_draw": draws}))  # fmt: skip
        return 0
    print("| set | split | kind | best rule | best single (same folds) | "
          + " | ".join(labels) + " |")  # fmt: skip
    print("|" + "---|" * (5 + len(labels)))
    for r in out:
        values = [f"{r[lb]:.3f}" for lb in labels]
        print(
            f"| {r['set']} | {r['split']} | {r['kind']} | {r['best_rule']:.3f} | "
            f"{r['best_single_mean']:.3f} ({r['best_single']}) | " + " | ".join(values) + " |"
        )
    print()
    for lb in labels:
        total = sum(misses(v, lb) for v in table.values())
        bad = sum(misses(v, lb) > 0 for v in table.values())
        other = f"; on other draws {draws[lb][1:]}" if args.draws > 1 else ""
        print(f"{lb}: {bad} of {len(table)} rows past the bar, misses summed {total:.3f}{other}")
    print()
    for held, result in held_out.items():
        print(f"{held}, under the rule chosen on the other sets ({result['rule']}): "
              f"{result['rows_past_bar']} of {result['rows']} rows past the bar, misses summed "
              f"{result['misses']:.3f}")  # fmt: skip
        for r in result["per_row"]:
            print(f"  {r['split']} {r['kind']}: {r['mean']:.3f} (best rule {r['best_rule']:.3f}, "
                  f"best single {r['best_single_mean']:.3f} {r['best_single']}, "
                  f"{'past the bar' if r['miss'] > 0 else 'within'})")  # fmt: skip
    print(f"chosen on every set, for a fleet outside them: {every_set}; shipped: {SHIPPED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
