"""A failed run is heard: the ``run_failure_alerts`` sensor logs every run that fails and, when
``$LEAP_ALERT_WEBHOOK_URL`` is set, POSTs a Slack-compatible ``{"text": ...}`` to it.

A night that fails at 02:00 otherwise shows only in the Dagster UI, which nobody reads at night;
the next tick asks for the night again 24 hours later, and launchers rank with an older model
meanwhile. The message names what a person needs to act: the job, the run, the nights or days it
was for, and the error (the run's, and each failed step's). Building it is a pure function, kept
apart from Dagster and from the POST. The POST has a short timeout, and a failure is logged,
never raised: an alert that cannot be delivered must not fail the sensor, which would then stop
reporting the next failure. The URL is read at each evaluation, never at import, and never
logged, since a webhook's path is its secret.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

import dagster as dg

from leap_pipeline.orchestration.nightly_plan import NIGHTS_TAG, tagged_days
from leap_pipeline.settings import environment

log = logging.getLogger("leap_pipeline.orchestration.failure_alerts")

ALERT_TIMEOUT_S = 5.0  # the sensor's evaluation waits this long at most for the webhook
MAX_ERROR_CHARS = 600  # per error: the message's head, where the exception names itself
MAX_STEPS = 5  # failed steps named; a run of many failed steps says how many more
# the tags that say what a run was for, in the order the message shows them
REPORTED_TAGS = (
    (NIGHTS_TAG, "nights"),
    ("leap/landing", "landing"),
    ("dagster/partition", "partition"),
    ("dagster/asset_partition_range_start", "from"),
    ("dagster/asset_partition_range_end", "to"),
    ("dagster/schedule_name", "schedule"),
    ("dagster/backfill", "backfill"),
)


def _short(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def alert_text(
    job_name: str,
    run_id: str,
    tags: Mapping[str, str],
    error: str,
    step_errors: Sequence[tuple[str, str]] = (),
) -> str:
    """The alert for a failed run: its job and run id, what it was for (``REPORTED_TAGS``),
    the run's error and each failed step's (the first ``MAX_STEPS``), each cut to
    ``MAX_ERROR_CHARS``."""
    lines = [f"LEAP run failed: job {job_name}, run {run_id}"]
    what = [f"{label} {tags[tag]}" for tag, label in REPORTED_TAGS if tags.get(tag)]
    if what:
        lines.append("; ".join(what))
    lines.append(f"error: {_short(error) or 'none recorded'}")
    lines += [f"step {step}: {_short(message)}" for step, message in step_errors[:MAX_STEPS]]
    if len(step_errors) > MAX_STEPS:
        lines.append(f"and {len(step_errors) - MAX_STEPS} more failed steps")
    return "\n".join(lines)


def post_alert(url: str, text: str, timeout_s: float = ALERT_TIMEOUT_S) -> str | None:
    """POST ``{"text": text}`` to ``url``; None when it answered 2xx, else what went wrong
    (logged here too, naming the host only)."""
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:  # answered, with an error status
        status = exc.code
        exc.close()
    except (OSError, ValueError) as exc:  # refused, unreachable, timed out, a bad URL
        problem = f"the alert webhook at {urlsplit(url).hostname} was not reached: {exc}"
        log.warning(problem)
        return problem
    if 200 <= status < 300:
        return None
    problem = f"the alert webhook at {urlsplit(url).hostname} answered HTTP {status}"
    log.warning(problem)
    return problem


NIGHT_JOBS = ("nightly", "training")  # the jobs that train nights


def _record_failed_night(context: dg.RunFailureSensorContext, run: dg.DagsterRun) -> None:
    """Record the failed night on the registered model, where a launcher's ``/metrics``
    (``leap_serve_last_night_*``) reads it; a registry that cannot be reached is logged."""
    from leap_pipeline.modeling import alias_records, registry

    days = tagged_days(run.tags)
    try:
        registry.configure_tracking()
        alias_records.record_last_night(
            max(days, default=None), "failed", f"run {run.run_id} failed"
        )
    except Exception as exc:  # the alert matters more than the record: never raised
        context.log.warning(f"the failed night could not be recorded in the registry: {exc!r}")


def _step_error(event: dg.DagsterEvent) -> str:
    """The error that failed a step, as its code raised it: Dagster wraps it in its own
    (``DagsterExecutionStepExecutionError``), whose message and stack say nothing of it."""
    error = getattr(event.event_specific_data, "error", None)
    if error is None:
        return event.message or ""
    while error.cause is not None:
        error = error.cause
    return error.message


@dg.run_failure_sensor(
    name="run_failure_alerts",
    description="Logs every failed run and posts it to $LEAP_ALERT_WEBHOOK_URL when set.",
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
)
def run_failure_alerts(context: dg.RunFailureSensorContext) -> None:
    """Log the failed run; post it to the webhook when one is set."""
    run = context.dagster_run
    steps = [
        (event.step_key or "?", _step_error(event)) for event in context.get_step_failure_events()
    ]
    error = context.failure_event.message or ""
    text = alert_text(run.job_name, run.run_id, run.tags, error, steps)
    context.log.error(text)
    if run.job_name in NIGHT_JOBS or NIGHTS_TAG in run.tags:
        _record_failed_night(context, run)
    url = environment().alert_webhook_url
    if url:
        problem = post_alert(url, text)
        if problem:
            context.log.warning(problem)
