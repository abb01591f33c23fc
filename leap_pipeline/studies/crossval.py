"""Static evaluation: grouped splits for data sets without days (public measurements, own logs).

Each fold (``splits.folds``) runs a night's choice on its training rows. Their history features
are cross-fitted over the fold's inner chunks (``splits.inner_chunks``): a chunk's history comes
from the other chunks, as a held-out row's comes from the training rows, so training and test
rows are built the same way. The selection then compares every candidate on validation folds
of the training rows (``splits.validation_folds``), each held out as the split holds out its
test and built as a fold is: its features from the rows outside it, every model refitted
without it (grouped cross-validation inside the fold). The GBDTs are compared by w20, and per
decision kind every throughput predictor (the blend of the two GBDTs among them,
``combinations``) and rule by its decisions' regret (``decisions``), a
rule standing unless a candidate is lower than it on more validation model types than
higher (``choose_ranking``). ``leap`` is what it
publishes: the GBDT for predictions, the candidate it chose per kind for rankings.

Validation folds built this way are what made the choice track the test folds: on chunks
whose features were built once for the whole fold (an inner model's training rows carrying
history from the chunk it was validated on), the single GBDT looked worse than the rule on
Sia's partial history while it was 15x better on the test folds.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable

import joblib
import numpy as np
import polars as pl

from leap_pipeline.modeling.lookup_table import build_lookup_table
from leap_pipeline.studies.combinations import GBDT_BLEND, GBDT_PAIR, geometric_blend
from leap_pipeline.studies.decisions import (
    CONFIG,
    KINDS,
    LAST,
    RULES,
    TIE,
    cells,
    decision_regrets,
    fallback_regrets,
    summarize,
)
from leap_pipeline.studies.kernel_prior import HOLDS_TYPES_OUT, held_devices, kernel_log_q
from leap_pipeline.studies.selection import (
    INCUMBENT,
    choose_fallback,
    choose_ranking,
    placed_regrets,
    with_published,
)
from leap_pipeline.studies.splits import (
    SPLITS,
    exclude_groups,
    folds,
    inner_chunks,
    validation_folds,
)
from leap_serving.decide import metrics
from leap_serving.launch import features
from leap_serving.launch.families import with_family
from leap_serving.launch.features import FEATURE_COLUMNS, build_features, roofline_log_q
from leap_serving.launch.history import history_features
from leap_serving.launch.snapshot import history_snapshot
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.intervals import LEVEL, ConformalIntervals, interval_metric_name
from leap_serving.model.profiles import profile_params
from leap_serving.model.small_data import MIN_FIT_ROWS, fit_to_rows

__all__ = ["INCUMBENT", "SPLITS", "choose_ranking", "exclude_groups", "folds", "run_split"]

# the efficiency GBDT learns ln(measured / the per-layer cost prior), bounded by the roofline
EFFICIENCY_GBDT = "efficiency_gbdt"
GBDTS = (*GBDT_PAIR, EFFICIENCY_GBDT)
# the kernel-composed prior (``kernel_prior``) is offered as a ranking and scored; a GBDT over
# it was tried and is not fitted (docs/transfer.md: the hardware learned from kernels)
PRIORS = ("physics", "fleet_ratio", "roofline", "cost_prior", "kernel_prior")
# throughput predictors, offered to the selection; the blend of the two GBDTs too, as where
# both lead the rule the validation folds seldom say which leads more (docs/decisions.md)
PREDICTORS = (*GBDTS, *PRIORS, GBDT_BLEND)
CANDIDATES = (*PREDICTORS, *RULES)  # what the selection may publish for a ranking
# who may place the types a published ranking cannot score: nobody (they rank last), or a
# predictor that estimates a type from its specs alone
FALLBACKS = (LAST, *GBDTS, GBDT_BLEND, "cost_prior")
MODELS = ("leap", *GBDTS, GBDT_BLEND, "lookup", *PRIORS)  # scored on their predictions
SCORED = (*MODELS, *RULES)  # every row of a split's table
_FLEET_RATIO = FEATURE_COLUMNS.index("hist_xfer_fleet_log_q")
_INTENSITY = FEATURE_COLUMNS.index("arch_arithmetic_intensity")
# a set this small is still scored on every split: its folds' GBDTs scale to their rows
MIN_ROWS = 50


def _history(
    launches: pl.DataFrame, known: pl.DataFrame, as_of: dt.date, specs: pl.DataFrame
) -> pl.DataFrame:
    snapshot = history_snapshot(known.with_columns(ds=pl.lit(as_of)), as_of)
    launches = launches.with_columns(ds=pl.lit(as_of + dt.timedelta(days=1)))
    return history_features(launches, snapshot, specs)


def fold_features(
    train: pl.DataFrame, test: pl.DataFrame, specs: pl.DataFrame, chunk: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Feature matrices of one fold: a training row's history comes from the training rows
    outside its chunk, a test row's from every training row."""
    as_of = train["ds"].max()
    parts, order = [], []
    for c in np.unique(chunk):
        own = chunk == c
        parts.append(_history(train.filter(own), train.filter(~own), as_of, specs))
        order.append(np.flatnonzero(own))
    history = pl.concat(parts).with_columns(_i=pl.Series(np.concatenate(order))).sort("_i")
    X_train = build_features(train, specs, history.drop("_i")).select(FEATURE_COLUMNS).to_numpy()
    X_test = build_features(test, specs, _history(test, train, as_of, specs)).to_numpy()
    return X_train, X_test


