"""Predicting what the fleet has never run: every set and split of ``leap crossval``, in one line.

Per set (Lambda, Sia, NeuSight's 52 training rows) and split (``crossval.SPLITS``) it runs
``crossval.run_split`` as ``leap crossval`` does (the same loading, profile and folds) and keeps:

- ``models``: w20 / MdAPE / coverage of every model ``crossval.MODELS`` scores on its
  predictions (``leap``, the single GBDT, the old whole-model ``roofline``, the lookup table,
  and whatever priors and efficiency models crossval offers);
- ``decisions``, per kind (fastest, per dollar): ``leap``'s mean regret, the best rule's and the
  best single candidate's (blends excluded), and whether ``leap`` is at or under the best rule
  and within ``BAR`` x the best candidate; per set, how many split x kind rows pass each.

On NeuSight's rows it adds ``neusight``: the published predictors of ``baselines.csv``
(NeuSight, roofline, Habitat, Li et al.; latencies in ms, turned into samples/s) beside every
crossval model's out-of-fold predictions on the same held-out rows, scored as crossval scores
(relative error of throughput): on every held-out row (``all``), on NeuSight's out-of-distribution
rows (``ood``), and on the out-of-distribution rows every published predictor predicts
(``every_baseline``: 23 rows when all are held out). Rows join on (hardware_type, model_type =
model_name, seq_len = seqlen, batch_size = batch, option), the option read from the launch:
``tpN`` / ``ppN_1`` / ``dpN`` (every four-GPU run has one micro-batch) and empty on one GPU.

    python benchmarks/transfer.py --json --jobs 2                 # every set and split
    python benchmarks/transfer.py --json --sets neusight          # NeuSight's rows alone

Progress goes to stderr; stdout gets one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from leap_pipeline.studies import crossval  # noqa: E402
from leap_pipeline.studies.combinations import BLENDS, RANK_MEANS  # noqa: E402
from leap_pipeline.studies.decisions import KINDS, RULES, TIE  # noqa: E402
from leap_serving.decide import metrics  # noqa: E402

PUBLIC = PROJECT.parent / "shared" / "data" / "public"
EPOCH = PUBLIC / "epoch-ml-hardware" / "ml_hardware.csv"
NEUSIGHT = PUBLIC / "neusight-asplos25"
SETS = {  # name: (crossval --source, --path, --hardware)
    "lambda": ("lambda", PUBLIC / "lambda-dl-benchmark" / "head-aa5addb" / "pytorch", EPOCH),
    "sia": ("sia", PUBLIC / "sia-sosp23-traces" / "traces", EPOCH),
    "neusight": ("contract", NEUSIGHT / "contract", None),
}
BASELINES = NEUSIGHT / "baselines.csv"
# baselines.csv's predictors: our name -> its column prefix
PUBLISHED = {"neusight": "neusight", "roofline": "roofline", "habitat": "habitat",
             "li_et_al": "micro"}  # fmt: skip
KEY = ("hardware_type", "model_type", "seq_len", "batch_size", "option")
BAR = 1.25  # leap's mean regret at most this times the best single candidate's
RULE_SLACK = 0.005  # and at most the best rule's plus this (issue 69's bar)
COMBINED = {*BLENDS, *RANK_MEANS}


def _round(value) -> float | None:
    return None if value is None or not np.isfinite(value) else round(float(value), 5)


# -- scoring ------------------------------------------------------------------------------------


def prediction_scores(predicted: np.ndarray, measured: np.ndarray) -> dict:
    """w20 (a missing prediction is a miss), MdAPE over the rows predicted, coverage, rows."""
    p, q = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if len(q) == 0:
        return {"w20": None, "mdape": None, "coverage": None, "rows": 0}
    return {"w20": _round(metrics.within(p, q, 20)), "mdape": _round(metrics.mdape(p, q)),
            "coverage": _round(metrics.predicted_share(p)), "rows": len(q)}  # fmt: skip


def _mean_regret(result: dict, name: str, kind: str) -> float | None:
    entry = result.get(name)
    return entry["regret"][kind]["mean"] if isinstance(entry, dict) and "regret" in entry else None


def decision_scores(result: dict) -> dict:
    """Per kind, from ``run_split``'s result: leap's mean regret, the best rule's and the best
    single candidate's (every candidate with regrets but the blends and rank means), and
    whether leap is at most the best rule + ``RULE_SLACK`` and within ``BAR`` x the best
    candidate (None where a side has no decision)."""
    out = {}
    for kind in KINDS:
        candidates = {name: _mean_regret(result, name, kind) for name in result
                      if name != "leap" and name not in COMBINED}  # fmt: skip
        rules = {n: r for n, r in candidates.items() if n in RULES and r is not None}
        singles = {n: r for n, r in candidates.items() if r is not None}
        leap = _mean_regret(result, "leap", kind)
        best_rule = min(rules, key=rules.get) if rules else None
        best = min(singles, key=singles.get) if singles else None
        out[kind] = {
            "leap": _round(leap),
            "best_rule": best_rule,
            "best_rule_regret": _round(rules.get(best_rule)),
            "best_candidate": best,
            "best_candidate_regret": _round(singles.get(best)),
            "leap_at_or_under_best_rule": None if leap is None or best_rule is None
            else bool(leap <= rules[best_rule] + RULE_SLACK),
            "leap_within_bar_of_best_candidate": None if leap is None or best is None
            else bool(leap <= BAR * singles[best] + TIE),
        }  # fmt: skip
    return out


def model_scores(result: dict) -> dict:
    """w20 / MdAPE / coverage of every model crossval scores on its predictions."""
    return {name: {key: _round(result[name][key]) for key in ("w20", "mdape", "coverage")}
            for name in crossval.MODELS if name in result}  # fmt: skip


def set_summary(splits: dict) -> dict:
    """Over the set's split x kind rows with a verdict: how many pass each half of the bar."""
    rows = [d for s in splits.values() for d in s.get("decisions", {}).values()]
    under = [r["leap_at_or_under_best_rule"] for r in rows
             if r["leap_at_or_under_best_rule"] is not None]  # fmt: skip
    within = [r["leap_within_bar_of_best_candidate"] for r in rows
              if r["leap_within_bar_of_best_candidate"] is not None]  # fmt: skip
    return {"rows_at_or_under_best_rule": f"{sum(under)}/{len(under)}",
            "rows_within_bar_of_best_candidate": f"{sum(within)}/{len(within)}",
            "share_within_bar": _round(np.mean(within)) if within else None}  # fmt: skip


