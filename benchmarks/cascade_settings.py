"""Which cascade settings earn their place: a backtest of each against the single GBDT.

For each night D of the backtest (the report's fleet and nights), every setting below is trained
on the 30 days before D at one profile (early-stopped on the window's last day, as a night trains)
and scored on D under each gating; the single GBDT (a one-bin cascade) beside them. Gating is a
prediction-time choice, so the three gatings of a setting share one fit.

Two groups of settings (``--group``):

- ``structure`` (default): the paper's cascade (13 bins, EM scored on the rows each expert trained
  on, experts on their own bin); out-of-fold EM; experts that also train on their neighbours'
  rows (weight 0.5); both; and the number of bins K at 6 and 26.
- ``levers``: the cascade the night fits (the shipped K and gating) and the speed levers of its
  profile, each turned off alone: EM on every row
  instead of 20% (``em_sample``), the classifier on every row of each bin instead of 15%
  (``classifier_sample``), each tree on every feature instead of half (``feature_fraction``, for
  the cascade and for the single GBDT). Each setting's fit time is reported beside its w20, so
  the table says what each lever buys and what it costs.

Each (night, setting) result is kept in ``data/cascade-settings/`` under a digest of the model
code, so a long run (the levers at scale 1.0 take about 45 minutes a night on 2 cores) that is
stopped resumes where it was; ``--refresh`` fits again.

Run: python benchmarks/cascade_settings.py [--scale 0.05] [--nights 10] [--spread 29]
     [--profile fast] [--group structure|levers] [--warehouse PATH] [--jobs 2] [--n-jobs N]
     [--json]
e.g. python benchmarks/cascade_settings.py --scale 1.0 --profile paper --group levers \
     --nights 3 --spread 2 --jobs 1 --n-jobs -1 --warehouse data/bench-1.0.duckdb
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
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

PROJECT = Path(__file__).resolve().parents[1]
CACHE = PROJECT / "data" / "cascade-settings"
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
}


def code_version() -> str:
    """A digest of the model code a result comes from: a cached result of other code is not
    reused."""
    digest = hashlib.sha256()
    for path in sorted((PROJECT / "leap_serving" / "model").glob("*.py")):
        digest.update(path.read_bytes())
    digest.update((PROJECT / "leap_serving" / "launch" / "features.py").read_bytes())
    return digest.hexdigest()[:12]


def cached_score(name: str, params: dict, night: dt.date, warehouse: Path, args) -> dict:
    """``score_setting`` for one night, read from the cache when this code already ran it."""
    key = f"{args.scale}-{args.seed}-{args.profile}-j{args.n_jobs}-{night}-{name}-{code_version()}"
    path = CACHE / f"{key}.json"
    if path.exists() and not args.refresh:
        return json.loads(path.read_text())
    with open_warehouse(warehouse, read_only=True) as wh:
        window = wh.read("feature_table", *training_window(night))
        rows = wh.read("feature_table", night, night)
    result = score_setting(name, params, window, rows, args.profile, args.n_jobs)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result | {"params": params}))
    print(f"{night} {name}: {result['seconds']} s, w20 {result['w20']}", file=sys.stderr)
    return result


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
    parser.add_argument("--nights", type=int, default=10, help="spread evenly over --spread days")
    parser.add_argument("--spread", type=int, default=29, help="days from the first night to "
                        "the last (2 with --nights 3: three nights in a row)")  # fmt: skip
    parser.add_argument("--profile", default="fast", choices=("paper", "fast", "quick"))
    parser.add_argument("--group", default="structure", choices=sorted(GROUPS))
    parser.add_argument("--jobs", type=int, default=2, help="settings fitted at once")
    parser.add_argument("--n-jobs", type=int, default=None, help="each fit's experts at once and "
                        "a lone fit's threads (default: one; -1: one per core, as "
                        "train_cascade.py times a night)")  # fmt: skip
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
    warehouse = Path(args.warehouse or Path(args.data) / f"report-{args.scale}-{args.seed}.duckdb")
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
        source = f"simulator:seed={args.seed},scale={args.scale}"
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
        for gating in GATINGS:
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
