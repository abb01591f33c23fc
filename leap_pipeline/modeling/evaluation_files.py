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


def plot_routing_capture(series: pl.DataFrame, path: str) -> str:
    """Each night's share of the oracle's saving over as-logged routing that a policy captured
    on its day (``routing.day_routing``), one line per policy that ranks by a model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ranked = series.filter(pl.col("policy").is_in(["lookup", "leap", "leap_lower"]))
    for (policy,), part in ranked.sort("ds").group_by("policy", maintain_order=True):
        ax.plot(part["ds"].to_list(), part["capture"].to_list(), marker="o", label=policy)
    ax.axhline(1.0, color="grey", linestyle=":", label="oracle")
    ax.set(ylabel="share of the oracle's saving", xlabel="evaluation day")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
