"""Which cascade settings earn their place: a backtest of each against the single GBDT.

For each night D of the backtest (the report's fleet and nights), every setting below is trained
on the 30 days before D at one profile (early-stopped on the window's last day, as a night trains)
and scored on D under each gating; the single GBDT (a one-bin cascade) beside them. Gating is a
prediction-time choice, so the three gatings of a setting share one fit.

Three groups of settings (``--group``):

- ``structure`` (default): the paper's cascade (13 bins, EM scored on the rows each expert trained
  on, experts on their own bin); out-of-fold EM; experts that also train on their neighbours'
  rows (weight 0.5); both; and the number of bins K at 6 and 26.
- ``levers``: the cascade the night fits (the shipped K and gating) and the speed levers of its
  profile, each turned off alone: EM on every row
  instead of 20% (``em_sample``), the classifier on every row of each bin instead of 15%
  (``classifier_sample``), each tree on every feature instead of half (``feature_fraction``, for
  the cascade and for the single GBDT). Each setting's fit time is reported beside its w20, so
  the table says what each lever buys and what it costs.
- ``designs``: the night's cascade beside designs that lean on the single GBDT for their bins or
  their gating (``cascade_designs``: gating by its predicted bin, experts as corrections to it,
  the classifier on every row with gating over neighbouring bins, EM on its residuals).

Each (night, setting) result is kept in ``data/cascade-settings/`` under a digest of its settings
and of the code it depends on (``CODE``), so a long run that is stopped (the levers at scale 1.0
take about 25 minutes a night with ``--n-jobs -1`` on 2 cores) resumes where it was; ``--refresh``
fits again.

Run: python benchmarks/cascade_settings.py [--scale 0.05] [--nights 10] [--spread 29]
     [--profile fast] [--group structure|levers|designs] [--warehouse PATH] [--jobs 2] [--n-jobs N]
     [--refresh] [--json]
e.g. python benchmarks/cascade_settings.py --scale 1.0 --profile paper --group levers \
     --nights 3 --spread 2 --jobs 1 --n-jobs -1 --warehouse data/bench-1.0.duckdb
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

from leap_pipeline.data.feature_table import discard_stale_warehouse
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.selection import training_window, validation_rows
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.settings import WINDOW_DAYS
from leap_pipeline.simulation import SPAN_START
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.gating import GATINGS
from leap_serving.model.profiles import PAPER_CASCADE, profile_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cascade_designs import DESIGNS, USES_SINGLE_GBDT

PROJECT = Path(__file__).resolve().parents[1]
CACHE = PROJECT / "data" / "cascade-settings"
SPEED_LEVERS = ("em_sample", "classifier_sample", "feature_fraction")
GROUPS: dict[str, dict[str, dict]] = {
    "structure": {
        "single_gbdt": {"n_bins": 1},
        "paper": PAPER_CASCADE,
        "oof_em": PAPER_CASCADE | {"oof_folds": 2},
        "overlap": PAPER_CASCADE | {"expert_overlap": 0.5},
        "oof_em+overlap": PAPER_CASCADE | {"oof_folds": 2, "expert_overlap": 0.5},
        "k6": PAPER_CASCADE | {"n_bins": 6},
        "k26": PAPER_CASCADE | {"n_bins": 26},
    },
    # the night's own cascade (the shipped K and gating), in the order a stopped run most needs
    # them: the two models the night fits, then each lever alone
    "levers": {
        "single_gbdt": {"n_bins": 1},
        "night": {},
        "classifier_all_rows": {"classifier_sample": 1.0},
        "all_features": {"feature_fraction": 1.0},
        "single_gbdt_all_features": {"n_bins": 1, "feature_fraction": 1.0},
        "em_all_rows": {"em_sample": 1.0},
    },
    # designs that lean on the single GBDT (``cascade_designs``), beside the two models the
    # night fits
    "designs": {
        "single_gbdt": {"design": "single_gbdt"},  # g itself, fitted once for the designs
        "night": {},
        **{name: {"design": name} for name in DESIGNS if name != "single_gbdt"},
    },
}


# what a cached result depends on beside its settings: the model, the features, the window and
# the scoring, and the simulated fleet the warehouse was landed from
CODE = [
    *sorted((PROJECT / "leap_serving" / "model").glob("*.py")),
    PROJECT / "leap_serving" / "launch" / "features.py",
    PROJECT / "leap_serving" / "decide" / "metrics.py",
    PROJECT / "leap_pipeline" / "modeling" / "selection.py",
    PROJECT / "leap_pipeline" / "data" / "feature_table.py",
    *sorted((PROJECT / "leap_pipeline" / "simulation").glob("*.py")),
    PROJECT / "benchmarks" / "cascade_designs.py",
]


def cache_key(name: str, params: dict, night: dt.date, args) -> str:
    """The cache file's name: the run's fleet, profile and threads, the night, the setting and
    a digest of its parameters and of ``CODE``: a result of other code or settings is not reused."""
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for path in CODE:
        digest.update(path.read_bytes())
    fleet = f"{args.scale}-{args.seed}-{args.profile}-j{args.n_jobs}"
    return f"{fleet}-{night}-{name}-{digest.hexdigest()[:12]}"


def cached_score(name: str, params: dict, night: dt.date, warehouse: Path, args) -> dict:
    """``score_setting`` for one night, read from the cache when this code already ran it; a
    file cut short (a run stopped while writing it) counts as missing."""
    path = CACHE / f"{cache_key(name, params, night, args)}.json"
    if path.exists() and not args.refresh:
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            print(f"{path.name} is unreadable: fitting again", file=sys.stderr)
    with open_warehouse(warehouse, read_only=True) as wh:
        window = wh.read("feature_table", *training_window(night))
        rows = wh.read("feature_table", night, night)
    if "design" in params:
        uses = params["design"] in USES_SINGLE_GBDT
        single = single_gbdt_predictions(night, window, rows, args) if uses else {}
        result = score_design(name, params["design"], window, rows, single, args)
    else:
        result = score_setting(name, params, window, rows, args.profile, args.n_jobs)
    result["params"] = params
    _write_whole(path, lambda out: out.write(json.dumps(result).encode()))
    print(f"{night} {name}: {result['seconds']} s, w20 {result['w20']}", file=sys.stderr)
    return result


def _write_whole(path: Path, write) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.partial-{os.getpid()}")  # one per process
    with open(partial, "wb") as out:
        write(out)
    os.replace(partial, path)  # whole or absent


def single_gbdt_predictions(night: dt.date, window, rows, args) -> dict:
    """The night's single GBDT g on the window and on day D, and its fit's seconds: fitted once
    per night for every design that builds on it, and kept beside the results."""
    path = CACHE / f"{cache_key('single_gbdt_predictions', {'n_bins': 1}, night, args)}.npz"
    if path.exists() and not (args.refresh and path not in _REFITTED):  # --refresh: once a run
        with np.load(path) as kept:
            return {key: kept[key] for key in kept.files}
    X = window.select(FEATURE_COLUMNS).to_numpy()
    start = time.perf_counter()
    g = BinnedCascade(**(profile_params(args.profile) | {"n_bins": 1}), n_jobs=args.n_jobs)
    g.fit(X, window["log_q"].to_numpy(), validation=validation_rows(window))
    single = {
        "train": g.predict(X),
        "day": g.predict(rows.select(FEATURE_COLUMNS).to_numpy()),
        "seconds": np.array(time.perf_counter() - start),
    }
    _write_whole(path, lambda out: np.savez(out, **single))
    _REFITTED.add(path)
    return single


_REFITTED: set[Path] = set()  # g's files this process fitted


def score_design(name: str, design: str, window, rows, single: dict, args) -> dict:
    """A design of ``cascade_designs`` on one night: w20 on day D by gating, and its fit's
    seconds with g's where it builds on g."""
    X = window.select(FEATURE_COLUMNS).to_numpy()
    start = time.perf_counter()
    predictions = DESIGNS[design](
        profile_params(args.profile), X, window["log_q"].to_numpy(), validation_rows(window),
        single.get("train"), rows.select(FEATURE_COLUMNS).to_numpy(), single.get("day"),
        args.n_jobs,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    if design in USES_SINGLE_GBDT:
        seconds += float(single["seconds"])
    measured = rows["throughput"].to_numpy()
    return {
        "setting": name,
        "seconds": round(seconds, 1),
        "w20": {g: metrics.within(np.exp(p), measured, 20) for g, p in predictions.items()},
    }


def score_setting(
    name: str, params: dict, window, rows, profile: str, n_jobs: int | None = None
) -> dict:
    X = window.select(FEATURE_COLUMNS).to_numpy()
    start = time.perf_counter()
    model = BinnedCascade(**(profile_params(profile) | params), n_jobs=n_jobs).fit(
        X, window["log_q"].to_numpy(), validation=validation_rows(window)
    )
    seconds = time.perf_counter() - start
    X_day, measured = rows.select(FEATURE_COLUMNS).to_numpy(), rows["throughput"].to_numpy()
    gatings = ("argmax",) if model.n_bins_ == 1 else GATINGS
    return {
        "setting": name,
        "seconds": round(seconds, 1),
        "w20": {
            g: metrics.within(np.exp(model.set_params(gating=g).predict(X_day)), measured, 20)
            for g in gatings
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nights", type=int, default=10, help="spread evenly from the first "
                        "night to --spread days after it")  # fmt: skip
    parser.add_argument("--spread", type=int, default=29, help="days from the first night to "
                        "the last (2 with --nights 3: three nights in a row)")  # fmt: skip
    parser.add_argument("--profile", default="fast", choices=("paper", "fast", "quick"))
    parser.add_argument("--group", default="structure", choices=sorted(GROUPS))
    parser.add_argument("--jobs", type=int, default=2, help="settings fitted at once")
    parser.add_argument("--n-jobs", type=int, default=None, help="each fit's experts at once and "
                        "a lone fit's threads (default: one; -1: one per core, as "
                        "train_cascade.py's default)")  # fmt: skip
    parser.add_argument("--data", default="data")
    parser.add_argument("--warehouse", default="", help="a simulated warehouse of this scale "
                        "and seed to land the missing days in (default: the report's)")  # fmt: skip
    parser.add_argument("--refresh", action="store_true", help="fit again, ignoring the cache")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.nights <= 30:
        parser.error(f"--nights {args.nights} must be in 1..30")
    if not args.nights - 1 <= args.spread <= 29:
        parser.error(f"--spread {args.spread} must be in {args.nights - 1}..29")
    settings = GROUPS[args.group]
    start = time.perf_counter()
    if args.group == "levers" and not any(
        profile_params(args.profile).get(lever, 1.0) < 1.0 for lever in SPEED_LEVERS
    ):
        parser.error(f"--profile {args.profile} samples no rows or features: the levers are "
                     "the paper profile's (--profile paper)")  # fmt: skip
    source = f"simulator:seed={args.seed},scale={args.scale}"
    if args.warehouse:  # the caller's: checked, never removed
        warehouse = Path(args.warehouse)
        if warehouse.exists():
            with open_warehouse(warehouse, read_only=True) as wh:
                sources = set(wh.read("source_log", columns=["source"])["source"])
            if sources - {source}:
                parser.error(f"--warehouse {warehouse} holds {sorted(sources)}, not {source}")
    else:
        warehouse = Path(args.data) / f"report-{args.scale}-{args.seed}.duckdb"
        if discard_stale_warehouse(warehouse):
            print(f"removed {warehouse}: built by other code; landing it again", file=sys.stderr)
    first_night = SPAN_START + dt.timedelta(days=WINDOW_DAYS)
    nights = [
        first_night + dt.timedelta(days=int(i))
        for i in np.linspace(0, args.spread, args.nights).round().astype(int)
    ]
    landed = set()
    if warehouse.exists():
        with open_warehouse(warehouse, read_only=True) as wh:
            landed = set(wh.partitions("feature_table"))
    days = [SPAN_START + dt.timedelta(days=i) for i in range((nights[-1] - SPAN_START).days + 1)]
    missing = [day for day in days if day not in landed]
    if missing:  # from the first day it lacks: a full-scale day takes minutes to land
        print(f"landing {source} from {missing[0]} to {nights[-1]}", file=sys.stderr)
        materialize_days(missing[0], nights[-1], source=source, warehouse=str(warehouse),
                         log_level="WARNING")  # fmt: skip
    # setting by setting, every night of one before the next: a stopped run has whole rows
    pairs = [(name, night) for name in settings for night in nights]
    results = Parallel(n_jobs=args.jobs)(
        delayed(cached_score)(name, settings[name], night, warehouse, args) for name, night in pairs
    )
    by_night = [(d, r) for (_, d), r in zip(pairs, results, strict=True)]
    per_night = [
        {"ds": night.isoformat(), "results": [r for d, r in by_night if d == night]}
        for night in nights
    ]
    table = {}
    for name in settings:
        for gating in (*GATINGS, "neighbours"):
            series = [
                r["w20"][gating]
                for n in per_night
                for r in n["results"]
                if r["setting"] == name and gating in r["w20"]
            ]
            if series:
                single = [
                    r["w20"]["argmax"]
                    for n in per_night
                    for r in n["results"]
                    if r["setting"] == "single_gbdt"
                ]
                seconds = [
                    r["seconds"] for n in per_night for r in n["results"] if r["setting"] == name
                ]
                gaps = np.subtract(series, single)
                table[f"{name}/{gating}" if not name.startswith("single_gbdt") else name] = {
                    "median_w20": float(np.median(series)),
                    "median_fit_s": float(np.median(seconds)),
                    "median_gap_to_single_gbdt": float(np.median(gaps)),
                    "nights_at_or_above_single_gbdt": int(np.sum(gaps >= 0)),
                }
    result = {
        "scale": args.scale,
        "seed": args.seed,
        "profile": args.profile,
        "group": args.group,
        "nights": [n["ds"] for n in per_night],
        "settings": table,
        "per_night": per_night,
        "seconds": round(time.perf_counter() - start, 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, row in table.items():
            gap = 100 * row["median_gap_to_single_gbdt"]
            above = row["nights_at_or_above_single_gbdt"]
            fit = row["median_fit_s"]
            print(f"{key:34} median w20 {row['median_w20']:.3f}  gap {gap:+.1f} points  "
                  f"at or above on {above}/{len(nights)} nights  fit {fit:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
