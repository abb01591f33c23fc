"""Dagster definitions: the entry point `workspace.yaml` loads.

``build_definitions(calendar)`` is the one definition of the pipeline; Dagster loads
``defs`` lazily, from the installation's calendar file (``calendar.py``), so the UI, the daemon
and every run worker of one installation build the same partitions. In-process callers (the
demo, the report, tests) build theirs from the calendar they mean.
"""

import datetime as dt

import dagster as dg

from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.orchestration.dagster_private import without_definitions_state
from leap_pipeline.orchestration.data_assets import DATA_ASSET_KEYS, data_assets
from leap_pipeline.orchestration.failure_alerts import run_failure_alerts
from leap_pipeline.orchestration.liveness import PID_TAG, run_worker_alive
from leap_pipeline.orchestration.model_assets import model_assets
from leap_pipeline.orchestration.night_records import NightRecords
from leap_pipeline.orchestration.nightly_plan import (
    ATTEMPT_TAG,
    NIGHTS_TAG,
    NightlyState,
    plan_tick,
    tagged_days,
    whole_landings,
)
from leap_pipeline.orchestration.nightly_retry import (
    RETRY_INTERVAL_S,
    remember_missed_tick,
    retry_sensor,
    why_not_planned,
)
from leap_pipeline.orchestration.nightly_retry import SENSOR_NAME as RETRY_SENSOR
from leap_pipeline.orchestration.plan_asset import purchase_plan
from leap_pipeline.orchestration.report_asset import paper_report
from leap_pipeline.orchestration.resources import (
    MlflowResource,
    SourceResource,
    TrainingResource,
    WarehouseResource,
)
from leap_pipeline.orchestration.runs import run_days
from leap_pipeline.settings import MIN_WINDOW_DAYS, environment

MODEL_ASSET_KEYS = [
    dg.AssetKey(n) for n in ("cascade_model", "model_evaluation", "evaluation", "production_model")
]
LIVE = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
)


def run_is_alive(run: dg.DagsterRun) -> bool:
    """A run counts as live while Dagster says so and, once its worker recorded its process id
    on this machine, while that process exists: a worker killed with SIGKILL never reports its
    end, and its nights must not wait on it forever."""
    if run.status not in LIVE:
        return False
    worker = run.tags.get(PID_TAG)
    return True if not worker else run_worker_alive(run.run_id, worker)


def nightly_state(
    instance: dg.DagsterInstance,
    warehouse: WarehouseResource,
    source: SourceResource,
    mlflow_tracking: MlflowResource,
) -> NightlyState:
    """What happened, read from the records: the warehouse's landing log, the registry's
    versions, and the instance's runs."""
    from leap_pipeline.modeling import registry

    in_flight, failed = runs_state(instance)
    live = live_days(instance)  # before the warehouse reads: a landing ending between them
    logged, featured = warehouse.landed_days("source_log"), warehouse.landed_days("feature_table")
    live |= live_days(instance)  # ... or starting, is on one side or the other
    empty = set(warehouse.empty_days())
    refused = set(warehouse.refused_days())
    mlflow_tracking.configure()
    trained = {dt.date.fromisoformat(day) for day in registry.registered_nights()}
    landed = whole_landings(logged, set(featured), empty, live)
    adapter = source.source()
    return NightlyState(
        landed,
        trained,
        in_flight,
        adapter.has_day,
        failed,
        empty,
        refused,
        unbuilt=set(logged) - landed,
    )


def trains_nights(run: dg.DagsterRun) -> bool:
    """Whether ``run`` materializes a model asset, whoever launched it: then the day partitions
    it targets are nights being trained. A run of a whole job (no asset selection) trains unless
    the job is the data-only one."""
    if run.asset_selection is not None:
        return bool(set(run.asset_selection) & set(MODEL_ASSET_KEYS))
    return run.job_name != "daily_pipeline"


def live_days(instance: dg.DagsterInstance) -> set[dt.date]:
    """The day partitions every live run targets, landing or training."""
    return {
        day
        for record in instance.get_run_records(dg.RunsFilter(statuses=list(LIVE)))
        if run_is_alive(record.dagster_run)
        for day in tagged_days(record.dagster_run.tags)
    }


