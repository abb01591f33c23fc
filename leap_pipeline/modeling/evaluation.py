"""Next-day evaluation (paper section 3.1): train on days D-30 .. D-1, score day D.

Pure functions over feature-table frames. Every model is scored on the same attempts with the
paper's pooled metrics; breakdowns by hardware type, model-type frequency band and cold start; the
lookup table against the cascade on the attempts the table covers (Table 1); and, when the fleet
is simulated, the oracle's true medians scored the same way (the noise ceiling).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from leap_pipeline.modeling.lookup_table import LookupTable, build_lookup_table
from leap_pipeline.modeling.progress import Progress
from leap_pipeline.settings import MIN_SUPPORT, MIN_WINDOW_DAYS, WINDOW_DAYS
from leap_serving import metrics
from leap_serving.cascade import GATINGS, BinnedCascade, cascade_units, profile_params
from leap_serving.features import FEATURE_COLUMNS
from leap_serving.novelty import Novelty, NoveltyReference

HEAD_MODEL_TYPES = 19  # the lookup table's model types
TORSO_MODEL_TYPES = 100


def training_window(day: dt.date, window_days: int = WINDOW_DAYS) -> tuple[dt.date, dt.date]:
    """First and last training day for evaluation day ``day``: the ``window_days`` before it."""
    if window_days < 1:
        raise ValueError(f"window_days={window_days!r} must be at least 1")
    return day - dt.timedelta(days=window_days), day - dt.timedelta(days=1)


# The cascade must beat the single GBDT on the selection day by this many standard errors of the
# paired difference in w20 (the rows where exactly one of the two lands within 20%): a day is
# about a thousand attempts at the report's scale, where a 1.5-point lead is chance as often as
# not, and the simpler model is the safer bet on a tie. At full scale the bar is a fraction of a
# point, so a cascade that is really better still ships.
SELECTION_Z = 2.0


@dataclass
class TrainedModels:
    """A night's models. ``published`` is what ships: the selection's winner, as trained (a
    one-bin cascade when the single GBDT won, so the artifact and the serving path are one)."""

    cascade: BinnedCascade
    single_gbdt: object
    published: BinnedCascade
    selection: dict
    lookup: LookupTable
    window: tuple[dt.date, dt.date]
    training_rows: int
    model_type_ranks: pl.DataFrame  # model_type, rank (1 = most attempts in the window)
    novelty: NoveltyReference | None = None  # the window's model types, to flag new ones
    seconds: dict[str, float] = field(default_factory=dict)


def check_window(window: pl.DataFrame, day: dt.date, min_days: int = MIN_WINDOW_DAYS) -> None:
    """Refuse a window that reaches the evaluation day or has too few days to learn from."""
    if window.height and window["ds"].max() >= day:
        raise ValueError(f"training rows reach {window['ds'].max()}, not before {day}")
    days = window["ds"].n_unique() if window.height else 0
    if days < min_days:
        raise ValueError(
            f"the training window before {day} has {days} day(s) of feature table; at least "
            f"{min_days} are needed: materialize earlier partitions first"
        )


def validation_rows(window: pl.DataFrame) -> np.ndarray:
    """The rows early stopping judges on: the window's last day. A split in time, so the
    retries of one job (identical features, one day) never straddle it."""
    return (window["ds"] == window["ds"].max()).to_numpy()


def fit_models(
    window: pl.DataFrame,
    day: dt.date,
    profile: str = "fast",
    random_state: int = 0,
    lookup_min_support: int = MIN_SUPPORT,
    cascade_params: dict | None = None,
) -> TrainedModels:
    """Fit the cascade, the single GBDT, the single GBDT on the history's prior
    (``residual_on_prior``) and the lookup table on a window of feature-table rows, and select
    the model to publish.

    The window's last day is held out for the selection (``select_model``); the models train on
    the days before it and early-stop on the last of those. The winner is published as trained,
    not refitted: what ships is exactly what the selection scored, at the cost of one day of
    rows, and a refit would double the night's training whenever the cascade wins."""
    check_window(window, day)
    selection_day = window["ds"].max()
    training = window.filter(pl.col("ds") < selection_day)
    selection_rows = window.filter(pl.col("ds") == selection_day)
    X = training.select(FEATURE_COLUMNS).to_numpy()
    y = training["log_q"].to_numpy()
    held_out = validation_rows(training)
    params = profile_params(profile) | (cascade_params or {})
    models = {
        "cascade": BinnedCascade(**params, random_state=random_state),
        "single_gbdt": BinnedCascade(**(params | {"n_bins": 1}), random_state=random_state),
        "single_gbdt_prior": BinnedCascade(
            **(params | {"n_bins": 1, "residual_on_prior": True}), random_state=random_state
        ),
    }
    progress = Progress(
        f"night {day}",
        sum(
            cascade_units(m.max_em_iter, m.n_bins, m.expert_overlap, m.em_sample)
            for m in models.values()
        ),
    )
    seconds = {}
    for name, model in models.items():
        start = time.perf_counter()
        progress.phase = name
        model.fit(X, y, validation=held_out, progress=progress)
        seconds[name] = time.perf_counter() - start
    cascade, one_bin, on_prior = models.values()
    selection = select_model(
        cascade,
        one_bin,
        selection_rows.select(FEATURE_COLUMNS).to_numpy(),
        selection_rows["throughput"].to_numpy(),
        challengers={"single_gbdt_prior": on_prior},
    )
    selection["selection_day"] = selection_day.isoformat()
    ranks = (
        window.group_by("model_type")
        .len()
        .sort(["len", "model_type"], descending=[True, False])
        .with_row_index("rank", offset=1)
        .select("model_type", "rank")
    )
    return TrainedModels(
        cascade=cascade,
        single_gbdt=one_bin.experts_[0],
        published=selection.pop("model"),
        selection=selection,
        lookup=build_lookup_table(
            window, top_model_types=HEAD_MODEL_TYPES, min_support=lookup_min_support
        ),
        window=(window["ds"].min(), window["ds"].max()),
        training_rows=window.height,
        model_type_ranks=ranks,
        novelty=NoveltyReference.fit(
            window["model_type"].to_list(), window.select(FEATURE_COLUMNS).to_numpy()
        ),
        seconds=seconds,
    )


