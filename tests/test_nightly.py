"""The calendar every process shares, and the nightly schedule's plan read from what happened."""

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from leap_pipeline.orchestration.calendar import CALENDAR_FILE, Calendar
from leap_pipeline.orchestration.definitions import build_definitions, materialize_days
from leap_pipeline.orchestration.nightly_plan import (
    MAX_RELANDINGS,
    NIGHTS_TAG,
    NightlyState,
    plan_tick,
    whole_landings,
)
from leap_pipeline.orchestration.resources import (
    MlflowResource,
    SourceResource,
    TrainingResource,
    WarehouseResource,
)
from leap_pipeline.settings import DATA_ENV
from leap_pipeline.simulation import SPAN_START

SOURCE = "simulator:seed=3,scale=0.02"
LANDING = [dg.AssetKey("feature_table")]
FIRST = SPAN_START


def _day(n: int) -> dt.date:
    return FIRST + dt.timedelta(days=n - 1)


def _days(a: int, b: int) -> list[dt.date]:
    return [_day(n) for n in range(a, b + 1)]


def _plan(day, landed, trained=(), in_flight=(), has_day=lambda d: True, failed=None, empty=(),
          refused=(), unbuilt=()):  # fmt: skip
    state = NightlyState(
        set(landed), set(trained), set(in_flight), has_day, failed or {}, empty, refused, unbuilt
    )
    return plan_tick(_day(day), FIRST, state, 30, 7, LANDING)


# -- the calendar ---------------------------------------------------------------------------------


def test_the_calendar_is_open_ended_and_holds_every_closed_day():
    calendar = Calendar(first_day=dt.date(2026, 11, 1), timezone="UTC")
    noon = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
    keys = calendar.partitions().get_partition_keys(current_time=noon)
    assert keys[0] == "2026-11-01" and keys[-1] == "2026-11-19"  # yesterday, not today
    # a day later the next day has its partition: the set grows by itself
    later = calendar.partitions().get_partition_keys(current_time=noon + dt.timedelta(days=1))
    assert later[-1] == "2026-11-20"


def test_a_day_closes_in_the_calendars_timezone():
    calendar = Calendar(first_day=dt.date(2026, 11, 1), timezone="America/Los_Angeles")
    # 03:00 UTC on the 20th is still the 19th in Los Angeles: the 18th is the last closed day
    at = dt.datetime(2026, 11, 20, 3, tzinfo=dt.UTC)
    assert calendar.last_closed_day(at) == dt.date(2026, 11, 18)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('first_day = "yesterday"', "first_day='yesterday'"),
        ('timezone = "Mars/Olympus"', "timezone='Mars/Olympus'"),
        ('colour = "blue"', "unknown field(s) ['colour']"),
    ],
)
def test_a_bad_calendar_file_is_an_error_naming_the_field(tmp_path, text, names):
    (tmp_path / CALENDAR_FILE).write_text(text + "\n")
    with pytest.raises(ValueError, match=__import__("re").escape(names)):
        Calendar.load(tmp_path)


def test_a_process_id_is_told_apart_from_its_reuse():
    from leap_pipeline.orchestration.liveness import process_alive, process_identity

    me = process_identity(os.getpid())
    assert process_alive(me)
    assert not process_alive(me.partition(":")[0] + ":0")  # same id, another start time
    assert not process_alive("4194999")


def test_a_worker_is_known_by_psutils_start_time_and_a_zombie_is_dead():
    """The identity is psutil's (its start time in seconds since the epoch); a worker that exited
    and was not reaped yet (a zombie) is dead; an identity recorded before, in clock ticks since
    boot, still names its process, so a run that outlives an upgrade is not taken for dead."""
    import psutil

    from leap_pipeline.orchestration.liveness import process_alive, process_identity

    me = process_identity(os.getpid())
    assert float(me.partition(":")[2]) == pytest.approx(psutil.Process().create_time(), abs=0.01)
    ticks = Path(f"/proc/{os.getpid()}/stat").read_text().rpartition(")")[2].split()[19]
    assert process_alive(f"{os.getpid()}:{ticks}")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        identity = process_identity(child.pid)
        deadline = time.monotonic() + 30
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not reaped
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not process_alive(identity)
    finally:
        child.wait()


