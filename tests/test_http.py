"""``leap serve``: the Ranker over HTTP. In process through ``httpx.ASGITransport`` against a
tiny registered model (``http_model``), then once as a real ``leap serve`` subprocess."""

import asyncio
import datetime as dt
import json
import logging
import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from http_model import TOKEN, W20, launch_body, registered_model, serving

from leap_pipeline.modeling import registry
from leap_serving.decide.ranker import Ranker
from leap_serving.decide.results import Ranking
from leap_serving.http.app import create_app
from leap_serving.http.config import MAX_BATCH, ServeConfig, config_from_environment
from leap_serving.http.openapi import document
from leap_serving.http.webhook import MUTATE_PATH, create_webhook_app

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with registered_model(tmp_path_factory.mktemp("http")) as model:
        yield model


def _call(app, method: str, path: str, **kwargs) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://leap") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def test_a_ranking_over_http_is_the_rankers_own(served):
    app = create_app(served["ranker"])
    launch = launch_body(served)
    answer = _call(app, "POST", "/v1/rank", json=launch)
    assert answer.status_code == 200, answer.text
    date = dt.date.fromisoformat(served["launch_date"])
    expected = served["ranker"].rank(launch["job"], launch["candidates"], launch_date=date)
    assert expected.ranking and answer.json() == json.loads(json.dumps(expected.to_dict()))
    assert answer.json()["model_version"] == served["versions"][0]


def test_a_batch_is_each_launch_ranked(served):
    app = create_app(served["ranker"])
    launches = [launch_body(served, i) for i in range(len(served["launches"]))]
    answer = _call(app, "POST", "/v1/rank/batch", json={"launches": launches})
    assert answer.status_code == 200, answer.text
    one_by_one = [_call(app, "POST", "/v1/rank", json=x).json() for x in launches]
    assert answer.json()["rankings"] == one_by_one and len(one_by_one) == len(launches)


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/rank", b"{not json", 400, "body"),
        ("/v1/rank", b"\xff\xfe", 400, "body"),
        ("/v1/rank", b"[" * 100_000, 400, "body"),
        ("/v1/rank", b"[1, 2]", 422, "body"),
        ("/v1/rank", b'{"candidates": ["A10G"]}', 422, "job"),
        ("/v1/rank", b'{"job": [], "candidates": ["A10G"]}', 422, "job"),
        ("/v1/rank", b'{"job": {}}', 422, "candidates"),
        ("/v1/rank", b'{"job": {}, "candidates": "A10G"}', 422, "candidates"),
        ("/v1/rank", b'{"job": {}, "candidates": [1]}', 422, "candidates"),
        ("/v1/rank", b'{"job": {}, "candidates": [], "launch_date": "2026-13-01"}', 422,
         "launch_date"),
        ("/v1/rank", b'{"job": {}, "candidates": [], "launch_date": 20260101}', 422,
         "launch_date"),
        ("/v1/rank", b'{"job": {}, "candidates": [], "candidate": []}', 422, "candidate"),
        ("/v1/rank", b'{"job": {}, "candidates": [], "budget": []}', 422, "budget"),
        ("/v1/rank", b'{"job": {}, "candidates": [], "budget": {"max_devices": 1.5}}', 422,
         "budget.max_devices"),
        ("/v1/rank", b'{"job": {}, "candidates": [], "budget": {"max_cost_per_hour": -1}}',
         422, "budget.max_cost_per_hour"),
        ("/v1/rank", b'{"job": {}, "candidates": [], "budget": {"max_gpus": 1}}', 422,
         "budget.max_gpus"),
        # past float's range (the review found these answered 500)
        ("/v1/rank", b'{"job": {}, "candidates": [], "budget": {"max_devices": 1' + b"0" * 400
         + b"}}", 422, "budget.max_devices"),
        ("/v1/rank", b'{"job": {}, "candidates": [], "budget": {"max_cost_per_hour": 1'
         + b"0" * 400 + b"}}", 422, "budget.max_cost_per_hour"),
        ("/v1/rank/batch", b'{"launches": []}', 422, "launches"),
        ("/v1/rank/batch", b'{"launch": []}', 422, "launch"),
        ("/v1/rank/batch", b'{"launches": [{"job": {}, "candidates": []}, 3]}', 422,
         "launches[1]"),
        ("/v1/rank/batch", b'{"launches": [{"job": {}, "candidates": []}, {"job": {}}]}', 422,
         "launches[1].candidates"),
        ("/v1/rank/batch", b'{"launches": [{"job": {}, "candidates": []}, {"job": {}, '
         b'"candidates": [], "launch_date": "2026-01-05"}]}', 422, "launches[1].launch_date"),
        ("/v1/k8s/mutate", b'{"kind": "Pod"}', 400, "body"),
        ("/v1/k8s/mutate", b'{"kind": "AdmissionReview", "apiVersion": "v1"}', 400, "body"),
    ],
)  # fmt: skip
def test_a_callers_mistake_is_a_4xx_naming_the_field(served, path, body, status, field):
    app = (create_webhook_app if path == MUTATE_PATH else create_app)(served["ranker"])
    answer = _call(app, "POST", path, content=body,
                   headers={"content-type": "application/json"})  # fmt: skip
    assert answer.status_code == status, answer.text
    assert answer.json()["field"] == field and answer.json()["reason"], answer.json()