def attainable_flops(
    hardware_type: pl.Expr, specs: pl.DataFrame, fp32: pl.Expr, intensity: pl.Expr
) -> pl.Expr:
    """The roofline's attainable FLOP/s of a job on a type: the peak at the job's precision (fp32
    peak for fp32 jobs, the 16-bit peak otherwise or when unknown), or its arithmetic intensity
    times the memory bandwidth where that is lower (a memory-bound job). An unknown intensity
    leaves the peak."""

    def spec(column: str) -> pl.Expr:
        table = dict(zip(specs["hardware_type"], specs[column].cast(pl.Float64), strict=True))
        return hardware_type.replace_strict(table, return_dtype=pl.Float64)

    peak = pl.when(fp32).then(spec("peak_fp32_tflops")).otherwise(spec("peak_bf16_tflops")) * 1e12
    memory = intensity * spec("memory_bandwidth_gbps") * 1e9
    return pl.when(intensity > 0).then(pl.min_horizontal(peak, memory)).otherwise(peak)


def physics_predict(
    train: pl.DataFrame,
    test: pl.DataFrame,
    specs: pl.DataFrame,
    intensity: np.ndarray | None = None,
) -> np.ndarray:
    """The same configuration's throughput on its other types, scaled by the roofline's
    attainable FLOP/s of the job on each (``attainable_flops``, with the job's arithmetic
    intensity in FLOP per byte where known), the geometric mean over the other types; NaN where
    no other type ran it."""
    known = train.group_by([*CONFIG, "hardware_type"]).agg(log_q=pl.col("throughput").log().mean())
    precision = test["precision"] if "precision" in test.columns else [None] * test.height
    rows = (
        test.select(*CONFIG, target="hardware_type")
        .with_row_index("_i")
        .with_columns(
            fp32=pl.Series(precision, dtype=pl.String).eq("fp32").fill_null(False),
            intensity=pl.Series(
                np.full(test.height, np.nan) if intensity is None else intensity, dtype=pl.Float64
            ).fill_nan(None),
        )
    )
    joined = (
        rows.join(known, on=list(CONFIG), how="left")
        .filter(pl.col("hardware_type") != pl.col("target"))
        .with_columns(
            scaled=pl.col("log_q")
            + (
                attainable_flops(pl.col("target"), specs, pl.col("fp32"), pl.col("intensity"))
                / attainable_flops(
                    pl.col("hardware_type"), specs, pl.col("fp32"), pl.col("intensity")
                )
            ).log()
        )
    )
    means = joined.group_by("_i").agg(pl.col("scaled").mean())
    out = rows.select("_i").join(means, on="_i", how="left").sort("_i")["scaled"].to_numpy()
    return np.exp(out.astype(float))