def test_every_process_of_an_installation_builds_the_same_partitions(tmp_path):
    """Two fresh processes pointed at one data folder load the same first day, whatever their
    own environment says about sources: nothing is scanned at import."""
    Calendar(first_day=dt.date(2026, 10, 3), source=SOURCE).save(tmp_path)
    script = (
        "import leap_pipeline.orchestration.definitions as d\n"
        "defs = d.defs()\n"
        "p = defs.resolve_job_def('nightly').partitions_def\n"
        "print(p.get_first_partition_key())"
    )
    outputs = set()
    for source in ("", "files:/nowhere"):
        env = {**os.environ, DATA_ENV: str(tmp_path), "LEAP_SOURCE": source}
        run = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env
        )
        assert run.returncode == 0, run.stderr[-2000:]
        outputs.add(run.stdout.strip())
    assert outputs == {"2026-10-03"}


# -- the plan -------------------------------------------------------------------------------------


def test_a_complete_window_runs_the_night():
    (night,) = _plan(40, landed=_days(1, 39), trained=_days(8, 39))
    assert night.asset_selection is None and night.tags[NIGHTS_TAG] == f"{_day(40)}..{_day(40)}"


def test_a_day_with_no_launches_is_landed_and_has_no_night():
    """Day 38 landed with no launches: it counts as landed (the window is complete), and its
    night is not asked for, since there is nothing to score."""
    (night,) = _plan(40, landed=_days(1, 39), trained=_days(8, 37), empty=[_day(38)])
    assert night.asset_selection is None and night.tags[NIGHTS_TAG] == f"{_day(39)}..{_day(40)}"


def test_an_empty_day_of_a_files_source_is_recorded_as_landed(tmp_path):
    import polars as pl

    from leap_pipeline.data.sources import SimulatorSource

    simulator = SimulatorSource(seed=3, scale=0.02)
    root = tmp_path / "logs"
    for n in (1, 2, 3):
        day = simulator.read_day(_day(n))
        attempts = day.attempts.with_columns(pl.col(pl.List(pl.String)).list.join(";"))
        if n == 2:  # a day with no launches: the files are there, with no rows
            attempts, allocations = attempts.clear(), day.allocations.clear()
        else:
            allocations = day.allocations
        for frame, name in ((attempts, "job_attempts"), (allocations, "allocations")):
            (root / name).mkdir(parents=True, exist_ok=True)
            frame.write_csv(root / name / f"{_day(n)}.csv")
        day.hardware_specs.write_parquet(root / "hardware_specs.parquet")
    warehouse = WarehouseResource(path=str(tmp_path / "leap.duckdb"))
    materialize_days(_day(1), _day(3), source=f"files:{root}", warehouse=warehouse.path,
                     log_level="ERROR")  # fmt: skip
    assert warehouse.landed_days("source_log") == _days(1, 3)
    assert warehouse.landed_days("feature_table") == [_day(1), _day(3)]
    assert warehouse.empty_days() == [_day(2)]


def test_a_window_with_a_day_never_landed_lands_it_first_then_trains_tonight():
    landing, night = _plan(40, landed=[d for d in _days(1, 39) if d != _day(25)],
                           trained=_days(8, 39))  # fmt: skip
    assert landing.asset_selection == LANDING
    assert landing.tags["dagster/asset_partition_range_start"] == _day(25).isoformat()
    assert landing.tags["dagster/asset_partition_range_end"] == _day(25).isoformat()
    assert night.tags[NIGHTS_TAG] == f"{_day(40)}..{_day(40)}"


def test_a_day_whose_landing_died_before_its_features_is_landed_again():
    """A landing killed after the source tables and before the feature table: day 25 is in the
    landing log with no features. It counts as landed only while a live run is on it; else the
    plan lands it again before tonight's night, as it would a day never landed."""
    logged, featured = set(_days(1, 39)), set(_days(1, 39)) - {_day(25)}
    assert whole_landings(logged, featured, empty=(), live=()) == featured
    assert whole_landings(logged, featured, empty=(), live={_day(25)}) == logged
    assert whole_landings(logged, featured, empty={_day(25)}, live=()) == logged  # no attempts
    landed = whole_landings(logged, featured, empty=(), live=())
    landing, night = _plan(40, landed=landed, trained=_days(8, 39))
    assert landing.tags["dagster/asset_partition_range_start"] == _day(25).isoformat()
    assert landing.tags["dagster/asset_partition_range_end"] == _day(25).isoformat()
    assert night.tags[NIGHTS_TAG] == f"{_day(40)}..{_day(40)}"
    # an audit that refuses the day's snapshot or features is not in the landing log: after
    # MAX_RELANDINGS failed landings of it the plan stops asking and says what to do
    state = dict(landed=landed, trained=_days(8, 39))
    failed = {f"land:{_day(25)}..{_day(25)}": 1}
    again = _plan(40, **state, failed=failed, unbuilt={_day(25)})
    assert again[0].run_key == f"land:{_day(25)}..{_day(25)}:retry1"
    failed = {f"land:{_day(20)}..{_day(30)}": 1, f"land:{_day(25)}..{_day(25)}": 1}  # summed
    assert MAX_RELANDINGS == 2
    stuck = _plan(40, **state, failed=failed, unbuilt={_day(25)})
    assert isinstance(stuck, dg.SkipReason)
    assert f"fix the day and materialize {_day(25)}" in stuck.skip_message
    # and one the source no longer holds is named as such, not as a day yet to arrive
    gone = _plan(40, **state, has_day=lambda d: d != _day(25), unbuilt={_day(25)})
    assert "landed without its features and is no longer in the source" in gone.skip_message


