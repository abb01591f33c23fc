"""Whether the process running a Dagster run is still alive, told from what the run recorded.

A run's worker tags the run with its process identity as it starts (``PID_TAG``, written by
``record_worker`` from the first asset of each run); a tick of the nightly schedule asks
``process_alive`` of every live run's, so a worker killed outright (SIGKILL, an OOM kill: it never
reports its end) does not keep its nights in flight forever. The identity is the process id and
its start time, since an id is reused.
"""

from __future__ import annotations

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


def record_worker(context: dg.AssetExecutionContext) -> None:
    """Tag the run with the process running it (its id and start time, so a reused id is not
    taken for it), so a tick can tell a run killed outright (which never reports its end) from
    one still working."""
    worker = process_identity(os.getpid())
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