def test_a_batch_past_the_cap_and_a_type_that_is_not_json_are_refused(served):
    app = create_app(served["ranker"])
    many = {"launches": [{"job": {}, "candidates": []}] * (MAX_BATCH + 1)}
    assert _call(app, "POST", "/v1/rank/batch", json=many).json()["field"] == "launches"
    answer = _call(app, "POST", "/v1/rank", content=b"{}", headers={"content-type": "text/csv"})
    assert answer.status_code == 415 and answer.json()["field"] == "content-type"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda x: {**x, "job": {k: v for k, v in x["job"].items() if k != "model_type"}},
         "invalid_job"),
        (lambda x: {**x, "candidates": ["NO-SUCH-GPU"]}, "invalid_candidates"),
        (lambda x: {**x, "launch_date": "2020-01-01"}, "launch_date"),
    ],
)  # fmt: skip
def test_a_launch_the_ranker_refuses_is_a_422_carrying_the_ranking(served, change, code):
    body = change(launch_body(served))
    answer = _call(create_app(served["ranker"]), "POST", "/v1/rank", json=body)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["reason_code"] == code and body["reason"] and body["ranking"] == []


@pytest.mark.parametrize(
    "definition",
    ["1" * 5000, "[" * 50_000, '{"layers": [' + "9" * 4400,
     '{"layers": [{"op": "mlp", "widths": [' + "9" * 401 + "]}]}"],  # a width past float's range
)  # fmt: skip
def test_a_model_definition_json_cannot_read_is_no_bug(served, definition):
    """Found by the fuzz: an integer of 5,000 digits made ``json.loads`` raise a ValueError that
    was not a JSONDecodeError, answered 500; any unreadable definition is one without features."""
    body = launch_body(served)
    body["job"] = {**body["job"], "model_definition": definition}
    answer = _call(create_app(served["ranker"]), "POST", "/v1/rank", json=body)
    assert answer.status_code == 200 and answer.json()["ranking"], answer.text


def test_a_body_past_the_limit_is_refused_whatever_its_length_header_says(served):
    app = create_app(served["ranker"], ServeConfig(max_body_bytes=2048))
    big = json.dumps({**launch_body(served), "job": {"pad": "x" * 5000}}).encode()
    assert _call(app, "POST", "/v1/rank", content=big).status_code == 413  # Content-Length

    async def chunks():  # no Content-Length: chunked, counted as it streams in
        for i in range(0, len(big), 512):
            yield big[i : i + 512]

    answer = _call(app, "POST", "/v1/rank", content=chunks())
    assert answer.status_code == 413 and answer.json()["field"] == "body"
    small = json.dumps(launch_body(served)).encode()
    assert len(small) < 2048 and _call(app, "POST", "/v1/rank", content=small).status_code == 200


