"""How far a purchase plan can be trusted: hold a type the fleet runs out, as if it had never
been bought, and plan buying it back at the capacity the logs show it used.

For each held-out type the published model is refitted (at its own parameters) on the 30 days
before the plan's window without the type's rows, its history rebuilt without them
(``ablations.features_without``: a type just bought has no history), and its intervals
calibrated on the window's last training day. ``planning.plan_purchases`` then prices the
window's launches with the type available again, from that model's predictions. The simulated
fleet's truth scores the same placements (``planning.true_cost``): the predicted saving beside
the true one, and the ranking of the purchases by saving beside the spreadsheet rules'.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl
from sklearn.base import clone

from leap_pipeline.data.warehouse import Warehouse
from leap_pipeline.modeling import planning
from leap_pipeline.modeling.selection import calibrate_intervals, split_window, validation_rows
from leap_pipeline.studies.ablations import features_without
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.published import LeapModel

TRAINING_DAYS = 30  # the night's window: the days before the plan's window
COUNT_FACTORS = (0.25, 0.5, 1.0, 2.0)  # the counts priced, times the type's logged capacity


def holdout_model(
    wh: Warehouse, published: LeapModel, hardware_type: str, first_day: dt.date
) -> LeapModel:
    """``published``'s estimator refitted on the ``TRAINING_DAYS`` before ``first_day`` as if
    ``hardware_type`` had never run: its rows out, every history rebuilt without it."""
    start = first_day - dt.timedelta(days=TRAINING_DAYS)
    last = first_day - dt.timedelta(days=1)
    unseen = features_without(wh, start, last, "hardware_type", hardware_type)
    labels = wh.read("feature_table", start, last, ["attempt_id", "ds", "log_q", "throughput"])
    rows = (
        unseen.rows.filter(pl.col("hardware_type") != hardware_type)
        .unique(["attempt_id", "ds"], keep="first")
        .join(labels.unique(["attempt_id", "ds"], keep="first"), on=["attempt_id", "ds"])
        .sort("ds", "attempt_id")
    )
    training, selection = split_window(rows)
    fitted = clone(published.cascade).fit(
        training.select(FEATURE_COLUMNS).to_numpy(),
        training["log_q"].to_numpy(),
        validation=validation_rows(training),
    )
    specs = published.hardware_specs
    return LeapModel(
        cascade=fitted,
        history_snapshot=unseen.snapshot,
        hardware_specs=specs,
        metadata={k: v for k, v in published.metadata.items() if k not in ("intervals", "novelty")},
        intervals=calibrate_intervals(fitted, selection),
    )


@dataclass(frozen=True)
class HoldoutWindow:
    """The plan's window as every hold-out prices it: its launches, each type's logged
    capacity, and the truth (``true_median`` per launch and type; it only scores)."""

    launches: pl.DataFrame
    capacity: dict[str, float]
    truth: pl.DataFrame


def holdout_window(
    wh: Warehouse,
    specs: pl.DataFrame,
    true_medians: Callable[[list[str], list[str]], pl.DataFrame],
    first_day: dt.date,
    last_day: dt.date,
) -> HoldoutWindow:
    """The window's launches, capacities and truth, read once for every type held out in it."""
    attempts = wh.read("job_attempts", first_day, last_day)
    allocations = wh.read("allocations", first_day, last_day)
    launches = planning.window_launches(attempts, first_day, last_day)
    capacity = planning.logged_capacity(attempts, allocations, first_day)
    truth = true_medians(launches["attempt_id"].to_list(), specs["hardware_type"].to_list())
    return HoldoutWindow(launches, capacity, truth)


@dataclass(frozen=True)
class HoldoutPlan:
    """One hold-out's plan: the fleet without the type, the purchase of it back (at
    ``COUNT_FACTORS`` of its logged capacity), the launches ranked without it
    (``predictions``) and with it (``bought``), and the plan priced from them."""

    hardware_type: str
    fleet: dict[str, float]
    purchase: planning.Purchase
    predictions: planning.Predictions
    bought: planning.Predictions
    result: planning.PlanResult


