"""What a model loses as it ages: the report's first night's model served on every later day.

A night that fails leaves yesterday's model behind the alias, with yesterday's history snapshot;
a schedule that stops leaves an older one. The report keeps its first night's published model as
the Ranker would serve it (``selection.serving_model``: its trees, and the history snapshot it
shipped with) and, on each later night, scores it beside that night's fresh model on the same
day D, both through the Ranker, so the only difference is the model's age (the ML Test Score's
"the impact of model staleness is known").
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from leap_pipeline.modeling.routing import rank_day
from leap_serving.decide import metrics
from leap_serving.decide.ranker import Ranker
from leap_serving.model.published import LeapModel

W20 = 20


def served_predictions(model: LeapModel, attempts: pl.DataFrame, day: dt.date) -> np.ndarray:
    """The throughput ``model`` predicts, through the Ranker as a launcher asks it on ``day``,
    for each attempt on the hardware type it ran on (NaN where the Ranker gives none)."""
    ranker = Ranker(model=model, wait=True, max_model_age_days=None)
    own_type = attempts.with_columns(candidate_hardware=pl.concat_list("hardware_type"))
    rankings = rank_day(ranker, own_type, day)
    return np.array(
        [
            r.ranking[0].predicted_throughput if r.ranking else np.nan
            for r in (rankings[a] for a in attempts["attempt_id"])
        ],
        dtype=float,
    )


def staleness_scores(
    fresh: LeapModel, aged: LeapModel, aged_day: dt.date, attempts: pl.DataFrame, day: dt.date
) -> dict:
    """w20 on day D's measured attempts of the night's ``fresh`` model and of ``aged``, the model
    published on ``aged_day``, both served through the Ranker."""
    measured = attempts.filter(pl.col("throughput") > 0)
    q = measured["throughput"].to_numpy()
    return {
        "model_age_days": (day - aged_day).days,
        "fresh_w20": metrics.within(served_predictions(fresh, measured, day), q, W20),
        "aged_w20": metrics.within(served_predictions(aged, measured, day), q, W20),
        "rows": int(measured.height),
    }


def staleness_summary(per_night: list[dict]) -> dict | None:
    """Per model age in days, the w20 the aged model lost against the fresh one on that day
    (positive: the fresh model is better), and the oldest age's loss."""
    scored = [n["staleness"] for n in per_night if n.get("staleness") is not None]
    if not scored:
        return None
    lost = [
        {"model_age_days": s["model_age_days"], "w20_lost": s["fresh_w20"] - s["aged_w20"]}
        for s in scored
    ]
    oldest = max(lost, key=lambda entry: entry["model_age_days"])
    return {
        "w20_lost_by_age": lost,
        "oldest_age_days": oldest["model_age_days"],
        "w20_lost_oldest": oldest["w20_lost"],
        "w20_lost_median": float(np.median([entry["w20_lost"] for entry in lost])),
    }
