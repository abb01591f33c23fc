"""Whether the process running a Dagster run is still alive, told from what the run recorded.

A run's worker tags the run with its process identity as it starts (``PID_TAG``, written by
``record_worker`` from the first asset of each run); a tick of the nightly schedule asks
``process_alive`` of every live run's, so a worker killed outright (SIGKILL, an OOM kill: it never
reports its end) does not keep its nights in flight forever. The identity is the process id and
its start time, since an id is reused, and the run's id, since a re-execution copies its parent's
tags: a tag another run wrote says nothing of this one.

The process recorded is the run's worker, the one that lives from the run's first step to its
last, not the process an asset happens to run in: under Dagster's multiprocess executor
(``$LEAP_MAX_CONCURRENT_STEPS`` > 1) each step runs in a child that exits when the step ends, so
a child's id would name a dead process between two steps of a run that is still working.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import dagster as dg
import psutil
import sqlalchemy.exc

PID_TAG = "leap/pid"  # the process that runs a run's assets, recorded as it starts
# a process whose start time is within this of the recorded one is the same process: a PID is
# reused only after its holder exited, which a run's worker does minutes after it started, while
# the start time psutil derives from the boot time may move by a clock step's fraction of a second
SAME_START_S = 1.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # per second, in the start times /proc gave before psutil


def process_identity(pid: int) -> str:
    """``PID:START``, with the process's start time in seconds since the epoch (psutil's
    ``create_time``): a process id is reused, the pair is not (until a reboot, which a run does
    not survive either). ``PID`` alone when the process cannot be read."""
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        return str(pid)
    return f"{pid}:{started:.2f}"


def worker_tag(run_id: str, pid: int) -> str:
    """``PID:START@RUN_ID``: the process ``pid`` as ``process_identity`` names it, for the run
    ``run_id`` (so a copy of the tag on another run is told apart)."""
    return f"{process_identity(pid)}@{run_id}"


def run_worker_alive(run_id: str, tag: str) -> bool:
    """Whether the worker the run ``run_id``'s tag names still runs. A tag written for another
    run (a re-execution copies its parent's tags) says nothing of this one: the run counts as
    alive until its own worker records itself. A tag from before run ids were recorded (no
    ``@``) is read as it was written."""
    identity, at, recorded_run = tag.partition("@")
    if at and recorded_run != run_id:
        return True
    return process_alive(identity)


def process_alive(identity: str) -> bool:
    """Whether the process ``process_identity`` named still runs (the same one, not a zombie).
    An identity recorded before psutil kept the start in clock ticks since boot (no decimal
    point): it is converted, so a run that outlives an upgrade is not taken for dead."""
    pid_text, _, recorded = identity.partition(":")
    try:
        process = psutil.Process(int(pid_text))
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        started = process.create_time()
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.AccessDenied:
        return True  # it exists; whose it is cannot be told
    try:
        if "." in recorded:
            expected = float(recorded)
        else:  # clock ticks since boot, as /proc/PID/stat gave them
            expected = psutil.boot_time() + int(recorded) / CLOCK_TICKS
    except ValueError:
        return True  # no start recorded (or not one this can read): the id alone says it runs
    return abs(started - expected) < SAME_START_S


def worker_pid(steps_in_children: bool) -> int:
    """The process id of the run's worker, seen from the asset code running now: this process,
    or, when the executor runs each step in a child of the worker (``steps_in_children``), the
    process that started this one (multiprocessing's parent, which is the worker under both the
    spawn and the forkserver start methods)."""
    parent = multiprocessing.parent_process() if steps_in_children else None
    return parent.pid if parent is not None and parent.pid is not None else os.getpid()


def runs_steps_in_children(context: dg.AssetExecutionContext) -> bool:
    """Whether the run executing ``context`` runs each step in a child process of its worker
    (Dagster's multiprocess executor), rather than in the worker itself."""
    executor = context.op_execution_context.job_def.executor_def
    return executor.name == dg.multiprocess_executor.name


def record_worker(context: dg.AssetExecutionContext) -> None:
    """Tag the run with the process running it (its id and start time, so a reused id is not
    taken for it, and the run's id, so a re-execution's copy is not), so a tick can tell a run
    killed outright (which never reports its end) from one still working."""
    run_id = context.run.run_id
    worker = worker_tag(run_id, worker_pid(runs_steps_in_children(context)))
    if context.run.tags.get(PID_TAG) == worker:
        return
    # the instance's database may be restarting (a Postgres restart cuts every connection):
    # a few retries ride it out, as Dagster's own writes do
    for delay in (0.5, 1.0, 2.0, 4.0, None):
        try:
            context.instance.add_run_tags(context.run.run_id, {PID_TAG: worker})
            return
        except sqlalchemy.exc.OperationalError as exc:
            if delay is None:
                raise
            context.log.warning(f"tagging the run failed ({exc.orig}); again in {delay:g} s")
            time.sleep(delay)
