"""The report as a person reads it: its figures (Figures 4, 5 and 8) and its markdown page."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from leap_pipeline.modeling.routing import SLOW_FACTOR
from leap_pipeline.studies.monitoring import BUSY_TYPE_ATTEMPTS


def figures(window: pl.DataFrame, series: pl.DataFrame, report: dict, root: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from leap_pipeline.modeling.evaluation_files import plot_nightly_w20

    paths = []
    long = series.unpivot(index="ds", variable_name="model", value_name="w20")
    paths.append(plot_nightly_w20(long, str(root / "figure8_nightly_w20.png")))
    by_type = window.group_by("hardware_type").agg(pl.col("log_q")).sort("hardware_type")
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.boxplot([np.array(v) / np.log(10) for v in by_type["log_q"]], showfliers=False)
    ax.set_xticks(range(1, by_type.height + 1), by_type["hardware_type"].to_list(), rotation=60)
    ax.set(ylabel="log10 samples/s", title="Figure 5: throughput per hardware type")
    fig.tight_layout()
    fig.savefig(root / "figure5_throughput_by_type.png", dpi=90)
    plt.close(fig)
    paths.append(str(root / "figure5_throughput_by_type.png"))
    groups = report["importance"]["per_group"]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.barh(list(groups), list(groups.values()))
    ax.set(xlabel="drop in w20 when shuffled", title="Figure 4: importance by group")
    fig.tight_layout()
    fig.savefig(root / "figure4_importance.png", dpi=90)
    plt.close(fig)
    paths.append(str(root / "figure4_importance.png"))
    return paths


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _points(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f} points"


def markdown(report: dict) -> str:
    novelty = report["holdout_family"].get("novelty", {})
    lines = [
        f"# LEAP report ({report['settings']['scale']} scale, evaluation day "
        f"{report['evaluation_day']})",
        "",
        "| figure | ours | paper |",
        "|---|---|---|",
        f"| published model w20, median | {_pct(report['published_w20_median'])} "
        "| 77.0% (73.5 - 80.6) |",
        f"| cascade w20, median (range) | {_pct(report['nightly_w20_median'])} "
        f"({_pct(report['nightly_w20_range'][0])} - {_pct(report['nightly_w20_range'][1])}) "
        "| 77.0% (73.5 - 80.6) |",
        f"| single GBDT w20, median | {_pct(report['single_gbdt_w20_median'])} "
        "| 0.5 points below the cascade (Table 2) |",
        f"| oracle (noise ceiling) w20, median | {_pct(report['oracle_w20_median'])} | - |",
        f"| Table 1: lookup coverage | {_pct(report['table1']['coverage'])} | 13.3% |",
        f"| Table 1: lookup w20 / cascade w20 on covered | "
        f"{_pct(report['table1'].get('lookup_w20'))} / "
        f"{_pct(report['table1'].get('cascade_w20'))} | 53.2% / 85.1% |",
        f"| hold out a hardware type: change in w20 | "
        f"{_points(report['holdout_hardware_delta_w20'])} (control "
        f"{_points(report['holdout_hardware_control_delta_w20'])}) | -37 points (control < 2) |",
        f"| hold out a model type: change in w20 | {_points(report['holdout_family_delta_w20'])} "
        f"(control {_points(report['holdout_family_control_delta_w20'])}) | -49.7 points |",
        f"| held-out model type: launches flagged novel; w20 flagged / unflagged; flag right | "
        f"{_pct(novelty.get('flagged_share'))}; {_pct(novelty.get('w20_flagged'))} / "
        f"{_pct(novelty.get('w20_unflagged'))}; {_pct(novelty.get('flag_right'))} | - |",
        f"| routing capture of the oracle's saving | {_pct(report['routing_capture'])} | - |",
        *_nightly_lines(report),
        "",
        "## Hold-outs as decisions (Table 4): regret per dollar, mean / p90 / within 5%",
        "",
        "| held out | published, refitted without it | published, full | rule: highest FP16 "
        "peak | rule: best FP16 peak per dollar |",
        "|---|---|---|---|---|",
        *(_holdout_row(key, part) for key, part in report.get("holdout_regret", {}).items()),
        "",
        "## Ablation (one held-out day)",
        "",
        "| configuration | w20 |",
        "|---|---|",
    ]
    lines += [f"| {a['configuration']} | {_pct(a['w20'])} |" for a in report["ablation"]]
    lines += [
        "",
        "## Nightly selection (scored on each window's last day, published as trained)",
        "",
        "| night | published | best challenger's margin over the single GBDT on the selection "
        "day (bar) | published w20 | single GBDT w20 |",
        "|---|---|---|---|---|",
    ]
    for night in report["selection"]:
        lines.append(
            f"| {night['ds']} | {night['published']} | {_points(night['margin'])} "
            f"({_points(night['required_margin'])}) | "
            f"{_pct(night['published_w20'])} | {_pct(night['single_gbdt_w20'])} |"
        )
    shares = report.get("published_shares", {})
    lines += [
        "",
        "Nights each model was published on: "
        + ", ".join(f"{name} {_pct(share)}" for name, share in shares.items())
        + f". The nights' fits ran {report.get('fits', 'in process')}.",
        "",
        f"## Routing, the last night ({report['evaluation_day']})",
        "",
        "| policy | cost (USD) | device-hours | mean queue (s) | top choice | fallback | "
        f"ran > {SLOW_FACTOR:g}x slower than its fastest candidate |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {o['cost']:,.0f} | {o['device_hours']:,.0f} | "
        f"{o['mean_queue_delay_s']:,.0f} | {_pct(o['top_choice_share'])} | "
        f"{_pct(o['fallback_share'])} | {_pct(o.get('slow_share'))} |"
        for name, o in report["routing"].items()
    ]
    lines += _monitoring_lines(report.get("monitoring", {}))
    aged = report.get("staleness")
    if aged:
        lines += [
            "",
            "## Staleness: the first night's model served on every later day",
            "",
            "- w20 lost against that night's fresh model: median "
            f"{_points(aged['w20_lost_median'])}, {_points(aged['w20_lost_oldest'])} at "
            f"{aged['oldest_age_days']} days old",
        ]
    explored = report.get("exploration")
    if explored:
        lines += [
            "",
            f"## Exploration: one trial run for {_pct(explored['budget'])} of each night's "
            "launches",
            "",
            f"- {explored['trials']} trials of {_pct(explored['trial_work_share'])} of a job's "
            f"work cost {explored['trial_cost']:,.0f} USD; the families' later launches moved "
            f"to a tried type that was truly cheaper: {explored['launches_moved']}, saving "
            f"{explored['gross_saving']:,.0f} USD",
            f"- net {explored['net_saving']:,.0f} USD, "
            f"{_pct(explored['net_share_of_leap_cost'])} of leap's cost over the same launches "
            f"({explored['leap_cost']:,.0f} USD)",
        ]
    lines += ["", "## Importance by group (drop in w20)", ""]
    lines += [f"- {g}: {v:.3f}" for g, v in report["importance"]["per_group"].items()]
    return "\n".join(lines) + "\n"


def _nightly_lines(report: dict) -> list[str]:
    """Every model's w20 over the nights (median, lowest, highest), and what a night cost."""
    by_model = report.get("w20_by_model")
    if not by_model:
        return []
    nights = len(report["nightly"])
    lines = [
        "",
        f"## w20 over the {nights} night(s): median (lowest - highest)",
        "",
        "| model | median | range |",
        "|---|---|---|",
    ]
    lines += [
        f"| {name} | {_pct(w['median'])} | {_pct(w['low'])} - {_pct(w['high'])} |"
        for name, w in by_model.items()
    ]
    seconds, memory = report.get("night_seconds_median"), report.get("night_peak_memory_mb_max")
    if seconds is not None and memory is not None:
        lines += [
            "",
            f"A night took a median {seconds:,.0f} s as computed (a kept night carries the run "
            f"that computed it); the largest peak memory at a night's end was {memory:,.0f} MB.",
        ]
    return lines


