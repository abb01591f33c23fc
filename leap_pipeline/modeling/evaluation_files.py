"""A night's evaluation as files and figures: the CSV, JSON and plots a registry run carries."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from leap_pipeline.modeling.evaluation import evaluation_summary

EVALUATION_FILES = ("breakdown.csv", "evaluation.json", "predicted_vs_measured.png")


def write_evaluation_files(evaluation: dict, folder: Path) -> list[Path]:
    """The evaluation as the files a registry run carries (``EVALUATION_FILES``)."""
    files = [Path(folder) / name for name in EVALUATION_FILES]
    evaluation["breakdown"].write_csv(files[0])
    files[1].write_text(json.dumps(evaluation_summary(evaluation), indent=2))
    plot_predicted_vs_measured(evaluation["scored"], str(files[2]))
    return files


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


def plot_per_night(series: pl.DataFrame, by: str, value: str, path: str, **axes) -> str:
    """One line per value of ``by`` over the evaluation days (``ds``), with ``axes`` set on the
    plot (``ylabel``, ``ylim``, ``reference``: a dotted line at that value, the oracle's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for (name,), part in series.sort("ds").group_by(by, maintain_order=True):
        ax.plot(part["ds"].to_list(), part[value].to_list(), marker="o", label=name)
    reference = axes.pop("reference", None)
    if reference is not None:
        ax.axhline(reference, color="grey", linestyle=":", label="oracle")
    ax.set(xlabel="evaluation day", **axes)
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
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