def test_a_late_day_is_waited_for_then_its_night_is_caught_up():
    late = _day(40)
    waiting = _plan(40, landed=_days(1, 39), trained=_days(8, 39), has_day=lambda d: d != late)
    assert isinstance(waiting, dg.SkipReason) and str(late) in waiting.skip_message
    # the next tick, the day has arrived: both nights run, nothing is lost
    (both,) = _plan(41, landed=_days(1, 39), trained=_days(8, 39))
    assert both.tags[NIGHTS_TAG] == f"{_day(40)}..{_day(41)}"


def test_a_night_being_trained_is_not_asked_for_twice_and_a_dead_run_is_retried():
    busy = _plan(40, landed=_days(1, 40), trained=_days(8, 39), in_flight=[_day(40)])
    assert isinstance(busy, dg.SkipReason) and "being trained" in busy.skip_message
    span = f"nightly:{_day(40)}..{_day(40)}"
    (retry,) = _plan(40, landed=_days(1, 40), trained=_days(8, 39), failed={span: 1})
    assert retry.run_key == f"{span}:retry1"


def test_a_range_never_covers_a_night_another_run_trains():
    """Nights 37-40 untrained, 38 trained by another live run: two runs, neither holds 38."""
    requests = _plan(40, landed=_days(1, 40), trained=_days(8, 36), in_flight=[_day(38)])
    assert [r.tags[NIGHTS_TAG] for r in requests] == [
        f"{_day(37)}..{_day(37)}",
        f"{_day(39)}..{_day(40)}",
    ]


def test_every_live_run_that_trains_nights_counts_as_in_flight_whoever_launched_it():
    """A backfill's run, a night a person materialized and the schedule's own run are in
    flight; a landing run, a finished run and a run whose worker is gone are not, and the last
    is marked failed, which the schedule counts as a failed attempt of its span."""
    from leap_pipeline.orchestration.definitions import MODEL_ASSET_KEYS, runs_state
    from leap_pipeline.orchestration.liveness import PID_TAG
    from leap_pipeline.orchestration.nightly_plan import ATTEMPT_TAG

    live, done = dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.SUCCESS

    def span(a, b, **tags):
        return {"dagster/asset_partition_range_start": _day(a).isoformat(),
                "dagster/asset_partition_range_end": _day(b).isoformat(), **tags}  # fmt: skip

    everything = {*MODEL_ASSET_KEYS, *LANDING}
    schedule = {"dagster/schedule_name": "nightly_schedule", ATTEMPT_TAG: "0"}
    runs = {
        "backfill": ("__ASSET_JOB", everything, live, span(20, 22, **{"dagster/backfill": "b1"})),
        "ui": ("__ASSET_JOB", {dg.AssetKey("model_evaluation")}, dg.DagsterRunStatus.STARTING,
               {"dagster/partition": _day(25).isoformat()}),
        "schedule": ("nightly", None, live, span(27, 27, **schedule,
                                                 **{NIGHTS_TAG: f"{_day(27)}..{_day(27)}"})),
        "landing": ("daily_pipeline", None, live, span(30, 31)),
        "finished": ("training", None, done, span(33, 33)),
        "killed": ("nightly", None, live, span(35, 35, **schedule, **{
            NIGHTS_TAG: f"{_day(35)}..{_day(35)}", PID_TAG: "4194999:1.00"})),
    }  # fmt: skip
    instance = dg.DagsterInstance.ephemeral()
    for run_id, (job, selection, status, tags) in runs.items():
        instance.add_run(
            dg.DagsterRun(job_name=job, run_id=run_id, asset_selection=selection, status=status,
                          tags=tags)
        )  # fmt: skip
    in_flight, failed = runs_state(instance)
    assert in_flight == {*_days(20, 22), _day(25), _day(27)}
    assert instance.get_run_by_id("killed").status == dg.DagsterRunStatus.FAILURE
    assert failed == {f"nightly:{_day(35)}..{_day(35)}": 1}