def runs_state(instance: dg.DagsterInstance) -> tuple[set[dt.date], dict[str, int]]:
    """The nights every live run trains (the schedule's, a backfill's, one a person launched
    from the UI or the CLI: read from Dagster's partition tags), and how many runs the schedule
    asked for of each span ended without finishing. A live run whose worker is gone is marked
    failed, saying so in its log, and trains nothing."""
    in_flight: set[dt.date] = set()
    for record in instance.get_run_records(dg.RunsFilter(statuses=list(LIVE))):
        run = record.dagster_run
        if not run_is_alive(run):  # its worker died without a word: say so in the run's log
            instance.report_run_failed(
                run, f"the run's process ({run.tags.get(PID_TAG)}) is gone: marked failed"
            )
        elif trains_nights(run):
            in_flight.update(tagged_days(run.tags))
    failed: dict[str, int] = {}
    planned = [  # the runs the nightly plan asked for: the schedule's, and its retry sensor's
        record
        for tags in (
            {"dagster/schedule_name": "nightly_schedule"},
            {"dagster/sensor_name": RETRY_SENSOR},
        )
        for record in instance.get_run_records(dg.RunsFilter(tags=tags))
    ]
    for record in planned:
        run = record.dagster_run  # read after the dead were marked: they count as failed
        if run.status in LIVE or run.status == dg.DagsterRunStatus.SUCCESS:
            continue
        for kind, tag in (("nightly", NIGHTS_TAG), ("land", "leap/landing")):
            span = run.tags.get(tag)
            if span is not None:
                key = f"{kind}:{span}"
                failed[key] = max(failed.get(key, 0), int(run.tags.get(ATTEMPT_TAG, "0")) + 1)
    return in_flight, failed


# what a run's forkserver imports before it forks each step: the libraries that take most of a
# step's start, but neither Polars nor MLflow (which imports Polars). Polars starts threads as it
# is imported, and its documentation warns that a process forked from one holding them may
# deadlock; each step imports Polars with the definitions, and MLflow only where it registers
# (the definitions import no MLflow: a landing's steps never load it)
STEP_PRELOAD_MODULES = (
    "dagster",
    "duckdb",
    "lightgbm",
    "numba",
    "pandas",
    "pyarrow",
    "scipy.stats",
    "sklearn.base",
)


def run_executor(max_concurrent_steps: int) -> dg.ExecutorDefinition:
    """How a run executes its steps (``$LEAP_MAX_CONCURRENT_STEPS``): one at a time in the run's
    own process (the default: no process to start per step), or each in a process of its own,
    that many at once (Dagster's multiprocess executor: a step that crashes its process fails
    alone). Either way they share the warehouse one operation at a time. ``execute_in_process``
    (``leap demo``, ``leap materialize``) always runs in its process.

    The step processes are forked from a forkserver that imported ``STEP_PRELOAD_MODULES`` once
    per run, not spawned: a spawned step imported all of them again, about 2.5 s of the 4 s a
    step took to import the project on 2 cores. After them, a step imports the definitions in
    0.43 s (1.6-1.8 s when they imported MLflow and the fits' stack, and Numba was not
    preloaded)."""
    if max_concurrent_steps == 1:
        return dg.in_process_executor
    preload = {"preload_modules": list(STEP_PRELOAD_MODULES)}
    return dg.multiprocess_executor.configured(
        {"max_concurrent": max_concurrent_steps, "start_method": {"forkserver": preload}}
    )


def build_definitions(calendar: Calendar) -> dg.Definitions:
    """The assets, jobs, schedule and resources over ``calendar``'s partitions, resolved here:
    Dagster resolves definitions lazily, and a resolve reads the definitions-state storage of
    whatever context it runs in (``dagster_private`` says how that fails); resolved in a context
    of its own, the repository is cached before any caller touches it."""

    def resolved() -> dg.Definitions:
        definitions = _definitions(calendar)
        definitions.get_repository_def()
        return definitions

    return without_definitions_state(resolved)