def prior_predictions(
    known: pl.DataFrame,
    rows: pl.DataFrame,
    X: np.ndarray,
    specs: pl.DataFrame,
    excluded: frozenset[str] = frozenset(),
) -> dict[str, np.ndarray]:
    """Throughput by the predictors that fit nothing on job-level rows: physics
    (``physics_predict``), the fleet ratio (the ``hist_xfer_fleet_log_q`` feature alone, the
    matrix-completion baseline), the roofline prior (``roofline_log_q``: specs and architecture,
    no measurement), the per-layer cost model's (``cost_log_q``: the same inputs, timed layer
    class by layer class) and the kernel-composed one (``kernel_prior.kernel_log_q``, its
    kernel model fitted without the measured GPUs ``excluded``)."""
    return {
        "physics": physics_predict(known, rows, specs, X[:, _INTENSITY]),
        "fleet_ratio": np.exp(X[:, _FLEET_RATIO]),
        "roofline": np.exp(roofline_log_q(X)),
        "cost_prior": np.exp(features.cost_log_q(X)),
        "kernel_prior": np.exp(kernel_log_q(X, rows, specs, excluded)),
    }


def gbdt_predict(
    name: str, profile: str, X: np.ndarray, y: np.ndarray, X_new: np.ndarray
) -> np.ndarray:
    """Throughput of ``X_new`` by the GBDT ``name`` fitted on ``X``, ``y``: a one-bin cascade at
    the profile's settings, scaled down where the fit has fewer rows than they need
    (``small_data.fit_to_rows``: a small set's fold is scored, never skipped). NaN (no estimate,
    the candidate ranks last) where it has fewer than ``MIN_FIT_ROWS``."""
    if len(y) < MIN_FIT_ROWS:
        return np.full(len(X_new), np.nan)
    params = fit_to_rows(profile_params(profile) | {"n_bins": 1}, len(y))
    model = BinnedCascade(
        **params,
        target={
            "single_gbdt_prior": "residual",
            EFFICIENCY_GBDT: "efficiency",
        }.get(name, "log_q"),
    ).fit(X, y)
    return np.exp(model.predict(X_new))


def challenger_order(gbdt: str, w20: dict[str, float], kind: str) -> list[str]:
    """The order ``choose_ranking`` tests challengers in, fixed before any regret is seen: the
    fold's GBDT (the best validation w20), the blend of the two GBDTs, the other GBDTs by w20,
    the priors, the other rule."""
    others = sorted((n for n in GBDTS if n != gbdt), key=lambda n: -w20[n])
    rules = [r for r in RULES if r != INCUMBENT[kind]]
    return [gbdt, GBDT_BLEND, *others, *PRIORS, *rules]