# -- NeuSight's published predictors ------------------------------------------------------------


def launch_option(rows: pl.DataFrame) -> pl.Expr:
    """NeuSight's ``option`` of a contract row: ``tpN``, ``ppN_1`` (one micro-batch: every
    distributed run has one), ``dpN`` on N devices otherwise, empty on one device."""

    def column(name: str) -> pl.Expr:
        return (pl.col(name) if name in rows.columns else pl.lit(1)).cast(pl.Int64).fill_null(1)

    tp, pp = column("tensor_parallel"), column("pipeline_parallel")
    devices = column("requested_devices_per_host") * column("num_trainers")
    return (
        pl.when(tp > 1).then(pl.format("tp{}", tp))
        .when(pp > 1).then(pl.format("pp{}_1", pp))
        .when(devices > 1).then(pl.format("dp{}", devices))
        .otherwise(pl.lit(""))
    )  # fmt: skip


def read_baselines(path: Path = BASELINES) -> pl.DataFrame:
    """baselines.csv keyed as the contract rows are (``KEY``): the measured throughput and each
    published predictor's (samples/s = batch / latency), its ``ood`` flag, and
    ``every_baseline`` (out of distribution and predicted by all of ``PUBLISHED``)."""
    raw = pl.read_csv(path)
    per_second = {name: pl.col("batch") / (pl.col(f"{prefix}_all_e2e_latency") / 1000.0)
                  for name, prefix in PUBLISHED.items()}  # fmt: skip
    return raw.select(
        pl.col("hardware_type"),
        model_type=pl.col("model_name"),
        seq_len=pl.col("seqlen").cast(pl.Int64),
        batch_size=pl.col("batch").cast(pl.Int64),
        option=pl.col("option").fill_null(""),
        measured=pl.col("batch") / (pl.col("label_all_e2e_latency") / 1000.0),
        ood=pl.col("OOD"),
        every_baseline=pl.col("OOD")
        & pl.all_horizontal(pl.col(f"{p}_all_e2e_latency").is_not_null()
                            for p in PUBLISHED.values()),
        **per_second,
    )  # fmt: skip


def join_baselines(rows: pl.DataFrame, baselines: pl.DataFrame) -> pl.DataFrame:
    """``baselines`` in ``rows``' order, one per row; fails unless every row finds exactly one
    and its measured throughput is the row's (the join found the same measurement)."""
    if baselines.select(KEY).is_duplicated().any():
        raise ValueError(f"baselines.csv: {KEY} does not identify a row")
    keyed = rows.select(
        "hardware_type", "model_type", pl.col("seq_len").cast(pl.Int64),
        pl.col("batch_size").cast(pl.Int64), "throughput", option=launch_option(rows),
    )  # fmt: skip
    joined = keyed.join(baselines, on=list(KEY), how="left", maintain_order="left")
    missing = joined.filter(pl.col("measured").is_null())
    if missing.height:
        raise ValueError(f"{missing.height} rows have no baseline row, e.g. "
                         f"{missing.select(KEY).row(0)}")  # fmt: skip
    off = (joined["measured"] / joined["throughput"] - 1).abs().max()
    if off > 1e-6:
        raise ValueError(f"a joined baseline row measures another throughput (off by {off:.2e})")
    return joined


