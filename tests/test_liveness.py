"""The liveness a nightly tick reads: the process a run's tag names is the run's worker, which
lives from the first step to the last, under the multiprocess executor too."""

import os
from pathlib import Path

import dagster as dg

from leap_pipeline.orchestration.dagster_private import without_definitions_state
from leap_pipeline.orchestration.liveness import (
    PID_TAG,
    process_identity,
    record_worker,
    run_worker_alive,
    worker_tag,
)


@dg.asset
def first_step(context: dg.AssetExecutionContext) -> int:
    record_worker(context)
    return os.getpid()


@dg.asset
def second_step(context: dg.AssetExecutionContext, first_step: int) -> int:
    record_worker(context)
    return os.getpid()


def multiprocess_job() -> dg.JobDefinition:
    """Two steps, each in a process of its own, as ``$LEAP_MAX_CONCURRENT_STEPS=2`` runs them."""
    executor = dg.multiprocess_executor.configured({"max_concurrent": 2})
    job = dg.define_asset_job("two_steps", selection=[first_step, second_step],
                              executor_def=executor)  # fmt: skip
    definitions = dg.Definitions(assets=[first_step, second_step], jobs=[job])
    # resolved where no collected instance can put a dead storage back (``dagster_private``)
    return without_definitions_state(lambda: definitions.resolve_job_def("two_steps"))


def test_under_the_multiprocess_executor_the_tag_names_the_worker_not_a_step_process(monkeypatch):
    """Each step ran in a child that has exited by the end of the run; the tag names the process
    that ran the run (here, this one), alive between the steps and after them."""
    # the step processes import this module by name, from the working directory
    monkeypatch.chdir(Path(__file__).parent)
    job = dg.reconstructable(multiprocess_job)
    with dg.instance_for_test() as instance, dg.execute_job(job, instance) as result:
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        outputs = instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.STEP_OUTPUT
        ).records
        steps = {record.event_log_entry.dagster_event.pid for record in outputs}
    assert len(steps) == 2 and os.getpid() not in steps  # each step ran in a child
    assert run.tags[PID_TAG] == worker_tag(run.run_id, os.getpid())
    assert run_worker_alive(run.run_id, run.tags[PID_TAG])


def test_in_process_the_tag_names_the_process_itself():
    with dg.instance_for_test() as instance:
        result = without_definitions_state(
            lambda: dg.materialize([first_step, second_step], instance=instance)
        )
        run = instance.get_run_by_id(result.run_id)
    assert run.tags[PID_TAG] == worker_tag(run.run_id, os.getpid())


def test_a_tag_copied_from_another_run_says_nothing_of_this_one():
    """A re-execution copies its parent's tags: the parent's worker, long gone, must not mark the
    new run failed before its own worker records itself."""
    gone = "4194999:1.00@parent-run"
    assert not run_worker_alive("parent-run", gone)
    assert run_worker_alive("re-execution", gone)


def test_a_tag_names_a_dead_worker_of_the_same_run_as_dead_and_old_tags_still_read():
    assert not run_worker_alive("r", "4194999:1.00@r")
    assert not run_worker_alive("r", "4194999:1.00")  # before run ids were recorded
    assert run_worker_alive("r", process_identity(os.getpid()))
    assert run_worker_alive("r", f"{process_identity(os.getpid())}@r")
