"""Static evaluation: grouped splits for data sets without days (public measurements, own logs).

The routing question is "how fast will this job run on a type it has not run on?", so the main
split holds out every (model, hardware type) group in turn and predicts it from the model's runs
elsewhere. History plays the part it plays in production: for a held-out row it is the same
configuration's measured throughput on the other types (the snapshot of all training rows); for a
training row it is computed without the row's own group of the split (its model on its type, say),
so training sees what testing will: no level of its own group, and no fleet ratio learned from it.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable

import numpy as np
import polars as pl

from leap_pipeline.modeling.evaluation import novelty_scores
from leap_pipeline.modeling.lookup_table import build_lookup_table
from leap_pipeline.modeling.selection import select_model
from leap_serving import metrics
from leap_serving.cascade import BinnedCascade, profile_params
from leap_serving.features import FEATURE_COLUMNS, build_features, roofline_log_q
from leap_serving.history import history_features, history_snapshot, with_family
from leap_serving.novelty import NoveltyReference

SPLITS = ("leave-model-hardware-out", "leave-hardware-out", "leave-model-out", "random")
MODELS = (
    "leap", "cascade", "single_gbdt", "single_gbdt_prior", "lookup", "physics", "fleet_ratio",
    "roofline",
)  # fmt: skip
# share of a fold's training groups held out to choose the model it publishes (``leap``)
SELECTION_SHARE = 0.1
_FLEET_RATIO = FEATURE_COLUMNS.index("hist_xfer_fleet_log_q")
_INTENSITY = FEATURE_COLUMNS.index("arch_arithmetic_intensity")
CONFIG = ("model_type", "num_trainers", "batch_size")


def folds(rows: pl.DataFrame, split: str, n_random: int = 5, seed: int = 0) -> list[np.ndarray]:
    """Boolean test masks, each row in exactly one."""
    if split == "random":
        order = np.random.default_rng(seed).permutation(rows.height)
        fold = np.empty(rows.height, dtype=int)
        fold[order] = np.arange(rows.height) % n_random
        return [fold == k for k in range(n_random)]
    if split not in GROUP_KEYS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    group = _groups(rows, GROUP_KEYS[split])
    return [group == g for g in np.unique(group)]


# what a split holds out together; a random split's training rows drop their own type (a row-wise
# exclusion would cost one snapshot per row)
GROUP_KEYS: dict[str, list[str]] = {
    "leave-model-hardware-out": ["model_type", "hardware_type"],
    "leave-hardware-out": ["hardware_type"],
    "leave-model-out": ["model_type"],
}
_TRAINING_GROUP_KEYS = {**GROUP_KEYS, "random": ["hardware_type"]}


def _groups(rows: pl.DataFrame, keys: list[str]) -> np.ndarray:
    return rows.select(pl.struct(keys).rank("dense").alias("g"))["g"].to_numpy()


def exclude_groups(attempts: pl.DataFrame, groups: str) -> pl.DataFrame:
    """Rows without the ``MODEL:TYPE,...`` groups of ``groups`` (each must match some rows)."""
    for group in filter(None, (g.strip() for g in groups.split(","))):
        model_type, _, hardware_type = group.partition(":")
        match = (pl.col("model_type") == model_type) & (pl.col("hardware_type") == hardware_type)
        if not hardware_type or attempts.filter(match).height == 0:
            raise ValueError(f"--exclude: {group!r} is not a MODEL:TYPE group of these rows")
        attempts = attempts.filter(~match)
    return attempts


def _history(
    launches: pl.DataFrame, known: pl.DataFrame, as_of: dt.date, specs: pl.DataFrame
) -> pl.DataFrame:
    snapshot = history_snapshot(known.with_columns(ds=pl.lit(as_of)), as_of)
    launches = launches.with_columns(ds=pl.lit(as_of + dt.timedelta(days=1)))
    return history_features(launches, snapshot, specs)


def fold_features(
    train: pl.DataFrame, test: pl.DataFrame, specs: pl.DataFrame, split: str
) -> tuple[np.ndarray, np.ndarray]:
    """Feature matrices of one fold; each training group's history leaves that group out."""
    as_of = train["ds"].max()
    group = _groups(train, _TRAINING_GROUP_KEYS[split])
    parts, order = [], []
    for g in np.unique(group):
        own = group == g
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
    joined = rows.join(known, on=list(CONFIG), how="left").filter(
        pl.col("hardware_type") != pl.col("target")
    ).with_columns(
        scaled=pl.col("log_q")
        + (attainable_flops(pl.col("target"), specs, pl.col("fp32"), pl.col("intensity"))
           / attainable_flops(pl.col("hardware_type"), specs, pl.col("fp32"),
                              pl.col("intensity"))).log()
    )  # fmt: skip
    means = joined.group_by("_i").agg(pl.col("scaled").mean())
    out = rows.select("_i").join(means, on="_i", how="left").sort("_i")["scaled"].to_numpy()
    return np.exp(out.astype(float))


