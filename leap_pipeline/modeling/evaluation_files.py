"""A night's evaluation as files and figures: the CSV, JSON and plots a registry run carries."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from leap_pipeline.modeling.evaluation import evaluation_summary

EVALUATION_FILES = ("breakdown.csv", "evaluation.json", "predicted_vs_measured.png")


def _figure(width: float, height: float):
    """A figure of its own, outside pyplot's global state (nothing to close, safe in a thread),
    with margins set by hand: ``tight_layout`` drew each figure twice, and a night writes
    several (the scatter of 3,000 rows: 250 ms with it, 185 ms without, median of 5)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def write_evaluation_files(evaluation: dict, folder: Path) -> list[Path]:
    """The evaluation as the files a registry run carries (``EVALUATION_FILES``)."""
    files = [Path(folder) / name for name in EVALUATION_FILES]
    evaluation["breakdown"].write_csv(files[0])
    files[1].write_text(json.dumps(evaluation_summary(evaluation), indent=2))
    plot_predicted_vs_measured(evaluation["scored"], str(files[2]))
    return files


def plot_predicted_vs_measured(scored: pl.DataFrame, path: str) -> str:
    """Scatter of predicted against measured throughput on the evaluation day (log axes)."""
    figure = _figure(5, 5)
    ax = figure.add_subplot()
    q = scored["throughput"].to_numpy()
    for model, colour in (("single_gbdt", "tab:gray"), ("cascade", "tab:blue")):
        # markers of one line, not a scatter's collection: the same dots, drawn in one call
        predicted = scored[model].to_numpy()
        ax.plot(q, predicted, "o", ms=1.7, mew=0, alpha=0.4, label=model, color=colour)
    low, high = float(q.min()) / 2, float(q.max()) * 2
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    for factor in (0.8, 1.2):
        ax.plot([low, high], [low * factor, high * factor], color="black", linewidth=0.4, ls="--")
    ax.set(xscale="log", yscale="log", xlabel="measured samples/s", ylabel="predicted samples/s")
    ax.legend(loc="upper left", markerscale=3)
    figure.subplots_adjust(left=0.15, bottom=0.11, right=0.97, top=0.97)
    figure.savefig(path, dpi=90)
    return path


def plot_per_night(series: pl.DataFrame, by: str, value: str, path: str, **axes) -> str:
    """One line per value of ``by`` over the evaluation days (``ds``), with ``axes`` set on the
    plot (``ylabel``, ``ylim``, ``reference``: a dotted line at that value, the oracle's)."""
    figure = _figure(7, 3.5)
    ax = figure.add_subplot()
    for (name,), part in series.sort("ds").group_by(by, maintain_order=True):
        ax.plot(part["ds"].to_list(), part[value].to_list(), marker="o", label=name)
    reference = axes.pop("reference", None)
    if reference is not None:
        ax.axhline(reference, color="grey", linestyle=":", label="oracle")
    ax.set(xlabel="evaluation day", **axes)
    ax.legend()
    figure.autofmt_xdate()
    figure.subplots_adjust(left=0.12, bottom=0.27, right=0.98, top=0.96)
    figure.savefig(path, dpi=90)
    return path


def plot_nightly_w20(series: pl.DataFrame, path: str) -> str:
    """Figure 8: w20 per nightly retrain, one line per model."""
    return plot_per_night(series, "model", "w20", path, ylabel="w20", ylim=(0, 1))


def plot_routing_capture(series: pl.DataFrame, path: str) -> str:
    """Each night's share of the oracle's saving over as-logged routing that a policy captured
    on its day (``routing.day_routing``), one line per policy that ranks by a model."""
    ranked = series.filter(pl.col("policy").is_in(["lookup", "leap", "leap_lower"]))
    return plot_per_night(
        ranked, "policy", "capture", path, ylabel="share of the oracle's saving", reference=1.0
    )
