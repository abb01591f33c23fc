"""Nightly model assets: train on the 30 days before D, evaluate on D, publish behind the alias.

``cascade_model`` fits the cascade and its two reference models and selects the one to publish
(``selection.fit_models``); ``model_evaluation`` scores them on day D, logs the run and registers
the published model as a new version in MLflow, and decides each night's evaluation gate;
``evaluation`` keeps each night's scores as rows of the warehouse's ``evaluation`` table (Figure
8); ``production_model`` moves the ``production`` alias when the run is a nightly one (or promotion
was asked for) and the gate passed. The work lives in ``modeling`` (``training``, ``selection``,
``evaluation``, ``registry``); the asset bodies here and in ``night_evaluation`` and ``promotion``
only call it. Nights pass from one asset to the next through the ``night_records`` IO manager.

Each night is gated on its own, against the production model only when that model never saw the
night's day; the alias moves to the newest passing night of a run and never to a night older than
the one it names, so a backfill cannot move it backwards. A night computed again from the same
inputs (its fingerprint) reuses its published folder and its registered version.

The partitioned assets are built by ``model_assets(partitions)``, as the data assets are.
"""

import datetime as dt
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import dagster as dg
import numpy as np

from leap_pipeline.data.sources import Oracle, logged_source
from leap_pipeline.data.warehouse import Warehouse
from leap_pipeline.modeling.drift import PSI_WARN
from leap_pipeline.modeling.evaluation import SLICE_MAX_GAP, SLICE_MIN_ATTEMPTS
from leap_pipeline.orchestration.dagster_beta import beta_parameters_accepted
from leap_pipeline.orchestration.data_assets import SINGLE_RUN, partition_days
from leap_pipeline.orchestration.liveness import record_worker
from leap_pipeline.orchestration.locks import held
from leap_pipeline.orchestration.metadata import table_metadata
from leap_pipeline.orchestration.night_evaluation import evaluate_nights, record_evaluations
from leap_pipeline.orchestration.promotion import move_alias
from leap_pipeline.orchestration.resources import (
    MlflowResource,
    TrainingResource,
    WarehouseResource,
)
from leap_pipeline.settings import WINDOW_DAYS, TrainingSettings

# the fits' stack (scikit-learn, Numba, joblib) is imported in the steps that train: the
# definitions, which every step and run worker imports, load none of it
if TYPE_CHECKING:
    from leap_pipeline.modeling.training import NightInputs

WINDOW_POLL_S = 15.0  # how often a night waiting for its window looks again


def train_nights(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, training: TrainingResource
) -> dg.Output[dict[str, dict]]:
    """Night D (``training.run_night``): the cascade, the single GBDT and the lookup table
    trained on the days before D, the one of the first two that scored best on the window's
    last day published, and every model scored on D. Each day's record names the folder the
    night was published to, with what the registry needs of it. A night whose inputs did not
    change since it was published is reused, not fitted again."""
    from leap_pipeline.modeling.night_store import models_folder, reusable_night, save_trained
    from leap_pipeline.modeling.training import run_night

    record_worker(context)
    per_day, records = [], {}
    settings, wait_s = training.training_settings(), training.window_wait()
    # used only after the nights trained (model_evaluation, production_model): checked here, a bad
    # gate_floor, keep_versions or run_kind fails before hours of training
    training.gate_settings()
    training.registry_settings()
    with warehouse.open() as wh:
        for day in partition_days(context):
            inputs = _complete_inputs(context, wh, day, settings, wait_s)
            if inputs.rows.height == 0:
                records[day.isoformat()] = {"skipped": f"{day} has no measured attempt to score"}
                context.log.warning(f"{day}: no measured attempt, so no night to score: skipped")
                continue
            folder = models_folder(wh.path, day)
            with held(folder.with_name(f"{day.isoformat()}.lock"), f"night {day}"):
                reused = reusable_night(folder, inputs.fingerprint)
                if reused is None:
                    night = run_night(wh, day, settings, _oracle(wh, day), inputs=inputs)
                    record = {**night.record(), "fingerprint": inputs.fingerprint}
                    snapshot = wh.read("history_snapshot", day, day).drop("ds")
                    specs = wh.read("hardware_specs", day, day).drop("ds")
                    save_trained(
                        night.models,
                        folder,
                        snapshot,
                        specs,
                        training.profile,
                        night.evaluation,
                        record,
                    )
            if reused is not None:
                records[day.isoformat()] = {**reused, "folder": str(folder.resolve())}
                per_day.append({"ds": day.isoformat(), "reused": True, **_night_row(reused)})
                context.log.info(f"{day}: inputs unchanged since it was trained, reused {folder}")
                continue
            models = night.models
            records[day.isoformat()] = {**record, "folder": str(folder.resolve())}
            cascade = models.cascade
            per_day.append(
                {
                    "ds": day.isoformat(),
                    "reused": False,
                    **_night_row(record),
                    "seconds": round(sum(models.seconds.values()), 1),
                    "em_iterations": cascade.em_iterations_,
                    "bins": cascade.n_bins_,
                    "trees_per_expert": int(np.mean(cascade.n_trees_per_expert_)),
                }
            )
            context.log.info(f"trained {day}: {per_day[-1]}")
    last = per_day[-1] if per_day else {"rows": 0}
    columns = list(dict.fromkeys(k for r in per_day for k in r))  # a reused night has fewer
    return dg.Output(
        records,
        metadata={
            "training_rows": last["rows"],
            "nights_reused": sum(r["reused"] for r in per_day),
            "profile": training.profile,
            "per_day": table_metadata([{k: r.get(k) for k in columns} for r in per_day]),
        },
    )