def _inner_selection(
    train: pl.DataFrame,
    split: str,
    specs: pl.DataFrame,
    profile: str,
    seed: int,
    held_types: frozenset[str] = frozenset(),
) -> dict:
    """Every candidate scored on validation folds of the fold's training rows, each held out as
    the split holds out its test and built as ``run_fold`` builds one (``validation_folds``:
    features from the rows outside it alone, every model refitted without it): w20 of each
    GBDT, mean regret of each candidate per decision kind; the GBDT and the candidate per kind
    it would publish."""
    predicted = {name: np.full(train.height, np.nan) for name in PREDICTORS}
    held_features = np.full((train.height, len(FEATURE_COLUMNS)), np.nan)
    validated = np.zeros(train.height, dtype=bool)
    regrets: dict = {c: {f: {k: [] for k in KINDS} for f in FALLBACKS} for c in CANDIDATES}
    covered: dict = {c: {k: [] for k in KINDS} for c in CANDIDATES}
    models = []
    # no validation fold (a fold trained on one model or type, or on models measured on one
    # type each): the plain GBDT and the rules stand
    for held in validation_folds(train, split, seed=seed):
        rest, out = train.filter(~held), train.filter(held)
        X_rest, X_out = fold_features(rest, out, specs, inner_chunks(rest, split, seed=seed))
        y_rest = rest["throughput"].log().to_numpy()
        held_features[held] = X_out
        validated |= held
        for name in GBDTS:
            predicted[name][held] = gbdt_predict(name, profile, X_rest, y_rest, X_out)
        # without the kernels of the outer fold's held types and of this validation fold's
        excluded = held_devices(split, held_types | set(out["hardware_type"]))
        for name, p in prior_predictions(rest, out, X_out, specs, excluded).items():
            predicted[name][held] = p
        predicted[GBDT_BLEND][held] = geometric_blend(
            {n: predicted[n][held] for n in GBDT_PAIR}, GBDT_PAIR
        )
        table = cells(
            train, specs, held, {n: np.where(held, p, np.nan) for n, p in predicted.items()}
        )
        placed, coverage = placed_regrets(table, list(PREDICTORS), CANDIDATES, FALLBACKS)
        models.append(decision_regrets(table, [])[1])
        for name, by_fallback in placed.items():
            for kind in KINDS:
                covered[name][kind].append(coverage[name][kind])
                for fallback, by_kind in by_fallback.items():
                    regrets[name][fallback][kind].append(by_kind[kind])
    q = train["throughput"].to_numpy()
    clusters = np.concatenate(models or [np.empty(0, dtype=object)])
    w20 = {
        name: metrics.within(predicted[name][validated], q[validated], 20)
        if validated.any()
        else 0.0
        for name in GBDTS
    }

    def pool(arrays: list, dtype: type = float) -> np.ndarray:
        return np.concatenate(arrays or [np.empty(0, dtype=dtype)])

    # per candidate and kind: who places the types it cannot score, and its regrets so placed
    fallback = {
        c: {
            k: choose_fallback(
                {f: pool(regrets[c][f][k]) for f in FALLBACKS}, pool(covered[c][k], bool)
            )
            for k in KINDS
        }
        for c in CANDIDATES
    }
    pooled = {c: {k: pool(regrets[c][fallback[c][k]][k]) for k in KINDS} for c in CANDIDATES}
    gbdt = max(GBDTS, key=lambda n: w20[n])  # ties: the plain GBDT, listed first
    order = {kind: challenger_order(gbdt, w20, kind) for kind in KINDS}
    ranking = {kind: choose_ranking(pooled, kind, clusters, order[kind]) for kind in KINDS}
    return {
        "gbdt": gbdt,
        "ranking": ranking,
        "fallback": {kind: fallback[ranking[kind]][kind] for kind in KINDS},
        # every candidate's, and the order challengers were tested in (selection_study.py)
        "fallbacks": fallback,
        "order": order,
        "w20": w20,
        # what the choice was made on: each candidate's regret per validation decision (placed
        # by its fallback), and each decision's model type (benchmarks/selection_study.py)
        "validation": pooled,
        "clusters": clusters,
        # its predictions of each validation fold by a model that never saw the fold, and the
        # fold's features (NaN on rows no fold held): what the fold's intervals are calibrated
        # on (``fold_intervals``)
        "held_out_predictions": predicted[gbdt],
        "held_out_features": held_features,
        "validation_predictions": predicted,  # every predictor's, as ``predicted[gbdt]``
    }