def test_a_token_guards_every_route_but_the_probes(served):
    app = create_app(served["ranker"], ServeConfig(token=TOKEN))
    good = {"authorization": f"Bearer {TOKEN}"}
    for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": TOKEN},
                    {"authorization": "Basic " + TOKEN}):  # fmt: skip
        for method, path in (("POST", "/v1/rank"), ("POST", "/v1/rank/batch"),
                             ("GET", "/v1/model"), ("GET", "/metrics"),
                             ("GET", "/openapi.json")):  # fmt: skip
            answer = _call(app, method, path, json=launch_body(served), headers=headers)
            assert answer.status_code == 401 and answer.json()["field"] == "authorization"
    assert _call(app, "POST", "/v1/rank", json=launch_body(served), headers=good).status_code == 200
    assert _call(app, "GET", "/healthz").status_code == 200
    assert _call(app, "GET", "/readyz").status_code == 200
    # the webhook is no longer a route here: its own listener (tests/test_http_security.py)
    assert _call(app, "POST", MUTATE_PATH, json={}, headers=good).status_code == 404


def test_no_model_yet_is_503_and_the_probes_say_so(served, tmp_path):
    ranker = Ranker(str(tmp_path / "nothing-here"), check_interval_s=float("inf"), wait=True)
    app = create_app(ranker)
    assert _call(app, "GET", "/healthz").status_code == 200
    assert _call(app, "GET", "/readyz").status_code == 503
    answer = _call(app, "POST", "/v1/rank", json=launch_body(served))
    assert answer.status_code == 503 and answer.json()["reason_code"] == "no_model"
    assert answer.headers["retry-after"]
    batch = _call(app, "POST", "/v1/rank/batch", json={"launches": [launch_body(served)]})
    assert batch.status_code == 503
    assert _call(app, "GET", "/v1/model").json()["ready"] is False


def test_a_ranking_past_the_deadline_is_answered_504_at_once(served, monkeypatch):
    app = create_app(served["ranker"], ServeConfig(deadline_s=0.2))
    release = threading.Event()
    monkeypatch.setattr(app.pool, "rank_one", lambda launch: release.wait(5))
    started = time.perf_counter()
    answer = _call(app, "POST", "/v1/rank", json=launch_body(served))
    release.set()
    assert answer.status_code == 504 and answer.json()["error"] == "deadline"
    assert time.perf_counter() - started < 2


def test_an_internal_error_is_a_500_with_a_reason_and_logged(served, monkeypatch, caplog):
    app = create_app(served["ranker"])

    def broken(launch):
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.pool, "rank_one", broken)
    with caplog.at_level(logging.ERROR, logger="leap_serving"):
        answer = _call(app, "POST", "/v1/rank", json=launch_body(served))
    assert answer.status_code == 500 and "RuntimeError: a bug" in answer.json()["reason"]
    assert any(r.exc_info and "a bug" in str(r.exc_info[1]) for r in caplog.records)


class _BudgetRanker:
    """A Ranker taking budget caps by the agreed convention, recording what it is given."""

    model_version, model_uri = "7", "models:/fake@production"

    def __init__(self):
        self.calls = []

    def wait_ready(self, timeout=None):
        return True

    def rank(self, job, candidates, *, launch_date=None, budget=None):
        self.calls.append(("rank", budget))
        return Ranking([], model_version="7", reason="over budget", reason_code="budget")

    def rank_many(self, jobs, *, launch_date=None):
        self.calls.append(("rank_many", [item[2] if len(item) == 3 else None for item in jobs]))
        return [Ranking([], model_version="7") for _ in jobs]


def test_budget_caps_reach_a_ranker_that_takes_them_and_are_refused_by_one_that_cannot(served):
    caps = {"max_cost_per_hour": 50.0, "max_devices": 8}
    fake = _BudgetRanker()
    app = create_app(fake)
    answer = _call(app, "POST", "/v1/rank", json={**launch_body(served), "budget": caps})
    assert answer.status_code == 200 and answer.json()["reason_code"] == "budget"
    batch = {"launches": [{**launch_body(served), "budget": caps}, launch_body(served)]}
    assert _call(app, "POST", "/v1/rank/batch", json=batch).status_code == 200
    assert fake.calls == [("rank", caps), ("rank_many", [caps, None])]
    ranker = served["ranker"]
    if "budget" not in __import__("inspect").signature(ranker.rank).parameters:
        answer = _call(create_app(ranker), "POST", "/v1/rank", json={**launch_body(served),
                       "budget": caps})  # fmt: skip
        assert answer.status_code == 422 and answer.json()["field"] == "budget"