def select_model(
    cascade: BinnedCascade,
    single_gbdt: BinnedCascade,
    X: np.ndarray,
    measured: np.ndarray,
    z: float = SELECTION_Z,
    challengers: dict[str, BinnedCascade] | None = None,
) -> dict:
    """Score the single GBDT (a one-bin cascade), the cascade under every gating and any other
    ``challengers`` on rows no model trained on, and pick the one to publish: the best
    challenger if its w20 beats the single GBDT's by more than ``z`` standard errors of the
    paired difference, else the single GBDT. Returns the model, its name, every candidate's
    w20, the best challenger's margin and the bar it had to clear."""

    def hits(model: BinnedCascade) -> np.ndarray:
        return metrics.within_mask(np.exp(model.predict(X)), measured, 20)

    candidates = {"single_gbdt": single_gbdt}
    for gating in GATINGS:
        candidates[f"cascade_{gating}"] = copy.copy(cascade).set_params(gating=gating)
    candidates |= challengers or {}
    landed = {name: hits(model) for name, model in candidates.items()}
    scores = {name: float(hit.mean()) if len(hit) else 0.0 for name, hit in landed.items()}
    best = max((n for n in scores if n != "single_gbdt"), key=lambda n: scores[n])
    difference = landed[best].astype(float) - landed["single_gbdt"].astype(float)
    standard_error = (
        float(difference.std(ddof=1) / np.sqrt(len(difference))) if len(difference) > 1 else 1.0
    )
    bar = z * standard_error
    margin = scores[best] - scores["single_gbdt"]
    name = best if margin > bar else "single_gbdt"
    return {
        "model": candidates[name],
        "published": name,
        "scores": scores,
        "margin": margin,
        "required_margin": bar,
        "selection_rows": len(measured),
        "refit": False,
    }


def predictions(models: TrainedModels, rows: pl.DataFrame) -> pl.DataFrame:
    """Predicted throughput of every model per row (null where a model gives no estimate)."""
    X = rows.select(FEATURE_COLUMNS).to_numpy()
    bins, probability = models.cascade.predict_bins(X)
    return pl.DataFrame(
        {
            "published": np.exp(models.published.predict(X)),
            "cascade": np.exp(models.cascade.predict(X)),
            "single_gbdt": np.exp(models.single_gbdt.predict(X)),
            "lookup": models.lookup.predict(rows).cast(pl.Float64),
            "cascade_bin": bins,
            "cascade_bin_probability": probability,
        }
    )


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
    }  # fmt: skip


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
    out["coverage"] = metrics.coverage(p)
    out["attempts"] = float(len(p))
    if weights is not None:
        out["w20_device_hours"] = metrics.within(p, measured, 20, weights=weights)
    return out