def _complete_inputs(
    context: dg.AssetExecutionContext,
    wh: Warehouse,
    day: dt.date,
    settings: TrainingSettings,
    wait_s: float,
) -> "NightInputs":
    """Night ``day``'s inputs, once every day of its window has its features: runs overlap (a
    landing run beside a nightly one), so a night may start while its window still lands. It
    waits up to ``wait_s`` for them, saying which days it waits for, then fails having trained
    and registered nothing; the next tick asks for the night again."""
    from leap_pipeline.modeling.training import IncompleteWindow, night_inputs

    first_day = dt.date.fromisoformat(context.assets_def.partitions_def.get_first_partition_key())
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return night_inputs(wh, day, settings, first_day=first_day)
        except IncompleteWindow as exc:
            if time.monotonic() >= deadline:
                raise dg.Failure(
                    f"{exc}, still after {wait_s:g} s of waiting: not trained, nothing registered"
                    f"; materialize those days (or wait for the run landing them), then the night"
                ) from exc
            context.log.warning(f"{exc}: waiting for them (up to {wait_s:g} s)")
            time.sleep(min(WINDOW_POLL_S, max(0.0, deadline - time.monotonic())))
        except ValueError as exc:
            raise dg.Failure(f"{exc}: materialize the data assets for {day} first") from exc


def _night_row(record: dict) -> dict:
    selection = record["selection"]
    return {
        "rows": record["training_rows"],
        "published": selection["published"],
        "challenger_margin": round(selection["margin"], 3),
    }


@beta_parameters_accepted
def model_assets(partitions: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    """The four model assets over ``partitions``. ``cascade_model`` declares every feature day
    it reads, D-30 .. D, so lineage, staleness and backfills see day D too."""

    @dg.asset(
        name="cascade_model",
        deps=[
            dg.AssetDep(
                "feature_table",
                partition_mapping=dg.TimeWindowPartitionMapping(
                    start_offset=-WINDOW_DAYS,
                    end_offset=0,
                    allow_nonexistent_upstream_partitions=True,
                ),
            ),
            "history_snapshot",
            "hardware_specs",
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="model",
        io_manager_key="night_records",
    )
    def cascade_model(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource, training: TrainingResource
    ) -> dg.Output[dict[str, dict]]:
        """Train night D on D-30 .. D-1 and score it on D (or reuse it when nothing changed)."""
        return train_nights(context, warehouse, training)

    @dg.asset(
        name="model_evaluation",
        deps=["feature_table"],
        check_specs=[
            dg.AssetCheckSpec(
                "evaluation_gate",
                asset="model_evaluation",
                description="Each night's published model reaches the floor and is not more than "
                "the margin below a production model that never saw its day; fails when the "
                "newest night of the run fails.",
            ),
            dg.AssetCheckSpec(
                "interval_coverage",
                asset="model_evaluation",
                description="The newest night's 80% intervals cover 75-85% of day D's measured "
                "throughputs (a warning outside it); per hardware type and history class in the "
                "metadata.",
            ),
            dg.AssetCheckSpec(
                "feature_drift",
                asset="model_evaluation",
                description="Each feature's population stability index on the newest night's "
                f"day D against its training window, as a table; a warning when any is over "
                f"{PSI_WARN}.",
            ),
            dg.AssetCheckSpec(
                "slice_quality",
                asset="model_evaluation",
                description="The newest night's published w20 on each hardware type, frequency "
                f"band and history group of at least {SLICE_MIN_ATTEMPTS} attempts is no more "
                f"than {SLICE_MAX_GAP:.0%} below the whole day's (the long tail and cold starts "
                "included); a warning naming the slices below, every slice in the metadata.",
            ),
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="model",
        io_manager_key="night_records",
    )
    def model_evaluation(
        context: dg.AssetExecutionContext,
        cascade_model: dict[str, dict],
        warehouse: WarehouseResource,
        training: TrainingResource,
        mlflow_tracking: MlflowResource,
    ) -> Iterator[dg.Output | dg.AssetCheckResult]:
        """Night D logged and registered in MLflow, and its gate decided."""
        yield from evaluate_nights(context, cascade_model, warehouse, training, mlflow_tracking)

    @dg.asset(
        name="production_model",
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="model",
    )
    def production_model(
        context: dg.AssetExecutionContext,
        model_evaluation: dict[str, dict],
        training: TrainingResource,
        mlflow_tracking: MlflowResource,
    ) -> dg.MaterializeResult:
        """The ``production`` alias, moved forward to the newest passing night."""
        return move_alias(context, model_evaluation, training, mlflow_tracking)

    @dg.asset(
        name="evaluation",
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="model",
    )
    def evaluation(
        context: dg.AssetExecutionContext,
        model_evaluation: dict[str, dict],
        warehouse: WarehouseResource,
        mlflow_tracking: MlflowResource,
    ) -> dg.MaterializeResult:
        """The warehouse's ``evaluation`` table: each model's scores on day D, night after night."""
        return record_evaluations(context, model_evaluation, warehouse, mlflow_tracking)

    return [cascade_model, model_evaluation, evaluation, production_model]


def _oracle(wh, day: dt.date) -> Oracle | None:
    """The truth behind the day's measurements when its source has one (the simulator)."""
    source = logged_source(wh.read("source_log", day, day)["source"].to_list())
    return source.oracle() if source is not None else None
