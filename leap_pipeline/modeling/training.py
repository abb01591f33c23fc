"""A night's training, stored between the Dagster assets that train, evaluate and publish it.

``data/models/<day>/`` holds the published model (the selection's winner as a ``LeapModel``
folder, history snapshot as of the day included), the cascade and the single GBDT that competed
for it, and the lookup table, so evaluation and registration read exactly what training wrote.
The folder is published atomically with a manifest of hashes: a crash mid-save leaves the
previous night's folder as it was.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from importlib.metadata import version

import polars as pl

from leap_pipeline.data.digest import frame_digest
from leap_pipeline.data.sources import Oracle
from leap_pipeline.data.warehouse import Warehouse
from leap_pipeline.modeling.drift import feature_drift
from leap_pipeline.modeling.evaluation import evaluate, evaluation_summary
from leap_pipeline.modeling.parallel import expert_backend
from leap_pipeline.modeling.routing import day_routing
from leap_pipeline.modeling.selection import (
    TrainedModels,
    fit_models,
    hyperparameters,
    training_window,
)
from leap_pipeline.settings import TrainingSettings

# part of a night's fingerprint: a night recorded by code that evaluated less (before drift and
# routing were measured) is computed again, not reused
EVALUATION_VERSION = 2


@dataclass(frozen=True)
class Night:
    """Night D computed: the models fitted on the window before D, and their evaluation on D."""

    day: dt.date
    window: pl.DataFrame  # the feature rows of the training window
    rows: pl.DataFrame  # day D's feature rows
    models: TrainedModels
    evaluation: dict  # ``evaluation.evaluate``'s result

    def record(self) -> dict:
        """What a registry needs of the night, as JSON: the window, its row count, the selection
        and the evaluation's summary."""
        return {
            "day": self.day.isoformat(),
            "window": [d.isoformat() for d in self.models.window],
            "training_rows": self.models.training_rows,
            "selection": self.models.selection,
            "evaluation": evaluation_summary(self.evaluation),
            "hyperparameters": hyperparameters(self.models),
        }


def _routing(wh: Warehouse, day: dt.date, models: TrainedModels, oracle: Oracle) -> dict:
    """``routing.day_routing`` of day D, served from the snapshot of D-1 as a launcher would
    have been; a replay that cannot run is recorded with its reason (a metric, never a reason
    for a night not to publish)."""
    before = day - dt.timedelta(days=1)
    if wh.count("history_snapshot", before) == 0:
        return {
            "error": f"no history snapshot for {before}: the launches of {day} cannot be "
            "ranked as they were served"
        }
    try:
        return day_routing(
            wh.read("job_attempts", day, day),
            wh.read("hardware_specs", day, day).drop("ds"),
            wh.read("history_snapshot", before, before).drop("ds"),
            models,
            oracle,
        )
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


@dataclass(frozen=True)
class NightInputs:
    """What night D reads: the window's feature rows and day D's, with a digest of both and of
    the settings, so a night computed again from the same inputs can be recognised."""

    day: dt.date
    window: pl.DataFrame
    rows: pl.DataFrame
    fingerprint: str


class IncompleteWindow(ValueError):
    """Days of a night's window have no features in the warehouse yet (another run may be
    landing them): a night trained now would learn from part of its window, be registered, and
    never be trained again."""

    def __init__(self, day: dt.date, missing: list[dt.date]) -> None:
        self.day, self.missing = day, missing
        shown = ", ".join(d.isoformat() for d in missing[:5]) + (" ..." if len(missing) > 5 else "")
        super().__init__(
            f"night {day}: {len(missing)} day(s) of its window (or the day itself) have no "
            f"feature table yet ({shown})"
        )


def window_gaps(wh: Warehouse, first: dt.date, last: dt.date) -> list[dt.date]:
    """Days ``first`` .. ``last`` with no feature rows that are not days landed with no measured
    attempt (those have no rows to have): the days a night's window still lacks."""
    built = set(wh.partitions("feature_table"))
    landed = wh.read("source_log", first, last) if wh.has("source_log") else pl.DataFrame()
    empty = set(landed.filter(pl.col("kept") == 0)["ds"]) if "kept" in landed.columns else set()
    days = (first + dt.timedelta(days=i) for i in range((last - first).days + 1))
    return [d for d in days if d not in built and d not in empty]


def night_inputs(
    wh: Warehouse, day: dt.date, settings: TrainingSettings, first_day: dt.date | None = None
) -> NightInputs:
    """Read night ``day``'s rows, the window and the day from one state of the warehouse (a
    short read session: the night trains after it, holding nothing). A night needs its day's
    features: an error names the day. With ``first_day`` (the calendar's first), every day of
    the window from then on must have its features too, else ``IncompleteWindow`` names them:
    checked when the night reads them, whatever the plan saw when it asked for the night."""
    first, last = training_window(day, settings.window_days)
    with wh.session():
        if wh.count("source_log", day) == 0:
            raise ValueError(f"day={day}: its sources have not landed, so it has no feature rows")
        # the day itself too: a landing that stopped before its feature table left no rows,
        # which read as "no measured attempt" and skipped the night as if it had none
        missing = window_gaps(wh, day, day)
        if first_day is not None and max(first, first_day) <= last:
            missing = window_gaps(wh, max(first, first_day), last) + missing
        if missing:
            raise IncompleteWindow(day, missing)
        window = wh.read("feature_table", first, last)
        rows = wh.read("feature_table", day, day)
    return NightInputs(day, window, rows, night_fingerprint(settings, window, rows))


def night_fingerprint(settings: TrainingSettings, window: pl.DataFrame, rows: pl.DataFrame) -> str:
    """The digest of what a night computes from: its settings, the code's version and its rows
    (``frame_digest``: the same bytes under any polars version, so an upgrade of a library does
    not make every night look new)."""
    digest = hashlib.sha256(
        repr((sorted(vars(settings).items()), version("leap"), EVALUATION_VERSION)).encode()
    )
    digest.update(frame_digest(window, rows).encode())
    return digest.hexdigest()


def run_night(
    wh: Warehouse,
    day: dt.date,
    settings: TrainingSettings | None = None,
    oracle: Oracle | None = None,
    inputs: NightInputs | None = None,
) -> Night:
    """The one computation of a night, for the assets and the report alike: fit on the
    ``settings.window_days`` before ``day`` (experts where ``settings`` says), score on ``day``,
    against the source's ``oracle`` when it has one. No Dagster, no MLflow."""
    settings = settings or TrainingSettings()
    inputs = inputs or night_inputs(wh, day, settings)
    window, rows = inputs.window, inputs.rows
    with expert_backend(settings.dask_scheduler):
        models = fit_models(
            window,
            day,
            profile=settings.profile,
            lookup_min_support=settings.lookup_min_support,
            cascade_params={"n_jobs": settings.n_jobs},
        )
    medians = oracle.true_medians(rows["attempt_id"].to_list()) if oracle is not None else None
    evaluation = evaluate(models, rows, medians)
    evaluation["drift"] = feature_drift(window, rows)
    if oracle is not None:  # what routing by the night's model is worth on day D, from the truth
        evaluation["routing"] = _routing(wh, day, models, oracle)
        # per launch, too long for the night's files: for a replay across nights (the report)
        evaluation["routing_launches"] = evaluation["routing"].pop("launches", None)
    return Night(day, window, rows, models, evaluation)
