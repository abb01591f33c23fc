"""The registry read over MLflow's REST API (``leap_serving/registry/rest.py``), not MLflow.

A stand-in tracking server answers MLflow's REST routes from a real registered store (the tiny
model, registered twice through MLflow): the four reads the serving side makes, behind basic
auth, with artifacts proxied as ``mlflow server --serve-artifacts`` proxies them. ``leap rank``
against it ranks as the Ranker on the store itself does, in one bundle download and without
importing MLflow; a refusal, a 5xx, a hang and a missing alias each fail the read as what they
are (only "does not exist" is absence)."""

import base64
import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from http_model import launch_body, registered_model

from leap_serving.registry.registered import last_night, load_registered
from leap_serving.registry.rest import (
    RegistryNotFound,
    RegistryReadError,
    RestRegistry,
    rest_registry,
)

USER, PASSWORD = "leap", "pa55word"


class StandIn(ThreadingHTTPServer):
    """MLflow's REST routes over a local store; ``mode``: "ok", "503", or "hang"."""

    daemon_threads = True

    def __init__(self, client) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.client = client
        self.mode = "ok"
        self.requests: list[str] = []

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: StandIn

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        self._answer(status, json.dumps({"error_code": code, "message": message}).encode())

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            return self._error(401, "UNAUTHENTICATED", "You are not authenticated")
        if self.server.mode == "503":
            return self._answer(503, b"upstream unavailable", "text/plain")
        if self.server.mode == "hang":
            time.sleep(3)
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        client = self.server.client
        try:
            if url.path == "/api/2.0/mlflow/registered-models/alias":
                version = client.get_model_version_by_alias(query["name"], query["alias"])
                return self._answer(200, _version_json(version))
            if url.path == "/api/2.0/mlflow/model-versions/get":
                version = client.get_model_version(query["name"], query["version"])
                return self._answer(200, _version_json(version))
            if url.path == "/api/2.0/mlflow/registered-models/get":
                model = client.get_registered_model(query["name"])
                tags = [{"key": k, "value": v} for k, v in model.tags.items()]
                body = {"registered_model": {"name": model.name, "tags": tags}}
                return self._answer(200, json.dumps(body).encode())
            if url.path == "/api/2.0/mlflow/runs/get":
                run = client.get_run(query["run_id"])
                info = {
                    "run_id": run.info.run_id,
                    "artifact_uri": f"mlflow-artifacts:/{run.info.run_id}",
                }
                return self._answer(200, json.dumps({"run": {"info": info}}).encode())
            prefix = "/api/2.0/mlflow-artifacts/artifacts/"
            if url.path.startswith(prefix):
                run_id, _, path = urllib.parse.unquote(url.path[len(prefix) :]).partition("/")
                root = urllib.parse.urlsplit(client.get_run(run_id).info.artifact_uri).path
                return self._answer(
                    200, (Path(root) / path).read_bytes(), "application/octet-stream"
                )
        except Exception as exc:  # MLflow's error, with the status the real server gives it
            code = str(getattr(exc, "error_code", "INTERNAL_ERROR"))
            status = {"RESOURCE_DOES_NOT_EXIST": 404, "INVALID_PARAMETER_VALUE": 400}
            return self._error(status.get(code, 500), code, str(exc))
        return self._error(404, "ENDPOINT_NOT_FOUND", url.path)


def _version_json(version) -> bytes:
    tags = [{"key": k, "value": v} for k, v in version.tags.items()]
    record = {
        "name": version.name,
        "version": str(version.version),
        "run_id": version.run_id,
        "tags": tags,
    }
    return json.dumps({"model_version": record}).encode()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """The tiny model registered (alias on version 1) and a stand-in server over its store."""
    from mlflow import MlflowClient

    with registered_model(tmp_path_factory.mktemp("rest")) as model:
        server = StandIn(MlflowClient())
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield {**model, "server": server}
        finally:
            server.shutdown()


@pytest.fixture
def server(registry):
    standin = registry["server"]
    standin.mode, standin.requests = "ok", []
    return standin


def _client(server: StandIn, password: str = PASSWORD, timeout: float = 5.0) -> RestRegistry:
    env = {
        "MLFLOW_TRACKING_URI": server.uri,
        "MLFLOW_TRACKING_USERNAME": USER,
        "MLFLOW_TRACKING_PASSWORD": password,
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout),
    }
    client = rest_registry(env)
    assert client is not None
    return client


