"""``leap crossval``'s tables: one per split, every model and rule on its predictions and its
decisions, in Markdown (what the docs carry and what the terminal shows)."""

from __future__ import annotations

from leap_pipeline.studies.crossval import SCORED
from leap_pipeline.studies.decisions import KINDS
from leap_serving.model.intervals import LEVEL, interval_metric_name

LABELS = {
    "leap": "**leap** (what a fold publishes)",
    "single_gbdt": "single GBDT",
    "single_gbdt_prior": "single GBDT on the prior",
    "gbdt_blend": "blend of the two GBDTs (geometric mean)",
    "lookup": "lookup table",
    "physics": "physics (roofline-scaled other types)",
    "fleet_ratio": "fleet ratio",
    "roofline": "roofline prior alone",
    "cost_prior": "per-layer cost prior alone",
    "kernel_prior": "kernel-composed cost prior alone (operator efficiencies from kernels)",
    "efficiency_gbdt": "efficiency GBDT (ln measured/cost prior, bounded)",
    "highest_fp16_peak": "rule: highest FP16 peak",
    "best_fp16_peak_per_dollar": "rule: best FP16 peak per dollar",
}


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def split_table(split: str, result: dict) -> str:
    """The split's table, with what ``leap`` published fold by fold under it."""
    selection = result["selection"]
    any_kind = next(iter(result[m]["regret"]["fastest"] for m in SCORED if "regret" in result[m]))
    lines = [
        f"**{split}**: {result['scored_rows']:,} of {result['n_rows']:,} rows held out over "
        f"{result['folds']} folds; {any_kind['decisions']:,} decisions per kind.",
        "",
        "| model | w20 | MdAPE | top-1 fastest | regret fastest: mean / p90 / within 5% "
        "| top-1 per $ | regret per $: mean / p90 / within 5% |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in SCORED:
        entry = result[name]
        mdape = "" if entry["mdape"] is None else f"{entry['mdape']:.1f}%"
        w20 = _share(entry["w20"])
        if entry["coverage"] is not None and entry["coverage"] < 0.995:
            w20 += f" (cov. {entry['coverage']:.0%})"
        cells = [LABELS[name], w20, mdape]
        for kind in KINDS:
            r = entry.get("regret", {}).get(kind)
            if r is None or r["mean"] is None:
                cells += ["", ""]
                continue
            cells += [
                _share(entry["top1"][kind]),
                f"{r['mean']:.3f} / {r['p90']:.3f} / {r['within_5pct']:.1%}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| oracle | | | 100% | 0 / 0 / 100% | 100% | 0 / 0 / 100% |")
    published = "; ".join(
        f"{key}: " + ", ".join(f"{m} {n}x" for m, n in sorted(selection[key].items()))
        for key in ("gbdt", *KINDS)
    )
    placed = "; ".join(
        f"{kind}: " + ", ".join(f"{m} {n}x" for m, n in sorted(counts.items()))
        for kind, counts in selection.get("fallback", {}).items()
    )
    best = selection["best_on_test_fold"]
    lines += [
        "",
        f"Published per fold ({published}); the types a published ranking could not score "
        f"placed by ({placed}; last: ranked last). The published ranking was the best "
        "candidate on "
        f"the test fold in {best['fastest']:.0%} of folds (fastest) and {best['per_cost']:.0%} "
        "(per dollar).",
    ]
    leap, name = result["leap"], interval_metric_name(LEVEL)
    if leap.get(name) is not None:
        lines.append(
            f"leap's {LEVEL:.0%} intervals, calibrated in each fold on its validation folds: "
            f"coverage {leap[name]:.1%} of {leap['interval_rows']:,} rows, median width "
            f"{leap['interval_width_median']:.2f} of the prediction."
        )
    lines.append("")
    return "\n".join(lines)