def holdout_plan(
    wh: Warehouse,
    published: LeapModel,
    window: HoldoutWindow,
    hardware_type: str,
    first_day: dt.date,
    rank_by: str = "median",
    price_by: str = "throughput",
) -> HoldoutPlan:
    """Plan buying ``hardware_type`` back, from a model that never saw it (``holdout_model``)."""
    model = holdout_model(wh, published, hardware_type, first_day)
    capacity = window.capacity[hardware_type]
    counts = sorted({max(1, round(capacity * f)) for f in COUNT_FACTORS})
    purchase = planning.Purchase(hardware_type, tuple(counts))
    fleet = {h: c for h, c in window.capacity.items() if h != hardware_type}
    launches = window.launches
    predictions = planning.predict_launches(model, launches, [], rank_by, list(fleet))
    bought = planning.predict_launches(model, launches, [hardware_type], rank_by, list(fleet))
    result = planning.plan_purchases(
        launches, predictions, fleet, [purchase], price_by, with_type={hardware_type: bought}
    )
    return HoldoutPlan(hardware_type, fleet, purchase, predictions, bought, result)


def purchase_holdouts(
    wh: Warehouse,
    published: LeapModel,
    true_medians: Callable[[list[str], list[str]], pl.DataFrame],
    first_day: dt.date,
    last_day: dt.date,
    hardware_types: Sequence[str],
    log: Callable[[str], None] = lambda line: None,
    rank_by: str = "median",
    price_by: str = "throughput",
) -> dict:
    """Per held-out type: the plan's predicted saving (and its interval) of buying it back at
    its logged capacity (and at ``COUNT_FACTORS`` of it), the true saving of the same
    placements, and their ratio; then the purchases ranked by predicted saving, by the truth and
    by the spreadsheet rules, with each ranking's Spearman correlation to the truth's."""
    specs = published.hardware_specs
    window = holdout_window(wh, specs, true_medians, first_day, last_day)
    launches, truth = window.launches, window.truth
    per_type = {}
    for hardware_type in hardware_types:
        log(f"{hardware_type}: refit without it, its history rebuilt; planning its purchase")
        plan = holdout_plan(wh, published, window, hardware_type, first_day, rank_by, price_by)
        result, capacity = plan.result, window.capacity[hardware_type]
        base_true = planning.true_cost(result.baseline_placements, launches, truth)
        rows = []
        for row in result.table.iter_rows(named=True):
            placed = result.placements[(hardware_type, row["count"])]
            true_saving = base_true - planning.true_cost(placed, launches, truth)
            rows.append({**row, "true_saving_usd": true_saving})
        at_logged = next(r for r in rows if r["count"] == round(capacity))
        per_type[hardware_type] = {
            "logged_capacity": capacity,
            "predicted_saving_usd": at_logged["saving_usd"],
            "saving_interval_usd": [at_logged["saving_low_usd"], at_logged["saving_high_usd"]],
            "true_saving_usd": at_logged["true_saving_usd"],
            "ratio": _ratio(at_logged["saving_usd"], at_logged["true_saving_usd"]),
            "saturation_count": result.saturation[hardware_type],
            "families_moving": at_logged["families_moving"],
            "baseline_cost_usd": result.baseline.cost,
            "counts": rows,
        }
        log(
            f"{hardware_type}: predicted saving {at_logged['saving_usd']:,.0f} USD, "
            f"true {at_logged['true_saving_usd']:,.0f}"
        )
    predicted = {h: v["predicted_saving_usd"] for h, v in per_type.items()}
    true = {h: v["true_saving_usd"] for h, v in per_type.items()}
    orders = {"leap": predicted, **planning.rule_scores(specs, list(per_type))}
    return {
        "window": [first_day.isoformat(), last_day.isoformat()],
        "launches": launches.height,
        "per_type": per_type,
        "within_20pct": sum(abs(v["ratio"] - 1) <= 0.2 for v in per_type.values()),
        "spearman": {name: planning.spearman(score, true) for name, score in orders.items()},
        "top_pick": {
            name: {"type": (best := max(score, key=score.get)), "true_saving_usd": true[best]}
            for name, score in {**orders, "truth": true}.items()
        },
    }


def _ratio(predicted: float, true: float) -> float:
    return predicted / true if true else (math.inf if predicted else 1.0)


def most_frequent_types(attempts: pl.DataFrame, n: int, skip: int = 0) -> list[str]:
    """The ``n`` types the window's attempts ran on most after the ``skip`` most (ties by
    name): the hold-outs, chosen by a rule fixed before any plan is scored. The most frequent
    ones are the test; the next ones choose a plan's settings without looking at them."""
    counts = (
        attempts.group_by("hardware_type")
        .len()
        .sort(["len", "hardware_type"], descending=[True, False])
    )
    return counts["hardware_type"].slice(skip, n).to_list()
