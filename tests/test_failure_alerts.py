"""A failed run is heard: the alert's text names the job, the run, its nights and partitions and
the errors; the sensor posts it to a webhook (a local HTTP sink here) when a real run fails, and
a webhook that refuses or is gone is logged, never raised."""

import datetime as dt
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import dagster as dg
import pytest

from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.orchestration.definitions import build_definitions
from leap_pipeline.orchestration.failure_alerts import (
    MAX_ERROR_CHARS,
    MAX_STEPS,
    alert_text,
    post_alert,
    run_failure_alerts,
)
from leap_pipeline.orchestration.nightly_plan import NIGHTS_TAG
from leap_pipeline.settings import ALERT_WEBHOOK_ENV, environment


class Sink:
    """An HTTP server on 127.0.0.1 that records every POST body and answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[dict] = []
        self.status = status
        self.closed = False
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                sink.bodies.append(
                    {
                        "type": self.headers["Content-Type"],
                        "json": json.loads(self.rfile.read(length)),
                    }
                )
                self.send_response(sink.status)
                self.end_headers()

            def log_message(self, *args) -> None:  # quiet
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/services/T0/B0/secret"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def sink() -> Iterator[Sink]:
    found = Sink()
    yield found
    found.close()


def test_the_alert_names_the_job_the_run_what_it_was_for_and_the_errors():
    tags = {NIGHTS_TAG: "2026-12-03..2026-12-04", "dagster/asset_partition_range_start":
            "2026-12-03", "dagster/asset_partition_range_end": "2026-12-04",
            "dagster/schedule_name": "nightly_schedule", "leap/pid": "123"}  # fmt: skip
    steps = [("cascade_model", "ValueError: window_days=3 must be 7..30\n  File ...")]
    text = alert_text("nightly", "run-1", tags, "Steps failed: ['cascade_model'].", steps)
    assert text.splitlines() == [
        "LEAP run failed: job nightly, run run-1",
        "nights 2026-12-03..2026-12-04; from 2026-12-03; to 2026-12-04; schedule nightly_schedule",
        "error: Steps failed: ['cascade_model'].",
        "step cascade_model: ValueError: window_days=3 must be 7..30 File ...",
    ]
    assert "leap/pid" not in text and "123" not in text  # tags that say nothing of the work


def test_a_long_error_and_many_failed_steps_are_cut_to_a_message_one_reads():
    steps = [(f"step_{i}", "x" * 5000) for i in range(MAX_STEPS + 3)]
    text = alert_text("daily_pipeline", "run-2", {}, "y" * 5000, steps)
    lines = text.splitlines()
    assert lines[1] == "error: " + "y" * (MAX_ERROR_CHARS - 1) + "…"  # no tags: no line for them
    assert sum(line.startswith("step ") for line in lines) == MAX_STEPS
    assert lines[-1] == "and 3 more failed steps"
    assert alert_text("j", "r", {}, "").splitlines()[-1] == "error: none recorded"


def test_a_webhook_that_refuses_or_is_gone_is_reported_never_raised(sink):
    assert post_alert(sink.url, "hello") is None
    assert sink.bodies == [{"type": "application/json", "json": {"text": "hello"}}]
    sink.status = 500
    assert post_alert(sink.url, "again") == "the alert webhook at 127.0.0.1 answered HTTP 500"
    gone = sink.url
    sink.close()
    problem = post_alert(gone, "nobody", timeout_s=2.0)
    assert problem and "was not reached" in problem and "secret" not in problem


def test_the_webhook_setting_is_validated_and_named():
    assert environment({ALERT_WEBHOOK_ENV: "https://hooks.slack.com/services/T/B/x"})
    with pytest.raises(ValueError, match=ALERT_WEBHOOK_ENV):
        environment({ALERT_WEBHOOK_ENV: "hooks.slack.com/services/T/B/x"})


@dg.asset(partitions_def=dg.DailyPartitionsDefinition(start_date="2026-01-01"))
def broken_day() -> None:
    raise ValueError("the source for this day is unreadable")


def test_the_sensor_posts_a_failed_run_of_a_real_job_to_the_webhook(sink, monkeypatch):
    """A job whose asset raises runs and fails on an instance; the sensor, evaluated as the
    daemon evaluates it (a tick that sets its cursor, the run, a tick that finds it), posts the
    run's alert to the sink."""
    monkeypatch.setenv(ALERT_WEBHOOK_ENV, sink.url)
    job = dg.define_asset_job("broken", selection=[broken_day])
    defs = dg.Definitions(assets=[broken_day], jobs=[job], sensors=[run_failure_alerts])
    with dg.instance_for_test() as instance:
        sensor = defs.resolve_sensor_def("run_failure_alerts")

        def tick(cursor: str | None) -> str | None:
            context = dg.build_sensor_context(instance=instance, cursor=cursor,
                                              repository_def=defs.get_repository_def())  # fmt: skip
            return sensor.evaluate_tick(context).cursor

        cursor = tick(None)  # the first tick starts after what happened before it
        result = defs.resolve_job_def("broken").execute_in_process(
            instance=instance, partition_key="2026-12-03", raise_on_error=False,
            tags={NIGHTS_TAG: "2026-12-03..2026-12-03"},
        )  # fmt: skip
        assert not result.success
        assert sink.bodies == []
        tick(cursor)
    assert len(sink.bodies) == 1
    text = sink.bodies[0]["json"]["text"]
    assert text.startswith(f"LEAP run failed: job broken, run {result.run_id}\n")
    assert "nights 2026-12-03..2026-12-03; partition 2026-12-03" in text
    assert text.endswith("\nstep broken_day: ValueError: the source for this day is unreadable")


def test_the_pipeline_registers_the_sensor_running_by_default():
    defs = build_definitions(Calendar(first_day=dt.date(2026, 1, 1)))
    sensor = defs.resolve_sensor_def("run_failure_alerts")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