def selection_rows(train: pl.DataFrame, split: str, seed: int = 0) -> np.ndarray:
    """The training rows a fold holds out to choose the model it publishes, as a night holds
    out its window's last day: ``SELECTION_SHARE`` of the training groups of the split's kind
    (at least one), so they are new to the fitted models in the way the test rows are."""
    group = _groups(train, _TRAINING_GROUP_KEYS[split])
    names = np.unique(group)
    chosen = np.random.default_rng(seed).choice(
        names, size=max(1, round(SELECTION_SHARE * len(names))), replace=False
    )
    return np.isin(group, chosen)


def run_split(
    attempts: pl.DataFrame,
    specs: pl.DataFrame,
    split: str,
    profile: str = "fast",
    log: Callable[[str], None] = lambda _: None,
) -> dict:
    """Out-of-fold predictions of every model, scored, and top-1 routing accuracy.

    Each fold runs a night's choice: the cascade, the single GBDT (a one-bin cascade) and the
    single GBDT on the history's prior train on the fold's training rows minus its selection
    rows (``selection_rows``), and ``leap`` is the model ``select_model`` publishes from them,
    as trained; ``selection`` counts the folds each model won."""
    rows = with_family(attempts.filter(pl.col("throughput") > 0))
    predicted = {m: np.full(rows.height, np.nan) for m in MODELS}
    published: Counter[str] = Counter()
    flags: list = [None] * rows.height
    masks = folds(rows, split)
    for k, test_mask in enumerate(masks, start=1):
        train, test = rows.filter(~test_mask), rows.filter(test_mask)
        if train.height < 50:
            continue  # nothing to learn from
        X_train, X_test = fold_features(train, test, specs, split)
        y = train["throughput"].log().to_numpy()
        held = selection_rows(train, split, seed=k)
        fit = ~held
        min_bin_rows = min(200, max(20, int(fit.sum()) // 30))
        params = {**profile_params(profile), "min_bin_rows": min_bin_rows}
        cascade = BinnedCascade(**params).fit(X_train[fit], y[fit])
        one_bin = BinnedCascade(**(params | {"n_bins": 1})).fit(X_train[fit], y[fit])
        on_prior = BinnedCascade(**(params | {"n_bins": 1, "residual_on_prior": True}))
        on_prior.fit(X_train[fit], y[fit])
        choice = select_model(cascade, one_bin, X_train[held], np.exp(y[held]),
                              challengers={"single_gbdt_prior": on_prior})  # fmt: skip
        predicted["single_gbdt_prior"][test_mask] = np.exp(on_prior.predict(X_test))
        published[choice["published"]] += 1
        predicted["leap"][test_mask] = np.exp(choice["model"].predict(X_test))
        predicted["cascade"][test_mask] = np.exp(cascade.predict(X_test))
        predicted["single_gbdt"][test_mask] = np.exp(one_bin.predict(X_test))
        lookup = build_lookup_table(train, top_model_types=10**6, min_support=1)
        predicted["lookup"][test_mask] = lookup.predict(test).cast(pl.Float64).to_numpy()
        predicted["physics"][test_mask] = physics_predict(train, test, specs, X_test[:, _INTENSITY])
        # the matrix-completion baseline: the history feature on its own
        predicted["fleet_ratio"][test_mask] = np.exp(X_test[:, _FLEET_RATIO])
        # the prior a novel launch is ranked by, and the flag that sends it there
        predicted["roofline"][test_mask] = np.exp(roofline_log_q(X_test))
        reference = NoveltyReference.fit(train["model_type"].to_list(), X_train)
        novelty = reference.assess_rows(test["model_type"].to_list(), X_test)
        for i, flag in zip(np.flatnonzero(test_mask), novelty, strict=True):
            flags[i] = flag
        log(f"{split}: fold {k}/{len(masks)} ({test.height} rows, published "
            f"{choice['published']})")  # fmt: skip
    q = rows["throughput"].to_numpy()
    result = {"n_rows": rows.height, "folds": len(masks), "selection": dict(published)}
    for model, p in predicted.items():
        result[model] = {
            "w10": metrics.within(p, q, 10),
            "w20": metrics.within(p, q, 20),
            "mdape": metrics.mdape(p, q),
            "coverage": metrics.coverage(p),
        }
    result["novelty"] = novelty_scores(flags, predicted["leap"], q)
    # leap ranks as the ranker does: a launch flagged novel by the roofline prior
    flagged = np.array([f is not None and f.novel for f in flags], dtype=bool)
    ranked = predicted | {"leap": np.where(flagged, predicted["roofline"], predicted["leap"])}
    result["top1"] = top1_accuracy(rows, ranked, specs)
    return result


def top1_accuracy(rows: pl.DataFrame, predicted: dict, specs: pl.DataFrame) -> dict:
    """Over configurations measured on at least two types: how often each model's first
    choice is the true best, by throughput (fastest) and by throughput per dollar."""
    cost = dict(zip(specs["hardware_type"], specs["hourly_cost_usd"], strict=True))
    peak = dict(zip(specs["hardware_type"], specs["peak_bf16_tflops"], strict=True))
    frame = rows.select(*CONFIG, "hardware_type", "throughput").with_columns(
        **{m: pl.Series(p) for m, p in predicted.items()},
        peak=pl.col("hardware_type").replace_strict(peak, return_dtype=pl.Float64),
        cost=pl.col("hardware_type").replace_strict(cost, return_dtype=pl.Float64),
    )
    per_type = frame.group_by([*CONFIG, "hardware_type"]).agg(
        pl.col("throughput").log().mean().exp(),
        *(pl.col(m).log().mean().exp() for m in predicted),
        pl.col("peak").first(),
        pl.col("cost").first(),
    )
    configs = per_type.filter(pl.len().over(list(CONFIG)) >= 2)
    out = {"configurations": configs.select(CONFIG).unique().height}
    for goal, divide in (("fastest", False), ("per_cost", True)):

        def score(column: str, divide: bool = divide) -> pl.Expr:
            value = pl.col(column) / pl.col("cost") if divide else pl.col(column)
            return value.fill_nan(None)

        truth = configs.with_columns(_s=score("throughput")).sort("_s", descending=True)
        best = truth.group_by(list(CONFIG)).agg(pl.col("hardware_type").first().alias("best"))
        result = {}
        for name in (*predicted, "peak"):
            ranked = configs.with_columns(_s=score(name)).filter(pl.col("_s").is_not_null())
            chosen = (
                ranked.sort("_s", descending=True)
                .group_by(list(CONFIG))
                .agg(pl.col("hardware_type").first().alias("chosen"))
            )
            matched = best.join(chosen, on=list(CONFIG), how="left")
            label = "highest_fp16_peak" if name == "peak" else name
            result[label] = float((matched["chosen"] == matched["best"]).fill_null(False).mean())
        out[goal] = result
    return out