def _holdout_row(key: str, part: dict) -> str:
    def regret(name: str) -> str:
        r = part[name]["per_cost"]
        if r["mean"] is None:
            return "-"
        return f"{r['mean']:.3f} / {r['p90']:.3f} / {_pct(r['within_5pct'])}"

    names = ("held_out", "full", "highest_fp16_peak", "best_fp16_peak_per_dollar")
    label = f"{key} {part['target']} ({part['launches']} launches)"
    return f"| {label} | " + " | ".join(regret(n) for n in names) + " |"


def _monitoring_lines(summary: dict) -> list[str]:
    """Every night's routing summed (the median ranking beside the risk-aware one) and the
    intervals' coverage over the nights."""
    lines = []
    totals = summary.get("routing_totals")
    if totals:
        lines += [
            "",
            "## Routing over every night: the median ranking and the risk-aware one",
            "",
            "| policy | cost (USD) | device-hours | capture of the oracle's saving | mean share "
            f"ran > {SLOW_FACTOR:g}x slower than its fastest candidate |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {name} | {t['cost']:,.0f} | {t['device_hours']:,.0f} | {_pct(t['capture'])} | "
            f"{_pct(t['slow_share'])} |"
            for name, t in totals.items()
        ]
        proxy = summary.get("w20_vs_routing_capture")
        if proxy is not None:
            lines += [
                "",
                f"Night by night, the published model's w20 and its routing capture: Spearman "
                f"{proxy['spearman']:.2f} (p = {proxy['p_value']:.2f}, {proxy['nights']} nights).",
            ]
    name = next((k for k in summary if k.startswith("coverage_") and k.endswith("_median")), None)
    if name is not None:
        low, high = summary[name.replace("_median", "_range")]
        busy = summary[name.replace("_median", "_by_busy_type")]
        lines += [
            "",
            "## Interval coverage over the nights",
            "",
            f"- median {_pct(summary[name])} (range {_pct(low)} - {_pct(high)})",
            f"- each hardware type on its nights with {BUSY_TYPE_ATTEMPTS} attempts or more: "
            f"pooled coverage, lowest night, nights under {_pct(busy['floor'])} (and how many "
            "exact calibration would give by chance)",
            "",
            "| hardware type | nights | pooled | lowest | under the floor (by chance) |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {t} | {g['nights']} | {_pct(g['pooled'])} | {_pct(g['lowest'])} | "
            f"{g['nights_under_floor']} ({g['nights_under_floor_by_chance']:.1f}) |"
            for t, g in busy["types"].items()
        ]
        lines += [
            "",
            "With exactly calibrated intervals, the chance that no busy type's night falls under "
            f"the floor: {_pct(busy['all_nights_at_floor_by_chance'])}.",
        ]
    return lines