def fold_intervals(
    train: pl.DataFrame,
    held_out_features: np.ndarray,
    held_out: np.ndarray,
    test: pl.DataFrame,
    X_test: np.ndarray,
    predicted: np.ndarray,
) -> dict[str, np.ndarray] | None:
    """The published GBDT's conformal intervals (``leap_serving.model.intervals``, as a night ships
    them) calibrated on the fold's validation folds (each row's prediction and features as its
    validation fold built them; NaN on rows none held), and how they do on the test rows:
    inside or not, and the relative width. The validation folds are held out as the split
    holds out its test rows, so these intervals are calibrated for the split's own shift; the
    random split's are the in-distribution ones. None when nothing was held out."""
    if not np.isfinite(held_out).any():
        return None
    measured = train["throughput"].log().to_numpy()
    intervals = ConformalIntervals.calibrate(
        np.log(held_out), measured, train["hardware_type"].to_numpy(), held_out_features
    )
    low, high = intervals.bounds(np.log(predicted), test["hardware_type"].to_numpy(), X_test)
    q = test["throughput"].to_numpy()
    return {"inside": (q >= low) & (q <= high), "width": (high - low) / predicted}


def run_fold(
    rows: pl.DataFrame,
    specs: pl.DataFrame,
    split: str,
    test_mask: np.ndarray,
    profile: str,
    seed: int,
) -> dict:
    """One fold: features, the selection on validation folds of the training rows, every model
    fitted on all training rows, predictions of the test rows, and the regret of each
    candidate's decisions."""
    train, test = rows.filter(~test_mask), rows.filter(test_mask)
    chunk = inner_chunks(train, split, seed=seed)
    X_train, X_test = fold_features(train, test, specs, chunk)
    y = train["throughput"].log().to_numpy()
    held_types = frozenset(test["hardware_type"]) if split in HOLDS_TYPES_OUT else frozenset()
    choice = _inner_selection(train, split, specs, profile, seed, held_types)
    excluded = held_devices(split, held_types)
    predicted = {
        name: gbdt_predict(name, profile, X_train, y, X_test) for name in GBDTS
    } | prior_predictions(train, test, X_test, specs, excluded)
    predicted[GBDT_BLEND] = geometric_blend(predicted, GBDT_PAIR)
    lookup = build_lookup_table(train, top_model_types=10**6, min_support=1)
    predicted["lookup"] = lookup.predict(test).cast(pl.Float64).to_numpy()
    predicted["leap"] = predicted[choice["gbdt"]]
    intervals = fold_intervals(
        train,
        choice.pop("held_out_features"),
        choice.pop("held_out_predictions"),
        test,
        X_test,
        predicted["leap"],
    )
    full = {}
    for name in PREDICTORS:
        full[name] = np.full(rows.height, np.nan)
        full[name][test_mask] = predicted[name]
    table = cells(rows, specs, test_mask, full)
    regrets = with_published(table, list(PREDICTORS), choice)
    # each candidate as it would have been published: placed by its own fallback
    placed = {
        name: {
            kind: regrets[name][kind]
            if by_kind[kind] == LAST
            else fallback_regrets(table, list(PREDICTORS), name, by_kind[kind])[kind]
            for kind in KINDS
        }
        for name, by_kind in choice.get("fallbacks", {}).items()
    }
    return {
        "test": np.flatnonzero(test_mask),
        "predicted": predicted,
        "regrets": regrets,
        "placed": placed,
        "choice": choice,
        "intervals": intervals,
    }