def test_a_lock_held_past_its_wait_fails_naming_the_lock_the_file_and_the_wait(tmp_path):
    """A waiter gives up after ``$LEAP_LOCK_WAIT_S`` (a setting: 3600 s by default, 0-86400)
    with an error naming the lock, its file and the wait; run in a process of its own, so a
    wait that never ends fails the test instead of hanging it."""
    from filelock import FileLock

    from leap_pipeline.settings import environment

    assert environment({}).lock_wait_s == 3600.0
    with pytest.raises(ValueError, match=r"^LEAP_LOCK_WAIT_S='-1': "):
        environment({"LEAP_LOCK_WAIT_S": "-1"})
    path = tmp_path / "locks" / "night.lock"
    path.parent.mkdir()
    waiter = (
        "from leap_pipeline.orchestration.locks import held\n"
        f"with held({str(path)!r}, 'night 2026-01-10'):\n"
        "    print('acquired')\n"
    )
    with FileLock(path):  # another run holds the night
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-c", waiter], capture_output=True, text=True, timeout=120,
            env={**os.environ, "LEAP_LOCK_WAIT_S": "0.5"},
        )  # fmt: skip
    assert result.returncode != 0 and "acquired" not in result.stdout
    assert time.monotonic() - started < 60
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("leap_pipeline.orchestration.locks.LockTimeout: night 2026-01-10:")
    assert str(path) in message and "after 0.5 s" in message and "LEAP_LOCK_WAIT_S" in message
    # free again, the lock is taken at once
    ok = subprocess.run([sys.executable, "-c", waiter], capture_output=True, text=True,
                        timeout=120, env={**os.environ, "LEAP_LOCK_WAIT_S": "0.5"})  # fmt: skip
    assert ok.returncode == 0 and "acquired" in ok.stdout


def test_a_refused_day_holds_its_nights_saying_what_to_fix_instead_of_retrying():
    landed = [d for d in _days(1, 39) if d != _day(38)]
    blocked = _plan(40, landed=landed, trained=_days(8, 37), refused=[_day(38)])
    assert isinstance(blocked, dg.SkipReason)
    assert f"{_day(38)}, whose landing was refused" in blocked.skip_message


def test_nothing_before_the_first_night_but_landing():
    (landing,) = _plan(5, landed=_days(1, 3))
    assert (
        landing.asset_selection == LANDING
        and landing.tags["dagster/asset_partition_range_start"] == _day(4).isoformat()
    )
    skipped = _plan(5, landed=_days(1, 5))
    assert isinstance(skipped, dg.SkipReason) and "first night" in skipped.skip_message


# -- the schedule on real records ------------------------------------------------------------------


