"""Next-day evaluation (paper section 3.1): train on days D-30 .. D-1, score day D.

Pure functions over feature-table frames. Every model is scored on the same attempts with the
paper's pooled metrics; breakdowns by hardware type, model-type frequency band and cold start; the
lookup table against the cascade on the attempts the table covers (Table 1); and, when the fleet
is simulated, the oracle's true medians scored the same way (the noise ceiling).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from leap_pipeline.modeling.lookup_table import HEAD_MODEL_TYPES
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.intervals import (
    HISTORY_CLASSES,
    history_class,
    interval_coverage,
    interval_metric_name,
)
from leap_serving.model.novelty import Novelty

if TYPE_CHECKING:  # the fits' stack (scikit-learn, Numba): imported where models are scored, so
    # the night's checks and the definitions that read this module's bars load none of it
    from leap_pipeline.modeling.selection import TrainedModels

TORSO_MODEL_TYPES = 100


def novelty_scores(
    flags: list[Novelty | None], predicted: np.ndarray, measured: np.ndarray
) -> dict[str, float | int | None]:
    """How the novelty flag (``NoveltyReference.assess`` of each launch) sorts launches the
    model did not train on: the share flagged, w20 of flagged and unflagged launches, and how
    often the flag is right (a flagged launch missed by more than 20%, an unflagged one
    within it)."""
    flagged = np.array([f is not None and f.novel for f in flags], dtype=bool)
    hit = metrics.within_mask(predicted, measured, 20)

    def share(mask: np.ndarray) -> float | None:
        return float(mask.mean()) if len(mask) else None

    return {
        "launches": len(flags),
        "judged": sum(f is not None for f in flags),
        "flagged_share": share(flagged),
        "w20_flagged": share(hit[flagged]),
        "w20_unflagged": share(hit[~flagged]),
        "flag_right": share(flagged != hit),
    }


def frequency_band(rows: pl.DataFrame, ranks: pl.DataFrame) -> pl.Series:
    """head (the 19 most frequent model types of the window), torso (to 100), tail (the rest)."""
    ranked = rows.select("model_type").join(
        ranks, on="model_type", how="left", maintain_order="left"
    )
    return ranked.select(
        pl.when(pl.col("rank") <= HEAD_MODEL_TYPES)
        .then(pl.lit("head"))
        .when(pl.col("rank") <= TORSO_MODEL_TYPES)
        .then(pl.lit("torso"))
        .otherwise(pl.lit("tail"))
        .alias("band")
    )["band"]


def score(predicted: np.ndarray, measured: np.ndarray, weights=None) -> dict[str, float]:
    """The paper's metrics for one model on one set of attempts."""
    p = np.asarray(predicted, dtype=float)
    out = {f"w{k}": metrics.within(p, measured, k) for k in metrics.TOLERANCES}
    out["mdape"] = metrics.mdape(p, measured)
    out["median_ratio"] = metrics.median_ratio(p, measured)
    out["coverage"] = metrics.predicted_share(p)
    out["attempts"] = float(len(p))
    if weights is not None:
        out["w20_device_hours"] = metrics.within(p, measured, 20, weights=weights)
    return out


MODELS = ("published", "cascade", "single_gbdt", "lookup")
HISTORY_GROUPS = ("cold", "new type", "known")


def history_groups(X: np.ndarray) -> np.ndarray:
    """Per feature row, its history case: a new family, a known family on a type it never ran
    on (the routing question), or a family known on this type. The intervals' history classes
    (``intervals.history_class``), their two run-count classes taken together."""
    return np.array(HISTORY_GROUPS)[np.minimum(history_class(X), len(HISTORY_GROUPS) - 1)]


def evaluate(
    models: TrainedModels, rows: pl.DataFrame, oracle_medians: pl.DataFrame | None = None
) -> dict:
    """Every metric of the issue on evaluation-day rows; ``oracle_medians`` adds the ceiling."""
    if rows.height == 0:
        raise ValueError("no evaluation rows")
    if rows["ds"].min() <= models.window[1]:
        raise ValueError(f"evaluation rows from {rows['ds'].min()} overlap the training window")
    from leap_pipeline.modeling.selection import predictions

    predicted = predictions(models, rows)
    scored = pl.concat([rows, predicted], how="horizontal").with_columns(
        band=frequency_band(rows, models.model_type_ranks),
        history=pl.Series(history_groups(rows.select(FEATURE_COLUMNS).to_numpy())),
    )
    if oracle_medians is not None:
        scored = scored.join(
            oracle_medians.select("attempt_id", oracle="true_median"),
            on="attempt_id",
            how="left",
            maintain_order="left",
        )
    names = [*MODELS, *(["oracle"] if oracle_medians is not None else [])]
    q = scored["throughput"].to_numpy()
    weights = scored["device_hours"].fill_null(0.0).to_numpy()
    weights = weights if weights.sum() > 0 else None
    overall = {m: score(scored[m].to_numpy(), q, weights) for m in names}
    breakdown = []
    for column in ("hardware_type", "band", "history"):
        for (group,), part in scored.group_by(column, maintain_order=True):
            for m in names:
                breakdown.append(
                    {"by": column, "group": group, "model": m}
                    | score(part[m].to_numpy(), part["throughput"].to_numpy())
                )
    covered = scored.filter(pl.col("lookup").is_not_null())
    table1 = {"covered_attempts": covered.height, "coverage": overall["lookup"]["coverage"]}
    for m in ("lookup", "cascade", "published"):
        for k in (10, 15, 20):
            table1[f"{m}_w{k}"] = (
                metrics.within(covered[m], covered["throughput"], k) if covered.height else None
            )
        table1[f"{m}_median_ratio"] = (
            metrics.median_ratio(covered[m], covered["throughput"]) if covered.height else None
        )
    return {
        "day": rows["ds"].min().isoformat(),
        "window": [d.isoformat() for d in models.window],
        "overall": overall,
        "breakdown": pl.DataFrame(breakdown),
        "table1": table1,
        "intervals": interval_scores(models, rows, scored["published"].to_numpy()),
        "scored": scored.select(
            "attempt_id", "hardware_type", "throughput", *names, "cascade_bin", "band", "history"
        ),
    }