def test_the_model_route_names_the_version_its_day_and_w20(served):
    body = _call(create_app(served["ranker"]), "GET", "/v1/model").json()
    assert body["ready"] is True and body["model_version"] == served["versions"][0]
    assert body["evaluation_day"] == served["night"].isoformat() and body["w20"] == W20


def test_metrics_count_requests_latency_reasons_and_the_model(served):
    app = create_app(served["ranker"])
    for _ in range(3):
        _call(app, "POST", "/v1/rank", json=launch_body(served))
    _call(app, "POST", "/v1/rank", json={**launch_body(served), "candidates": ["NO-SUCH-GPU"]})
    _call(app, "GET", "/no/such/path")
    text = _call(app, "GET", "/metrics").text
    version = served["versions"][0]

    def value(pattern):
        found = re.search(rf"^{pattern} (\S+)$", text, re.M)
        assert found, (pattern, text)
        return float(found.group(1))

    assert value(r'leap_serve_requests_total\{route="/v1/rank",status="200"\}') == 3
    assert value(r'leap_serve_requests_total\{route="/v1/rank",status="422"\}') == 1
    assert value(r'leap_serve_requests_total\{route="other",status="404"\}') == 1
    assert value(r'leap_serve_request_seconds_count\{route="/v1/rank"\}') == 4
    assert value(r'leap_serve_empty_rankings_total\{reason_code="invalid_candidates"\}') == 1
    assert value(rf'leap_serve_model_info\{{model_uri="[^"]+",version="{version}"\}}') == 1
    assert value("leap_serve_model_ready") == 1


def undocumented_metrics(exposition: str, page: str) -> list[str]:
    """The metric families a /metrics answer declares (``# TYPE name kind``) that the page's
    text never names in backticks; a counter's or histogram's ``_created`` family, which
    prometheus_client adds to each by itself, goes with its metric."""
    names = re.findall(r"^# TYPE (\S+) \S+$", exposition, re.M)
    return sorted({n for n in names if f"`{n}`" not in page and not n.endswith("_created")})


def test_every_metric_served_is_listed_in_serving_md(served):
    """A gauge added to /metrics without its words in docs/serving.md fails here (four were
    missing); a scrape with a night recorded declares every family the app has."""
    app = create_app(served["ranker"])
    _call(app, "POST", "/v1/rank", json=launch_body(served))
    exposition = _call(app, "GET", "/metrics").text
    page = (PROJECT / "docs" / "serving.md").read_text()
    assert "# TYPE leap_serve_requests_total counter" in exposition
    assert undocumented_metrics(exposition, page) == []
    added = exposition + "# TYPE leap_serve_brand_new gauge\nleap_serve_brand_new 1.0\n"
    assert undocumented_metrics(added, page) == ["leap_serve_brand_new"]


def test_metrics_tell_the_models_age_and_how_the_newest_night_ended(served):
    """Gauges a platform team alerts on: the model's age in nights, and the pipeline's newest
    night as it recorded it on the registered model (a failed one too); an older night's
    record never replaces a newer one's."""
    from leap_pipeline.modeling import alias_records

    night = served["night"]
    age = (dt.date.today() - night).days  # the machine's own day: the Ranker's default zone

    def scrape(expected: str = "") -> str:
        """A fresh reader's scrape once its background read of the registry is in."""
        app, deadline = create_app(served["ranker"]), time.monotonic() + 20
        while expected not in (text := _call(app, "GET", "/metrics").text):
            assert time.monotonic() < deadline, (expected, text)
            time.sleep(0.05)
        return text

    text = scrape()
    assert f"leap_serve_model_age_days {float(age)}" in text
    assert f"leap_serve_nights_behind {float(max(0, age - 1))}" in text
    time.sleep(0.5)
    assert "leap_serve_last_night" not in scrape()  # nothing recorded yet
    # a failed re-run of the very night production serves: recorded, but no alarm
    alias_records.record_last_night(night, "failed", "run r1 failed")
    alias_records.record_last_night(night - dt.timedelta(days=1), "promoted", "an older night")
    text = scrape(f'day="{night}",outcome="failed"')
    assert "leap_serve_last_night_failed 0.0" in text
    # a newer night failed with nothing of it serving: the alarm
    alias_records.record_last_night(night + dt.timedelta(days=1), "failed", "run r2 failed")
    text = scrape(f'day="{night + dt.timedelta(days=1)}",outcome="failed"')
    assert "leap_serve_last_night_failed 1.0" in text
    alias_records.record_last_night(night + dt.timedelta(days=2), "held", "gate failed")
    text = scrape('outcome="held"')
    assert "leap_serve_last_night_failed 0.0" in text