def test_the_schedule_trains_each_night_once_from_the_records(tmp_path, monkeypatch):
    """On a warehouse holding days 1-9 and no model, the tick for day 9 asks for nights 8-9
    (the catch-up), that run registers them, and the next evaluation of the same tick has
    nothing left to do."""
    warehouse, store = tmp_path / "leap.duckdb", tmp_path / "mlflow"
    materialize_days(_day(1), _day(9), source=SOURCE, warehouse=str(warehouse), log_level="ERROR")
    defs = build_definitions(Calendar(first_day=FIRST, source=SOURCE))
    resources = {
        "warehouse": WarehouseResource(path=str(warehouse)),
        "source": SourceResource(uri=SOURCE),
        "training": TrainingResource(),
        "mlflow_tracking": MlflowResource(store=str(store)),
    }
    schedule = defs.get_schedule_def("nightly_schedule")

    def tick(instance):
        at = dt.datetime.combine(_day(10), dt.time(2), tzinfo=dt.UTC)
        context = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=at, resources=resources,
            repository_def=defs.get_repository_def(),
        )  # fmt: skip
        return schedule.evaluate_tick(context)

    # a persistent instance of the test's own; not dg.instance_for_test(), which leaves its
    # definitions-state storage set in the process after it exits (Dagster 1.13)
    from leap_pipeline.orchestration.instance import DAGSTER_YAML

    (tmp_path / "dagster").mkdir()
    (tmp_path / "dagster" / "dagster.yaml").write_text(DAGSTER_YAML)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    instance = dg.DagsterInstance.get()
    # a run holds the warehouse past the tick's wait: the tick says so and remembers the night,
    # and the retry sensor plans it once the warehouse answers (not 24 hours later)
    retry = defs.get_sensor_def("nightly_retry")

    def sensor():
        context = dg.build_sensor_context(instance=instance, resources=resources,
                                          repository_def=defs.get_repository_def())  # fmt: skip
        return retry.evaluate_tick(context)

    assert "no nightly tick is waiting" in sensor().skip_message
    from leap_pipeline.orchestration import resources as resources_module

    monkeypatch.setattr(resources_module, "PLAN_READ_WAIT_S", 0.5)  # not 5 s per read here
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
         "print('open', flush=True); time.sleep(120)", str(warehouse)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "open"
        missed = tick(instance)
        assert not missed.run_requests and "nightly_retry sensor plans it again" in (
            missed.skip_message
        )
        assert "the warehouse cannot be read now" in sensor().skip_message
    finally:
        holder.kill()
        holder.wait()
    # MLflow answers 503 on every read: the tick's plan fails, and is remembered, not lost for a
    # day (only "does not exist" would have read as "no night trained")
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import ErrorCode

    def unavailable(*args, **kwargs):
        raise MlflowException("503 Service Unavailable", ErrorCode.Value("TEMPORARILY_UNAVAILABLE"))

    with monkeypatch.context() as blip:
        blip.setattr(MlflowClient, "search_model_versions", unavailable)
        missed = tick(instance)
        assert not missed.run_requests and "RegistryUnavailable" in missed.skip_message
        assert "still cannot plan (RegistryUnavailable" in sensor().skip_message
    (retried,) = sensor().run_requests
    assert retried.tags[NIGHTS_TAG] == f"{_day(8)}..{_day(9)}"
    assert "no nightly tick is waiting" in sensor().skip_message  # planned once, then forgotten
    (night,) = tick(instance).run_requests
    assert night.tags[NIGHTS_TAG] == f"{_day(8)}..{_day(9)}"
    result = defs.resolve_job_def("nightly").execute_in_process(
        instance=instance,
        tags={**night.tags, "dagster/schedule_name": "nightly_schedule"},
        run_config={"resources": {
            "source": {"config": {"uri": SOURCE}},
            "warehouse": {"config": {"path": str(warehouse)}},
            "mlflow_tracking": {"config": {"store": str(store)}},
            "training": {"config": {"profile": "quick", "lookup_min_support": 2,
                                    "gate_floor": 0.0}},
        }},
    )  # fmt: skip
    assert result.success
    again = tick(instance)
    assert not again.run_requests and "trained" in again.skip_message