def test_leap_rank_ranks_from_a_tracking_server_in_one_download_without_mlflow(
    registry, server, tmp_path
):
    job = tmp_path / "job.json"
    body = launch_body(registry)
    job.write_text(json.dumps({**body["job"], "candidates": body["candidates"]}))
    code = (
        "import sys; from leap_pipeline.app.cli import main; "
        f"code = main(['rank', '--model', {registry['uri']!r}, '--job', {str(job)!r}, '--json']); "
        "print('MLFLOW' if 'mlflow' in sys.modules else 'NO-MLFLOW'); sys.exit(code)"
    )
    env = {
        "MLFLOW_TRACKING_URI": server.uri,
        "MLFLOW_TRACKING_USERNAME": USER,
        "MLFLOW_TRACKING_PASSWORD": PASSWORD,
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    answer_line, imported = ran.stdout.strip().splitlines()
    answer = json.loads(answer_line)
    in_store = registry["ranker"].rank(body["job"], body["candidates"])
    assert answer["model_version"] == registry["versions"][0]
    assert [c["hardware_type"] for c in answer["ranking"]] == in_store.preference_list
    assert imported == "NO-MLFLOW"
    downloads = [r for r in server.requests if "mlflow-artifacts" in r]
    assert len(downloads) == 1 and downloads[0].endswith("/model_bundle/model.tar"), downloads


def test_a_version_reads_and_loads_as_mlflow_reads_it(registry, server):
    client = _client(server)
    record = client.version_by_alias("leap-http-test", "production")
    assert record.version == registry["versions"][0]
    again = client.version("leap-http-test", registry["versions"][1])
    assert again.version == registry["versions"][1] and "artifact_sha256" in again.tags
    assert isinstance(client.model_tags("leap-http-test"), dict)


def test_only_does_not_exist_is_absence(registry, server):
    client = _client(server)
    with pytest.raises(RegistryNotFound, match="alias no-such-alias not found"):
        client.version_by_alias("leap-http-test", "no-such-alias")
    with pytest.raises(RegistryNotFound, match="RESOURCE_DOES_NOT_EXIST"):
        client.version("leap-http-test", "99")
    with pytest.raises(RegistryReadError) as refused:
        _client(server, password="wrong").version_by_alias("leap-http-test", "production")
    assert not isinstance(refused.value, RegistryNotFound) and "401" in str(refused.value)
    server.mode = "503"
    with pytest.raises(RegistryReadError) as unavailable:
        client.version_by_alias("leap-http-test", "production")
    assert not isinstance(unavailable.value, RegistryNotFound) and "503" in str(unavailable.value)


def test_a_hanging_server_fails_the_read_at_its_timeout_not_mlflows_retries(registry, server):
    server.mode = "hang"
    started = time.monotonic()
    with pytest.raises(RegistryReadError, match="timed out"):
        _client(server, timeout=0.5).version_by_alias("leap-http-test", "production")
    assert time.monotonic() - started < 2.5


def test_an_artifact_larger_than_allowed_is_refused(registry, server, tmp_path):
    client = _client(server)
    record = client.version_by_alias("leap-http-test", "production")
    bundle = json.loads(record.tags["model_bundle"])["path"]
    with pytest.raises(RegistryReadError, match="larger than 1,000 bytes"):
        client.download_run_artifact(record.run_id, bundle, tmp_path, max_bytes=1000)
    (tmp_path / "whole").mkdir()
    whole = client.download_run_artifact(record.run_id, bundle, tmp_path / "whole", 1 << 30)
    assert whole is not None and whole.stat().st_size > 1000


def test_load_registered_and_last_night_go_over_rest_when_a_server_is_named(
    registry, server, monkeypatch
):
    for name, value in (
        ("MLFLOW_TRACKING_URI", server.uri),
        ("MLFLOW_TRACKING_USERNAME", USER),
        ("MLFLOW_TRACKING_PASSWORD", PASSWORD),
    ):
        monkeypatch.setenv(name, value)
    with contextlib.suppress(ImportError):
        import mlflow

        monkeypatch.setattr(mlflow, "get_tracking_uri", lambda: server.uri)
        monkeypatch.setattr(mlflow, "get_registry_uri", lambda: server.uri)
    model, version = load_registered(registry["uri"])
    assert version == registry["versions"][0] and model.spec_table is not None
    assert any("/registered-models/alias" in r for r in server.requests)
    assert last_night(registry["uri"]) is None  # no night recorded: None, not an error
    server.mode = "503"
    assert last_night(registry["uri"]) is None  # unreadable: no record, never an exception


@pytest.mark.parametrize(
    ("env", "chosen"),
    [
        ({"MLFLOW_TRACKING_URI": "sqlite:///x.db"}, False),
        ({"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}, False),
        ({"MLFLOW_TRACKING_URI": "http://h:5000", "MLFLOW_TRACKING_TOKEN": "t"}, True),
        ({"MLFLOW_TRACKING_URI": "https://h", "MLFLOW_TRACKING_AUTH": "plugin"}, False),
        (
            {
                "MLFLOW_TRACKING_URI": "http://h",
                "MLFLOW_TRACKING_USERNAME": "u",
                "MLFLOW_TRACKING_PASSWORD": "p",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "x",
            },
            False,
        ),
        (
            {
                "MLFLOW_TRACKING_URI": "http://h",
                "MLFLOW_TRACKING_TOKEN": "t",
                "MLFLOW_REGISTRY_URI": "http://other",
            },
            False,
        ),
    ],
    ids=["sqlite", "folder", "token", "auth-plugin", "bad-timeout", "registry-apart"],
)
def test_only_a_tracking_server_configured_as_documented_is_read_over_rest(env, chosen):
    assert (rest_registry(env) is not None) is chosen