def test_a_scrape_and_the_start_never_wait_on_a_registry_that_hangs(served, monkeypatch):
    """The registry's record of the newest night is read on a thread of its own: with a
    registry that does not answer, create_app returns, and /metrics and /healthz answer, while
    the read still hangs (they used to wait for it on the event loop)."""
    from leap_serving.http import metrics

    hanging, released = threading.Event(), threading.Event()

    def hangs(uri):
        hanging.set()
        released.wait(60)
        return None

    monkeypatch.setattr(metrics, "last_night", hangs)
    answers = {}

    def start_and_scrape():
        app = create_app(served["ranker"])
        answers["metrics"] = _call(app, "GET", "/metrics")
        answers["healthz"] = _call(app, "GET", "/healthz")

    worker = threading.Thread(target=start_and_scrape, daemon=True)
    try:
        worker.start()
        worker.join(20)
        assert hanging.is_set() and not released.is_set()  # the registry read is still hanging
        assert not worker.is_alive(), "create_app, /metrics or /healthz waited on the registry"
        assert answers["metrics"].status_code == answers["healthz"].status_code == 200
        assert "leap_serve_model_ready 1.0" in answers["metrics"].text
    finally:
        released.set()


def test_a_promoted_version_serves_with_no_ranking_traffic_after_a_bounded_canary(served):
    """A server's Ranker follows the alias on a thread of its own: with no ranking call at
    all, a promoted version is loaded, held on canary for its time bound, then serves, and an
    in-process Ranker answers the same. Without a time bound, a canary on a quiet fleet holds
    the new version back (it waited for 200 launches, days on a quiet fleet)."""
    old, new = served["versions"]

    def follower(**canary):
        return Ranker(served["uri"], check_interval_s=0.2, wait=True, follow_in_background=True,
                      canary_launches=200, **canary)  # fmt: skip

    bounded, unbounded = follower(canary_max_s=1.0), follower(canary_max_s=None)
    assert bounded.model_version == unbounded.model_version == old
    registry.promote(new, reason="test", actor="pytest")
    try:
        deadline = time.monotonic() + 30
        while bounded.model_version != new:
            assert time.monotonic() < deadline, ("not picked up", bounded.stats())
            time.sleep(0.1)
        assert unbounded.stats()["canary"]["version"] == new
        assert unbounded.model_version == old  # still on canary, with no launch to see
        fresh = Ranker(served["uri"], wait=True, canary_launches=0)  # as `leap rank` loads
        launch = launch_body(served)
        date = dt.date.fromisoformat(served["launch_date"])
        answers = [
            r.rank(launch["job"], launch["candidates"], launch_date=date).to_dict()
            for r in (bounded, fresh)
        ]
        assert answers[0] == answers[1] and answers[0]["model_version"] == new
    finally:
        bounded.close()
        unbounded.close()
        registry.promote(old, reason="test", actor="pytest")


def test_a_models_age_is_counted_in_the_calendars_zone(served):
    """Night D's day closes in the calendar's zone: counted in UTC, a US server read one night
    behind every evening. Two zones 26 hours apart count each their own day."""
    import zoneinfo

    night = served["night"]
    for zone in ("Pacific/Kiritimati", "Etc/GMT+12"):
        ranker = Ranker(served["uri"], wait=True, timezone=zone)
        today = dt.datetime.now(zoneinfo.ZoneInfo(zone)).date()
        assert ranker.stats()["model_age_days"] == (today - night).days
        assert ranker.stats()["model_day"] == night
    with pytest.raises(ValueError, match="timezone='Mars/Olympus'"):
        Ranker(served["uri"], timezone="Mars/Olympus")


def test_the_committed_openapi_document_is_the_served_one(served):
    served_doc = _call(create_app(served["ranker"]), "GET", "/openapi.json").json()
    committed = json.loads((PROJECT / "docs" / "openapi.json").read_text())
    assert served_doc == document() == committed, (
        "regenerate: .venv/bin/python -m leap_serving.http --openapi > docs/openapi.json"
    )
    assert set(served_doc["paths"]) == {
        "/v1/rank", "/v1/rank/batch", "/v1/model", "/v1/k8s/mutate", "/healthz", "/readyz",
        "/metrics", "/openapi.json",
    }  # fmt: skip