def test_after_the_demo_the_ui_process_plans_the_next_night_and_a_rerun_reuses(
    small_demo, tmp_path
):
    """A small demo (``conftest.small_demo``), then a process configured as ``leap ui``
    configures it evaluates the schedule for the night after the demo's last day: a run request.
    A second demo on the same data registers no new version."""
    data = small_demo.data
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", DATA_ENV)}
    # the headline carries the published model's intervals, scored on the evaluation day
    intervals = json.loads(small_demo.stdout.strip().splitlines()[-1])["intervals"]
    assert intervals["level"] == 0.8 and 0.0 < intervals["coverage"] <= 1.0
    assert "80% intervals: cover" in small_demo.stdout
    calendar = Calendar.load(data)
    last = calendar.first_day + dt.timedelta(days=small_demo.days - 1)
    assert last == calendar.last_closed_day() - dt.timedelta(days=1)  # yesterday is left open
    from leap_pipeline.app.ui import ui_environment

    script = f"""
import datetime as dt, dagster as dg
import leap_pipeline.orchestration.definitions as d
defs = d.defs()
schedule = defs.get_schedule_def("nightly_schedule")
at = dt.datetime.fromisoformat("{last + dt.timedelta(days=2)}T02:00:00+00:00")
with dg.instance_for_test() as instance:
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=at,
        resources=defs.resources, repository_def=defs.get_repository_def())
    result = schedule.evaluate_tick(context)
print([r.tags.get("{NIGHTS_TAG}") for r in result.run_requests or []], result.skip_message)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=ui_environment(data), cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    next_night = last + dt.timedelta(days=1)
    assert f"['{next_night}..{next_night}']" in run.stdout, run.stdout
    second = subprocess.run(
        [*small_demo.command, "--json"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "reused version(s) 1" in second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1])["model_uri"].endswith("@production")


# -- lineage and write-audit-publish -------------------------------------------------------------


def test_the_model_declares_every_feature_day_it_reads_day_d_included():
    defs = build_definitions(Calendar(first_day=FIRST))
    graph = defs.resolve_asset_graph()
    mapping = graph.get(dg.AssetKey("cascade_model")).partition_mappings[
        dg.AssetKey("feature_table")
    ]
    assert (mapping.start_offset, mapping.end_offset) == (-30, 0)
    # so Dagster plans day D's features before the night that scores on them
    upstream = graph.get_parent_partition_keys_for_child(
        "2026-02-10", dg.AssetKey("feature_table"), dg.AssetKey("cascade_model")
    )
    keys = upstream.partitions_subset.get_partition_keys()
    assert "2026-02-10" in keys and "2026-01-11" in keys and len(keys) == 31


def test_a_day_that_fails_its_audit_is_not_published_and_keeps_its_rows(tmp_path):
    """Day 1 landed; its files then arrive again with every row broken: the check fails, and the
    day's rows are the ones published before, never the rejected ones."""
    import polars as pl

    from leap_pipeline.data.sources import SimulatorSource
    from leap_pipeline.data.warehouse import open_warehouse

    root = tmp_path / "logs"
    day = SimulatorSource(seed=3, scale=0.02).read_day(_day(1))
    attempts = day.attempts.with_columns(pl.col(pl.List(pl.String)).list.join(";"))
    for name in ("job_attempts", "allocations"):
        (root / name).mkdir(parents=True)
    day.hardware_specs.write_parquet(root / "hardware_specs.parquet")
    day.allocations.write_csv(root / "allocations" / f"{_day(1)}.csv")
    attempts.write_csv(root / "job_attempts" / f"{_day(1)}.csv")
    warehouse = str(tmp_path / "leap.duckdb")
    materialize_days(_day(1), _day(1), source=f"files:{root}", warehouse=warehouse,
                     log_level="ERROR")  # fmt: skip
    with open_warehouse(warehouse, read_only=True) as wh:
        before = wh.read("job_attempts", _day(1), _day(1))
        logged = wh.read("source_log")
    attempts.with_columns(batch_size=pl.lit("-5")).write_csv(
        root / "job_attempts" / f"{_day(1)}.csv"
    )
    result = materialize_days(_day(1), _day(1), source=f"files:{root}", warehouse=warehouse,
                              log_level="CRITICAL", raise_on_error=False)  # fmt: skip
    (check,) = [e for e in result.get_asset_check_evaluations()
                if e.check_name == "attempts_landed"]  # fmt: skip
    assert not check.passed and "rows rejected" in check.metadata["days_refused"].value
    with open_warehouse(warehouse, read_only=True) as wh:
        assert wh.read("job_attempts", _day(1), _day(1)).equals(before)
        assert wh.read("source_log").equals(logged)  # the landing record is the old one too
    resource = WarehouseResource(path=warehouse)
    assert resource.refused_days() == [_day(1)]  # recorded, for the tick to say what to fix
    attempts.write_csv(root / "job_attempts" / f"{_day(1)}.csv")  # the files are fixed
    materialize_days(_day(1), _day(1), source=f"files:{root}", warehouse=warehouse,
                     log_level="ERROR")  # fmt: skip
    assert resource.refused_days() == []


def test_a_person_s_promotion_waits_for_the_alias_lock_the_night_holds(tmp_path):
    """``leap model promote`` (a rollback) takes the lock the nightly promotion reads, compares
    and moves under: while a night holds it, the command waits, then fails naming it."""
    from filelock import FileLock

    from leap_pipeline.modeling import registry

    lock = tmp_path / "locks" / f"{registry.model_name()}.production.lock"
    lock.parent.mkdir()
    command = [sys.executable, "-m", "leap_pipeline.app.cli", "model", "--data", str(tmp_path),
               "promote", "1", "--reason", "rollback"]  # fmt: skip
    with FileLock(lock):  # a night is moving the alias
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=300,
            env={**os.environ, "LEAP_LOCK_WAIT_S": "0.5"},
        )  # fmt: skip
    assert result.returncode != 0
    assert "LockTimeout: the alias" in result.stderr and str(lock) in result.stderr