def _definitions(calendar: Calendar) -> dg.Definitions:
    partitions = calendar.partitions()
    data = data_assets(partitions)
    models = model_assets(partitions)
    daily_pipeline = dg.define_asset_job(
        "daily_pipeline",
        selection=dg.AssetSelection.assets(*DATA_ASSET_KEYS),
        description="Land the day's sources, build its history snapshot and feature table.",
    )
    nightly = dg.define_asset_job(
        "nightly",
        selection=dg.AssetSelection.assets(*DATA_ASSET_KEYS, *MODEL_ASSET_KEYS),
        description="Everything for day D: land, build features, train on D-30..D-1, evaluate "
        "on D, register, and move the production alias if the gate passes.",
    )
    training = dg.define_asset_job(
        "training",
        selection=dg.AssetSelection.assets(*MODEL_ASSET_KEYS),
        description="Train, evaluate and register for days whose feature tables already exist.",
    )

    @dg.schedule(
        name="nightly_schedule",
        job=nightly,
        cron_schedule="0 2 * * *",
        execution_timezone=calendar.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    def nightly_schedule(
        context: dg.ScheduleEvaluationContext,
        warehouse: WarehouseResource,
        source: SourceResource,
        training: TrainingResource,
        mlflow_tracking: MlflowResource,
    ) -> list[dg.RunRequest] | dg.SkipReason:
        """02:00 each night: every untrained night of the last week whose data can be read,
        with the days its window still lacks landed first; or why nothing runs. A warehouse
        busy past the read's wait: the ``nightly_retry`` sensor plans the tick again."""
        day = calendar.today(context.scheduled_execution_time) - dt.timedelta(days=1)
        try:
            return plan(context.instance, day, warehouse, source, training, mlflow_tracking)
        except Exception as exc:  # a busy warehouse, MLflow down, a bug: remembered, retried
            remember_missed_tick(context.instance, day)
            return dg.SkipReason(
                f"the tick cannot plan now ({why_not_planned(exc)}): the {RETRY_SENSOR} sensor "
                f"plans it again every {RETRY_INTERVAL_S // 60} minutes until it can"
            )

    def plan(
        instance: dg.DagsterInstance,
        day: dt.date,
        warehouse: WarehouseResource,
        source: SourceResource,
        training: TrainingResource,
        mlflow_tracking: MlflowResource,
    ) -> list[dg.RunRequest] | dg.SkipReason:
        """The tick for night ``day``, planned from the records (``WarehouseError`` when the
        warehouse cannot be read)."""
        state = nightly_state(instance, warehouse, source, mlflow_tracking)
        return plan_tick(
            day, calendar.first_day, state, training.window_days, MIN_WINDOW_DAYS, DATA_ASSET_KEYS
        )

    return dg.Definitions(
        assets=[*data, *models, paper_report, purchase_plan],
        jobs=[daily_pipeline, nightly, training],
        schedules=[nightly_schedule],
        sensors=[retry_sensor(nightly, plan), run_failure_alerts],
        resources={
            "source": SourceResource(default_uri=calendar.source),
            "warehouse": WarehouseResource(),
            "training": TrainingResource(),
            "mlflow_tracking": MlflowResource(),
            "night_records": NightRecords(),
        },
        executor=run_executor(environment().max_concurrent_steps),
    )


@dg.definitions
def defs() -> dg.Definitions:
    """What ``workspace.yaml`` loads: the pipeline over the installation's calendar."""
    return build_definitions(Calendar.load())


def installed_job(name: str) -> dg.JobDefinition:
    """The job ``name`` over the installation's calendar: what a run in processes of its own
    rebuilds by name (``dg.build_reconstructable_job(__name__, "installed_job", (name,))``), so
    it executes with the definitions' executor, the multiprocess one included."""
    return build_definitions(Calendar.load()).resolve_job_def(name)


def materialize_days(
    first: dt.date,
    last: dt.date,
    *,
    job_name: str = "daily_pipeline",
    calendar: Calendar | None = None,
    **options,
) -> dg.ExecuteInProcessResult:
    """Materialize the job ``job_name`` for days ``first`` .. ``last`` in one run, in this
    process (``runs.run_days`` takes the options: source, warehouse, training, ...). The
    partitions are ``calendar``'s, by default the installation's, starting no later than
    ``first``."""
    calendar = calendar or Calendar.load()
    if first < calendar.first_day:
        calendar = calendar.with_first_day(first)
    calendar.check_days(first, last)
    job = build_definitions(calendar).resolve_job_def(job_name)
    return run_days(job, first, last, **options)