def run_split(
    attempts: pl.DataFrame,
    specs: pl.DataFrame,
    split: str,
    profile: str = "fast",
    n_jobs: int = -1,
    log: Callable[[str], None] = lambda _: None,
    out_of_fold: bool = False,
) -> dict:
    """Out-of-fold predictions and decisions of every model and rule, scored.

    Folds run in parallel (joblib's processes; ``n_jobs`` as joblib counts them). Returns, per
    model and rule, w10/w20/MdAPE/coverage of its predictions (None for rules), and per decision
    kind top-1 and regret (mean, p90, share within 5%); ``selection`` says what ``leap``
    published in each fold and how often that was the best candidate on the fold's test rows."""
    rows = with_family(attempts.filter(pl.col("throughput") > 0))
    if rows.height < MIN_ROWS:
        raise ValueError(
            f"{rows.height} measured rows are fewer than the {MIN_ROWS} a cross-validation needs"
        )
    masks = folds(rows, split)
    if not masks:
        raise ValueError(f"split={split!r} makes no fold here")
    predicted = {m: np.full(rows.height, np.nan) for m in MODELS}
    scored = np.zeros(rows.height, dtype=bool)
    inside, width = np.zeros(rows.height, dtype=bool), np.full(rows.height, np.nan)
    regrets: dict[str, dict[str, list]] = {c: {k: [] for k in KINDS} for c in (*CANDIDATES, "leap")}
    published: dict[str, Counter] = {"gbdt": Counter(), **{k: Counter() for k in KINDS}}
    placed_by: dict[str, Counter] = {k: Counter() for k in KINDS}
    best_on_test = Counter()
    started = time.monotonic()
    jobs = (
        joblib.delayed(run_fold)(rows, specs, split, mask, profile, seed)
        for seed, mask in enumerate(masks, start=1)
    )
    parallel = joblib.Parallel(n_jobs=n_jobs, return_as="generator_unordered")
    for done, fold in enumerate(parallel(jobs), start=1):
        test = fold["test"]
        scored[test] = True
        for name, p in fold["predicted"].items():
            predicted[name][test] = p
        if fold["intervals"] is not None:
            inside[test], width[test] = fold["intervals"]["inside"], fold["intervals"]["width"]
        choice = fold["choice"]
        published["gbdt"][choice["gbdt"]] += 1
        for kind in KINDS:
            published[kind][choice["ranking"][kind]] += 1
            placed_by[kind][choice["fallback"][kind]] += 1
            means = {
                c: float(np.mean(r[kind]))
                for c, r in fold["regrets"].items()
                if len(r[kind]) and c != "leap"
            }
            if means:
                leap = float(np.mean(fold["regrets"]["leap"][kind]))
                best_on_test[kind] += leap <= min(means.values()) + TIE
        for name, by_kind in fold["regrets"].items():
            for kind, r in by_kind.items():
                regrets[name][kind].append(r)
        log(
            f"{split}: fold {done}/{len(masks)} done ({len(test):,} test rows, "
            f"{time.monotonic() - started:.0f} s)"
        )
    q = rows["throughput"].to_numpy()[scored]
    result: dict = {"n_rows": rows.height, "scored_rows": int(scored.sum()), "folds": len(masks)}
    for name in SCORED:
        entry: dict = {"w10": None, "w20": None, "mdape": None, "coverage": None}
        if name in predicted:
            p = predicted[name][scored]
            mdape = metrics.mdape(p, q)
            entry = {
                "w10": metrics.within(p, q, 10),
                "w20": metrics.within(p, q, 20),
                "mdape": float(mdape) if np.isfinite(mdape) else None,  # none predicted
                "coverage": metrics.predicted_share(p),
            }
        if name in regrets:
            summary = {
                k: summarize(np.concatenate(regrets[name][k] or [np.empty(0)])) for k in KINDS
            }
            entry["top1"] = {k: summary[k].pop("top1") for k in KINDS}
            entry["regret"] = summary
        result[name] = entry
    # leap's intervals on the rows of folds that could calibrate them
    calibrated = scored & np.isfinite(width)
    result["leap"][interval_metric_name(LEVEL)] = (
        float(inside[calibrated].mean()) if calibrated.any() else None
    )
    result["leap"]["interval_width_median"] = (
        float(np.median(width[calibrated])) if calibrated.any() else None
    )
    result["leap"]["interval_rows"] = int(calibrated.sum())
    result["selection"] = {
        "gbdt": dict(published["gbdt"]),
        **{kind: dict(published[kind]) for kind in KINDS},
        # who placed the types the published ranking could not score (``LAST``: nobody)
        "fallback": {kind: dict(placed_by[kind]) for kind in KINDS},
        "best_on_test_fold": {kind: best_on_test[kind] / max(1, len(masks)) for kind in KINDS},
    }
    if out_of_fold:  # the rows, and each model's prediction of a row from the fold holding it out
        result["out_of_fold"] = {"rows": rows, "held_out": scored, "predicted": predicted}
    return result
