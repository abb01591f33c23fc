"""A nightly tick that could not plan is tried again within minutes, not the next night.

The 02:00 tick reads what happened from the warehouse, which a run may hold for longer than the
read waits (a day landing, a long write). The schedule then has nothing to plan from; its next
tick is 24 hours away, and a night would be lost for a day. The same holds for any other failure of
the plan: MLflow down at 02:00 (its registered nights are read), a source that cannot be listed,
a bug. So the tick remembers the night it missed in the instance's key-value store (the
instance's database: every host of the service sees it), and the ``nightly_retry`` sensor,
evaluated every ``RETRY_INTERVAL_S``, plans that tick again until the plan succeeds, then forgets
it. With no tick missed the sensor does nothing:
the schedule stays the only planner of a normal night.
"""

import datetime as dt
from collections.abc import Callable

import dagster as dg

from leap_pipeline.data.warehouse import WarehouseError
from leap_pipeline.orchestration.resources import (
    MlflowResource,
    SourceResource,
    TrainingResource,
    WarehouseResource,
)

MISSED_TICK_KEY = "leap/nightly_missed_tick"  # the day of the last tick the warehouse refused
RETRY_INTERVAL_S = 300  # how often the sensor looks again: a busy warehouse is minutes, not hours
SENSOR_NAME = "nightly_retry"

Plan = Callable[..., list[dg.RunRequest] | dg.SkipReason]


def missed_tick(instance: dg.DagsterInstance) -> dt.date | None:
    """The day of the nightly tick that could not read the warehouse, if one is waiting."""
    value = instance.run_storage.get_cursor_values({MISSED_TICK_KEY}).get(MISSED_TICK_KEY)
    try:
        return dt.date.fromisoformat(value) if value else None
    except ValueError:  # not one this code wrote: nothing to retry
        return None


def remember_missed_tick(instance: dg.DagsterInstance, day: dt.date) -> None:
    """Record that the tick for night ``day`` could not plan (a later tick's day
    replaces an earlier one's: its plan covers the earlier nights too)."""
    earlier = missed_tick(instance)
    if earlier is None or earlier <= day:
        instance.run_storage.set_cursor_values({MISSED_TICK_KEY: day.isoformat()})


def forget_missed_tick(instance: dg.DagsterInstance, day: dt.date) -> None:
    """The tick for ``day`` was planned: forget it, unless a later tick has missed since."""
    if missed_tick(instance) == day:
        instance.run_storage.set_cursor_values({MISSED_TICK_KEY: ""})


def why_not_planned(exc: Exception) -> str:
    """What stopped a tick's plan, in the words an operator reads on the tick."""
    if isinstance(exc, WarehouseError):
        return f"the warehouse cannot be read now: {exc}"
    return f"{type(exc).__name__}: {exc}"


def retry_sensor(job, plan: Plan) -> dg.SensorDefinition:
    """The sensor that plans a missed tick again; ``plan(instance, day, warehouse, source,
    training, mlflow_tracking)`` is the schedule's own plan, which raises when it cannot plan
    (``WarehouseError`` for a busy warehouse, ``RegistryUnavailable`` for MLflow, ...)."""

    @dg.sensor(
        name=SENSOR_NAME,
        job=job,
        minimum_interval_seconds=RETRY_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Plans a nightly tick again, every few minutes, when the tick found the "
        "warehouse busy; otherwise does nothing.",
    )
    def nightly_retry(
        context: dg.SensorEvaluationContext,
        warehouse: WarehouseResource,
        source: SourceResource,
        training: TrainingResource,
        mlflow_tracking: MlflowResource,
    ) -> list[dg.RunRequest] | dg.SkipReason:
        day = missed_tick(context.instance)
        if day is None:
            return dg.SkipReason("no nightly tick is waiting to be planned again")
        try:
            planned = plan(context.instance, day, warehouse, source, training, mlflow_tracking)
        except Exception as exc:  # any failure: the night stays remembered, tried again
            return dg.SkipReason(
                f"the tick for night {day} still cannot plan ({why_not_planned(exc)}): again in "
                f"{RETRY_INTERVAL_S // 60} minutes"
            )
        forget_missed_tick(context.instance, day)
        context.log.info(f"planned the nightly tick for {day} again")
        return planned

    return nightly_retry