def test_the_alias_moves_without_a_restart_and_a_call_in_flight_keeps_its_version(served):
    """A slow ranking in flight while the alias moves answers on the version it started with;
    the Ranker picks up the move by itself (check_interval_s) and the next call is the new."""
    old, new = served["versions"]
    ranker = Ranker(served["uri"], check_interval_s=0.2, wait=True, canary_launches=0)
    app = create_app(ranker)
    inside, release = threading.Event(), threading.Event()
    real_score = ranker._score

    def slow_score(prepared, loaded, results, quiet=False):
        if threading.current_thread().name.startswith("leap-serve") and not inside.is_set():
            inside.set()
            release.wait(20)
        return real_score(prepared, loaded, results, quiet)

    ranker._score = slow_score

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://leap") as client:
            slow = asyncio.create_task(client.post("/v1/rank", json=launch_body(served)))
            assert await asyncio.to_thread(inside.wait, 10)
            registry.promote(new, reason="test", actor="pytest")
            try:
                deadline = time.monotonic() + 30
                while (await client.get("/v1/model")).json()["model_version"] != new:
                    await client.post("/v1/rank", json=launch_body(served, 1))  # drives the check
                    assert time.monotonic() < deadline, "the move was not picked up"
                    await asyncio.sleep(0.1)
                after = await client.post("/v1/rank", json=launch_body(served))
            finally:
                release.set()
            return (await slow), after

    try:
        slow, after = asyncio.run(scenario())
    finally:
        registry.promote(old, reason="test", actor="pytest")
    assert slow.status_code == after.status_code == 200
    assert slow.json()["model_version"] == old and after.json()["model_version"] == new
    assert after.json()["ranking"] == slow.json()["ranking"]  # the same artifacts


def test_settings_are_read_from_the_environment_and_a_bad_one_is_named():
    config = config_from_environment({"LEAP_SERVE_TOKEN": "t", "LEAP_SERVE_DEADLINE_S": "0.5",
                                      "LEAP_SERVE_MAX_BODY_BYTES": "4096"}, port=9)  # fmt: skip
    assert (config.token, config.deadline_s, config.max_body_bytes, config.port) == (
        "t", 0.5, 4096, 9,
    )  # fmt: skip
    bad = [("LEAP_SERVE_DEADLINE_S", "soon"), ("LEAP_SERVE_DEADLINE_S", "0"),
           ("LEAP_SERVE_MAX_BODY_BYTES", "10"), ("LEAP_SERVE_PORT", "70000")]  # fmt: skip
    for name, value in bad:
        with pytest.raises(ValueError, match=name):
            config_from_environment({name: value})


def test_leap_serve_ranks_over_real_http(served, tmp_path):
    with serving(served, tmp_path, token=TOKEN) as (base, _):
        headers = {"authorization": f"Bearer {TOKEN}"}
        body = launch_body(served)
        answer = httpx.post(f"{base}/v1/rank", json=body, headers=headers, timeout=30)
        refused = httpx.post(f"{base}/v1/rank", json=launch_body(served), timeout=30)
    assert answer.status_code == 200, answer.text
    assert refused.status_code == 401
    in_process = _call(create_app(served["ranker"]), "POST", "/v1/rank", json=launch_body(served))
    assert answer.json() == in_process.json() and answer.json()["ranking"]


def test_a_failed_night_alarms_unless_its_model_serves():
    """A failed night alarms while the model serving is older than it, and a failed run that
    recorded no day alarms too (it used to read as no alarm); a failed re-run of the night
    production serves does not."""
    from leap_serving.http.metrics import night_failed

    day = dt.date(2026, 3, 2)
    assert night_failed({"outcome": "failed", "day": "2026-03-03"}, day)
    assert night_failed({"outcome": "failed", "day": None}, day)
    assert night_failed({"outcome": "failed", "day": "2026-03-02"}, None)
    assert not night_failed({"outcome": "failed", "day": "2026-03-02"}, day)
    assert not night_failed({"outcome": "held", "day": "2026-03-09"}, day)