def neusight_scores(out_of_fold: dict, baselines: pl.DataFrame) -> dict:
    """Per subset of the held-out rows (all, ood, every_baseline): rows, each crossval model's
    scores on its out-of-fold predictions and each published predictor's on the same rows."""
    rows, held = out_of_fold["rows"], np.asarray(out_of_fold["held_out"], dtype=bool)
    joined = join_baselines(rows, baselines)
    q = rows["throughput"].to_numpy().astype(float)
    subsets = {"all": held, "ood": held & joined["ood"].to_numpy(),
               "every_baseline": held & joined["every_baseline"].to_numpy()}  # fmt: skip
    out = {}
    for subset, mask in subsets.items():
        out[subset] = {
            "rows": int(mask.sum()),
            "models": {name: prediction_scores(np.asarray(p, dtype=float)[mask], q[mask])
                       for name, p in out_of_fold["predicted"].items()},
            "published": {name: prediction_scores(joined[name].cast(pl.Float64)
                                                  .fill_null(np.nan).to_numpy()[mask], q[mask])
                          for name in PUBLISHED},
        }  # fmt: skip
    return out


# -- running ------------------------------------------------------------------------------------


def load_set(name: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Attempts and specs as ``leap crossval --source S --path P --hardware H`` reads them."""
    from leap_pipeline.data.static_sets import read_static_set

    source, path, hardware = SETS[name]
    read = read_static_set(source, path, hardware)
    attempts, specs = read.attempts, read.specs
    if name == "neusight":  # switchxl4 has no layer list in the contract: its catalog entry
        attempts = with_catalog_definitions(attempts)
    return attempts, specs


def with_catalog_definitions(attempts: pl.DataFrame) -> pl.DataFrame:
    """NeuSight's rows without a ``model_definition`` name their model's catalog entry
    (``model_catalog.NEUSIGHT_MODELS``), as any user's import may: the vocabulary could not
    state switchxl4 (cross-attention, a wider attention, experts) when the contract was
    written."""
    from leap_serving.launch.model_catalog import NEUSIGHT_MODELS

    named = pl.col("model_type").replace_strict(
        {m: json.dumps({"catalog": c}) for m, c in NEUSIGHT_MODELS.items()}, default=None,
        return_dtype=pl.String,
    )  # fmt: skip
    return attempts.with_columns(model_definition=pl.coalesce("model_definition", named))


def score_split(result: dict, baselines: pl.DataFrame | None = None) -> dict:
    """One split's entry of the JSON line from ``run_split``'s result."""
    out = {"rows": result["n_rows"], "scored_rows": result["scored_rows"],
           "folds": result["folds"], "models": model_scores(result),
           "decisions": decision_scores(result),
           # what each fold published per kind: the ranking, and who placed what it could not
           "published": {kind: {"ranking": result["selection"][kind],
                                "fallback": result["selection"]["fallback"][kind]}
                         for kind in KINDS}}  # fmt: skip
    if baselines is not None:
        out["neusight"] = neusight_scores(result["out_of_fold"], baselines)
    return out


def run(sets: list[str], splits: list[str], profile: str, jobs: int, log) -> dict:
    started = time.monotonic()
    out: dict = {"profile": profile, "jobs": jobs, "models": list(crossval.MODELS),
                 "candidates": list(crossval.CANDIDATES), "sets": {}}  # fmt: skip
    for name in sets:
        attempts, specs = load_set(name)
        baselines = read_baselines() if name == "neusight" else None
        entry: dict = {"splits": {}}
        set_started = time.monotonic()
        for split in splits:
            log(f"{name} {split}: {attempts.height:,} rows ({time.monotonic() - started:.0f} s)")
            split_started = time.monotonic()
            try:
                result = crossval.run_split(attempts, specs, split, profile=profile, n_jobs=jobs,
                                            log=lambda line, n=name: log(f"{n} {line}"),
                                            out_of_fold=baselines is not None)  # fmt: skip
            except ValueError as exc:  # a split these rows cannot make; the others still run
                log(f"{name} {split}: skipped: {exc}")
                entry["splits"][split] = {"skipped": str(exc)}
                continue
            entry["splits"][split] = score_split(result, baselines)
            entry["splits"][split]["seconds"] = round(time.monotonic() - split_started, 1)
        entry["summary"] = set_summary(entry["splits"])
        entry["seconds"] = round(time.monotonic() - set_started, 1)
        out["sets"][name] = entry
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line on stdout (what "
                        "it prints in any case)")  # fmt: skip
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated, of "
                        f"{', '.join(SETS)}")  # fmt: skip
    parser.add_argument(
        "--splits",
        default=",".join(crossval.SPLITS),
        help=f"comma-separated, of {', '.join(crossval.SPLITS)}",
    )
    parser.add_argument("--jobs", type=int, default=-1, help="folds fitted at once (joblib; "
                        "-1: one per core), as leap crossval's")  # fmt: skip
    parser.add_argument("--profile", choices=("quick", "fast", "paper"), default="fast")
    args = parser.parse_args(argv)
    sets, splits = args.sets.split(","), args.splits.split(",")
    for value, known, flag in ((sets, SETS, "--sets"), (splits, crossval.SPLITS, "--splits")):
        unknown = [v for v in value if v not in known]
        if unknown:
            parser.error(f"{flag}: {unknown} not among {list(known)}")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    print(json.dumps(run(sets, splits, args.profile, args.jobs, log)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