MODELS = ("published", "cascade", "single_gbdt", "lookup")
HISTORY_GROUPS = ("cold", "new type", "known")


def history_group() -> pl.Expr:
    """A feature row's history case: a new family, a known family on a type it never ran on
    (the routing question), or a family known on this type."""
    return (
        pl.when(pl.col("hist_cold_start") == 1.0)
        .then(pl.lit("cold"))
        .when(pl.col("hist_hw_count") == 0.0)
        .then(pl.lit("new type"))
        .otherwise(pl.lit("known"))
    )


def evaluate(
    models: TrainedModels, rows: pl.DataFrame, oracle_medians: pl.DataFrame | None = None
) -> dict:
    """Every metric of the issue on evaluation-day rows; ``oracle_medians`` adds the ceiling."""
    if rows.height == 0:
        raise ValueError("no evaluation rows")
    if rows["ds"].min() <= models.window[1]:
        raise ValueError(f"evaluation rows from {rows['ds'].min()} overlap the training window")
    predicted = predictions(models, rows)
    scored = pl.concat([rows, predicted], how="horizontal").with_columns(
        band=frequency_band(rows, models.model_type_ranks),
        history=history_group(),
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
        "scored": scored.select(
            "attempt_id", "hardware_type", "throughput", *names, "cascade_bin", "band", "history"
        ),
    }


def evaluation_summary(evaluation: dict) -> dict:
    """The JSON part of ``evaluate``'s result: the day, the window, every model's metrics and
    Table 1."""
    return {k: evaluation[k] for k in ("day", "window", "overall", "table1")}


EVALUATION_FILES = ("breakdown.csv", "evaluation.json", "predicted_vs_measured.png")


def write_evaluation_files(evaluation: dict, folder: Path) -> list[Path]:
    """The evaluation as the files a registry run carries (``EVALUATION_FILES``)."""
    files = [Path(folder) / name for name in EVALUATION_FILES]
    evaluation["breakdown"].write_csv(files[0])
    files[1].write_text(json.dumps(evaluation_summary(evaluation), indent=2))
    plot_predicted_vs_measured(evaluation["scored"], str(files[2]))
    return files


def headline(evaluation: dict) -> dict[str, float | None]:
    """The few numbers a run is tagged and gated with."""
    overall = evaluation["overall"]
    out = {f"{m}_{k}": overall[m][k] for m in overall for k in ("w10", "w20", "mdape", "coverage")}
    out["published_w20_device_hours"] = overall["published"].get("w20_device_hours")
    out["table1_lookup_w20"] = evaluation["table1"]["lookup_w20"]
    out["table1_cascade_w20"] = evaluation["table1"]["cascade_w20"]
    out["table1_published_w20"] = evaluation["table1"]["published_w20"]
    return out


def markdown_table(frame: pl.DataFrame, digits: int = 3) -> str:
    """A frame as a markdown table (floats rounded), for Dagster metadata and reports."""

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.{digits}f}"
        return str(value)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join(lines)


def plot_predicted_vs_measured(scored: pl.DataFrame, path: str) -> str:
    """Scatter of predicted against measured throughput on the evaluation day (log axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    q = scored["throughput"].to_numpy()
    for model, colour in (("single_gbdt", "tab:gray"), ("cascade", "tab:blue")):
        ax.scatter(q, scored[model].to_numpy(), s=3, alpha=0.4, label=model, color=colour)
    low, high = float(q.min()) / 2, float(q.max()) * 2
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    for factor in (0.8, 1.2):
        ax.plot([low, high], [low * factor, high * factor], color="black", linewidth=0.4, ls="--")
    ax.set(xscale="log", yscale="log", xlabel="measured samples/s", ylabel="predicted samples/s")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_nightly_w20(series: pl.DataFrame, path: str) -> str:
    """Figure 8: w20 per nightly retrain, one line per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for (model,), part in series.sort("ds").group_by("model", maintain_order=True):
        ax.plot(part["ds"].to_list(), part["w20"].to_list(), marker="o", label=model)
    ax.set(ylabel="w20", xlabel="evaluation day", ylim=(0, 1))
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
