"""The routing's selection bias in a purchase plan, estimated by a parametric bootstrap.

A plan's predicted saving overstates the true one on the simulated fleet (``purchase_plan.py``).
One suspect is selection: routing sends the bought type the launches its predictions favour
most, so their errors there are not centred on zero. This benchmark estimates that bias for
each held-out type (``studies.purchase_holdouts.holdout_plan``) and takes it off the saving:
- it takes the model's own predictions as the truth;
- each of ``--draws`` draws gives the bought type's predictions one error per model type
  (``--errors family``) or one per launch (``--errors launch``), normal in log throughput with
  a spread of ``--sigma`` and centred so that a drawn cost's mean is the model's (a log error
  ``e`` scales a cost by ``exp(-e)``, whose mean is ``exp(sigma^2 / 2)`` when ``e`` is centred
  on zero): without selection the draws would save what the model does;
- it re-orders each launch's preference list by the drawn samples per dollar, routes again,
  and prices the same placements at the drawn and at the model's own throughputs;
- the draws' mean gap between those two savings is the bias.

It prints, per held-out type, the saving as shipped and with the bias taken off, each over the
true saving, and the held-out type's log error (predicted over true): its mean and spread over
the window's launches the Ranker ranked it for (a premium type it removed has no prediction),
and its mean on the launches the plan moved there; then the Spearman correlation of the
purchases' order by each saving with the truth's. Where the Ranker ranked a launch by its
prior (a novel launch), the draws order its list by the model's throughput all the same.

    .venv/bin/leap demo                                   # data/, scale 0.1
    python benchmarks/plan_selection_bias.py --data data --types 4 --skip 4 --json   # settings

Progress goes to stderr; stdout gets the table, or one JSON line with ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from demo_truth import window_arguments

if TYPE_CHECKING:
    from leap_pipeline.modeling.planning import PlanResult, Predictions
    from leap_pipeline.studies.purchase_holdouts import HoldoutPlan

KEYS = ["attempt_id", "hardware_type"]


def reordered(ranked: Predictions, options: pl.DataFrame) -> Predictions:
    """``ranked`` (``planning.Predictions``) with ``options`` as its predictions and each
    preference list ordered by their samples per dollar, as the Ranker orders a list."""
    per_dollar = options.select(
        *KEYS, value=pl.col("throughput") / (pl.col("devices") * pl.col("hourly_cost_usd"))
    )
    value = {(a, h): v for a, h, v in per_dollar.iter_rows()}
    lists = {
        a: sorted(hs, key=lambda h, a=a: (-value.get((a, h), -1.0), h))
        for a, hs in ranked.preferences.items()
    }
    return dataclasses.replace(ranked, options=options, preferences=lists)


def saving_at(
    plan: HoldoutPlan, launches: pl.DataFrame, bought: Predictions, count: int, truth: pl.DataFrame
) -> tuple[float, float, PlanResult]:
    """The plan's predicted saving at ``count`` from ``bought``, and the same placements'
    saving priced at ``truth``."""
    from leap_pipeline.modeling import planning

    h = plan.hardware_type
    result = planning.plan_purchases(
        launches,
        plan.predictions,
        plan.fleet,
        [planning.Purchase(h, (count,))],
        with_type={h: bought},
    )
    base = planning.true_cost(result.baseline_placements, launches, truth)
    true = base - planning.true_cost(result.placements[(h, count)], launches, truth)
    return float(result.table["saving_usd"][0]), true, result


def selection_bias(
    plan: HoldoutPlan,
    launches: pl.DataFrame,
    count: int,
    sigma: float,
    draws: int,
    errors: str = "family",
) -> dict:
    """The bootstrap's mean gap (predicted less true saving) and its spread over the draws."""
    h = plan.hardware_type
    options = plan.bought.options
    own = (
        pl.concat([options, plan.predictions.options])
        .unique(KEYS, keep="first")
        .select(*KEYS, true_median="throughput")
    )
    # one model type per row of ``options``, in its order: the draws are set on those rows
    family = options.join(
        launches.select("attempt_id", "model_type"),
        on="attempt_id",
        how="left",
        maintain_order="left",
    )["model_type"].fill_null("")
    families = {f: i for i, f in enumerate(sorted(set(family)))}
    at = np.array([families[f] for f in family])
    on_type = (options["hardware_type"] == h).to_numpy()
    rng = np.random.default_rng(0)
    gaps = []
    for _ in range(draws):
        if errors == "family":
            error = rng.standard_normal(len(families))[at]
        else:
            error = rng.standard_normal(len(at))
        factor = np.exp(sigma * error + sigma**2 / 2)  # a drawn cost's mean is the model's
        drawn = options["throughput"].to_numpy() * np.where(on_type, factor, 1.0)
        bought = reordered(plan.bought, options.with_columns(throughput=pl.Series(drawn)))
        predicted, true, _ = saving_at(plan, launches, bought, count, own)
        gaps.append(predicted - true)
    return {"bias_usd": float(np.mean(gaps)), "bias_sd_usd": float(np.std(gaps))}