def interval_scores(
    models: TrainedModels, rows: pl.DataFrame, published: np.ndarray
) -> dict | None:
    """How the published model's conformal intervals did on day D: the share of measured
    throughputs inside them, overall, per hardware type and per history class (``cold`` is a
    family never seen), and the median relative width (high - low) / prediction. None for a
    model with no intervals."""
    if models.intervals is None:
        return None
    X = rows.select(FEATURE_COLUMNS).to_numpy()
    types = rows["hardware_type"].to_numpy()
    low, high = models.intervals.bounds(np.log(published), types, X)
    measured = rows["throughput"].to_numpy()
    history = np.array(HISTORY_CLASSES)[history_class(X)]
    return {
        "level": models.intervals.level,
        "coverage": interval_coverage(low, high, measured)["overall"],
        "by_hardware_type": interval_coverage(low, high, measured, types)["groups"],
        "by_history": interval_coverage(low, high, measured, history)["groups"],
        "width_median": float(np.median((high - low) / published)),
    }


def evaluation_summary(evaluation: dict) -> dict:
    """The JSON part of a night's evaluation: the day, the window, every model's metrics,
    Table 1, the intervals' coverage, each feature's drift from the window and, on a simulated
    fleet, the day's routing replay."""
    keys = ("day", "window", "overall", "table1", "intervals", "drift", "routing")
    return {k: evaluation.get(k) for k in keys}


def headline(evaluation: dict) -> dict[str, float | None]:
    """The few numbers a run is tagged and gated with."""
    overall = evaluation["overall"]
    out = {f"{m}_{k}": overall[m][k] for m in overall for k in ("w10", "w20", "mdape", "coverage")}
    out["published_w20_device_hours"] = overall["published"].get("w20_device_hours")
    out["table1_lookup_w20"] = evaluation["table1"]["lookup_w20"]
    out["table1_cascade_w20"] = evaluation["table1"]["cascade_w20"]
    out["table1_published_w20"] = evaluation["table1"]["published_w20"]
    intervals = evaluation.get("intervals")
    if intervals is not None:
        out[interval_metric_name(intervals["level"])] = intervals["coverage"]
        out["interval_width_median"] = intervals["width_median"]
    drift = evaluation.get("drift")
    if drift:
        out["features_drifted"] = float(sum(entry["drifted"] for entry in drift))
        out["feature_psi_max"] = drift[0]["psi"]
    routing = evaluation.get("routing")
    if routing is not None and "capture" in routing:  # the share of the oracle's saving each
        # routing policy captures (a replay that could not run holds its "error" instead)
        out["routing_capture"] = routing["capture"]["leap"]
        out["routing_capture_lower"] = routing["capture"]["leap_lower"]
        out["routing_capture_lookup"] = routing["capture"]["lookup"]
    return out


# A slice is held to the pooled figure: its published w20 at most SLICE_MAX_GAP below the whole
# day's, once it has SLICE_MIN_ATTEMPTS attempts (fewer score too noisily to judge). The slices
# are every hardware type, frequency band and history group, so the long tail (``tail``) and
# the jobs LEAP has never seen (``cold``) are held to the same bar as the head.
SLICE_MAX_GAP = 0.20
SLICE_MIN_ATTEMPTS = 100


def slice_shortfalls(
    breakdown: pl.DataFrame,
    overall_w20: float,
    model: str = "published",
    max_gap: float = SLICE_MAX_GAP,
    min_attempts: int = SLICE_MIN_ATTEMPTS,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(every slice of ``model`` judged, with its bar; the slices below their bar), from an
    evaluation's breakdown (``evaluate``). Slices too small to judge are listed, not judged."""
    bar = overall_w20 - max_gap
    judged = (
        breakdown.filter(pl.col("model") == model)
        .select("by", pl.col("group").cast(pl.String), "attempts", "w20")
        .with_columns(
            judged=pl.col("attempts") >= min_attempts,
            below=(pl.col("attempts") >= min_attempts) & (pl.col("w20") < bar),
            bar=pl.lit(bar),
        )
        .sort("by", "w20")
    )
    return judged, judged.filter(pl.col("below"))