def type_errors(
    plan: HoldoutPlan, truth: pl.DataFrame, result: PlanResult, count: int
) -> dict[str, float | int | None]:
    """The held-out type's log error over the launches the Ranker ranked it for, and on those
    the plan moved there."""
    h = plan.hardware_type
    on_type = plan.bought.options.filter(pl.col("hardware_type") == h).join(
        truth.select(*KEYS, "true_median"), on=KEYS
    )
    error = (on_type["throughput"] / on_type["true_median"]).log()
    moved = result.placements[(h, count)].filter(pl.col("hardware_type") == h)
    moved = moved.join(
        result.baseline_placements.select("attempt_id", was="hardware_type"), on="attempt_id"
    ).filter(pl.col("was") != h)
    on_moved = on_type.join(moved.select("attempt_id"), on="attempt_id")
    moved_error = (on_moved["throughput"] / on_moved["true_median"]).log()
    return {
        "log_error_mean": float(error.mean()),
        "log_error_sd": float(error.std()),
        "moved": moved.height,
        "moved_log_error_mean": float(moved_error.mean()) if moved.height else None,
    }


def _over(saving: float, true: float) -> float:
    return saving / true if true else math.nan


def markdown_table(per_type: dict[str, dict]) -> str:
    """Per held-out type: the saving over the true one, as shipped and with the bias taken off,
    the bias, and the type's log error over its launches and over those moved there."""
    lines = [
        "| held out | predicted / true | bias taken off | bias (USD) | log error | moved's |",
        "|---|---|---|---|---|---|",
    ]
    for h, row in per_type.items():
        true = row["true_saving_usd"]
        moved = row["moved_log_error_mean"]
        lines.append(
            f"| {h} | {_over(row['predicted_saving_usd'], true):.2f} "
            f"| {_over(row['corrected_saving_usd'], true):.2f} | {row['bias_usd']:,.0f} "
            f"| {row['log_error_mean']:+.2f} +- {row['log_error_sd']:.2f} "
            f"| {'-' if moved is None else f'{moved:+.2f}'} ({row['moved']}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    window_arguments(parser, skip=4)
    parser.add_argument("--sigma", type=float, default=0.5, help="the drawn log-error spread")
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument(
        "--errors", choices=("family", "launch"), default="family", help="one error per what"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.days < 1 or args.types < 1 or args.draws < 1 or not args.sigma > 0:
        parser.error("need --days, --types and --draws of at least 1 and a positive --sigma")

    from demo_truth import open_demo_folder, plan_window

    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.modeling import planning
    from leap_pipeline.studies.purchase_holdouts import holdout_plan, holdout_window

    started = time.monotonic()
    where, oracle, published, version = open_demo_folder(Path(args.data), parser.error)
    per_type = {}
    with open_warehouse(where.warehouse_path, read_only=True) as wh:
        first, last, types = plan_window(wh, args.days, args.types, args.skip)
        window = holdout_window(wh, published.hardware_specs, oracle.true_medians, first, last)
        for h in types:
            print(f"{h}: refit without it; planning; {args.draws} draws", file=sys.stderr)
            began = time.monotonic()
            plan = holdout_plan(wh, published, window, h, first)
            count = max(1, round(window.capacity[h]))
            predicted, true, result = saving_at(
                plan, window.launches, plan.bought, count, window.truth
            )
            drawing = time.monotonic()
            bias = selection_bias(plan, window.launches, count, args.sigma, args.draws, args.errors)
            per_type[h] = {
                "seconds": round(time.monotonic() - began, 1),
                "draws_seconds": round(time.monotonic() - drawing, 1),
                "count": count,
                "predicted_saving_usd": predicted,
                "true_saving_usd": true,
                **bias,
                "corrected_saving_usd": predicted - bias["bias_usd"],
                **type_errors(plan, window.truth, result, count),
            }
    true = {h: row["true_saving_usd"] for h, row in per_type.items()}
    spearman = {
        name: planning.spearman({h: row[name] for h, row in per_type.items()}, true)
        for name in ("predicted_saving_usd", "corrected_saving_usd")
    }
    seconds = round(time.monotonic() - started, 1)
    if args.json:
        figures = {"per_type": per_type, "spearman": spearman, "seconds": seconds}
        print(json.dumps({"model_version": version, **figures}))
        return 0
    print(f"window {first}..{last}, model {version}, sigma {args.sigma} per {args.errors}")
    print(markdown_table(per_type))
    print(
        f"Spearman with the truth's order: {spearman['predicted_saving_usd']:.2f} as shipped, "
        f"{spearman['corrected_saving_usd']:.2f} with the bias taken off"
    )
    for h, row in per_type.items():
        print(f"{h}: {row['seconds']:.0f} s, {row['draws_seconds']:.0f} s of it the draws")
    print(f"in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
