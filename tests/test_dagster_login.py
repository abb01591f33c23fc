"""``leap up``'s Dagster webserver behind a login (``leap_pipeline/app/dagster_login.py``): no
request but the readiness probe's gets through without the account's password or the cookie it
sets, and Dagster's own webserver command, started through the module, asks for it."""

import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import httpx
import pytest

from leap_pipeline.app.credentials import write_private
from leap_pipeline.app.dagster_login import (
    COOKIE,
    LOGIN_USER,
    PASSWORD_FILE,
    BasicAuthGate,
    dagster_password,
    login_header,
)
from leap_pipeline.app.process_groups import answers, free_port
from leap_pipeline.settings import DAGSTER_PASSWORD_FILE_ENV

PASSWORD = "correct horse"


async def _inner(scope, receive, send):
    """The app behind the gate: 200 "inner" for http, an accepted websocket."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.accept"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"inner"})


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _get(path: str, headers: dict | None = None) -> httpx.Response:
    gate = BasicAuthGate(_inner, LOGIN_USER, PASSWORD)

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=gate)
        async with httpx.AsyncClient(transport=transport, base_url="http://gate") as client:
            return await client.get(path, headers=headers or {})

    return asyncio.run(ask())


@pytest.mark.parametrize(
    "headers",
    [None, _basic(LOGIN_USER, "wrong"), _basic("admin", PASSWORD), {"Cookie": f"{COOKIE}=forged"}],
    ids=["none", "wrong-password", "wrong-user", "forged-cookie"],
)
def test_a_request_without_the_login_is_a_401_that_says_what_to_give(headers):
    answer = _get("/graphql", headers)
    assert answer.status_code == 401 and answer.text != "inner"
    assert answer.headers["www-authenticate"].startswith("Basic realm=")
    assert f"secrets/{PASSWORD_FILE}" in answer.text


def test_the_login_lets_a_request_in_and_its_cookie_lets_the_next_in():
    answer = _get("/graphql", _basic(LOGIN_USER, PASSWORD))
    assert answer.status_code == 200 and answer.text == "inner"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and PASSWORD not in cookie
    again = _get("/graphql", {"Cookie": cookie.split(";")[0]})
    assert again.status_code == 200 and again.text == "inner"


def test_only_the_readiness_probe_is_open():
    assert _get("/server_info").status_code == 200
    assert _get("/server_info/../graphql").status_code == 401


def test_a_websocket_without_the_login_is_closed_and_with_its_cookie_accepted():
    gate = BasicAuthGate(_inner, LOGIN_USER, PASSWORD)
    cookie = _get("/", _basic(LOGIN_USER, PASSWORD)).headers["set-cookie"].split(";")[0]

    def handshake(headers: list) -> list[dict]:
        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "websocket.connect"}

        scope = {"type": "websocket", "path": "/graphql", "headers": headers}
        asyncio.run(gate(scope, receive, send))
        return sent

    assert handshake([]) == [{"type": "websocket.close", "code": 1008}]
    assert handshake([(b"cookie", cookie.encode())]) == [{"type": "websocket.accept"}]


def test_an_empty_password_is_refused():
    with pytest.raises(ValueError, match="password is empty"):
        BasicAuthGate(_inner, LOGIN_USER, "")


DEFINITIONS = """
import dagster as dg

@dg.op
def hello():
    return 1

@dg.job
def greet():
    hello()

defs = dg.Definitions(jobs=[greet])
"""


def test_dagsters_own_webserver_started_through_the_module_asks_for_the_login(tmp_path):
    """The module swaps one attribute of Dagster's CLI (``create_app_from_workspace_process_
    context``): if Dagster stops building its app through it, this fails (GraphQL answers
    without the login)."""
    data = tmp_path / "data"
    password_file = dagster_password(data)
    assert oct(password_file.stat().st_mode & 0o777) == "0o600"
    (tmp_path / "defs.py").write_text(DEFINITIONS)
    (tmp_path / "home").mkdir()
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "home"),
        DAGSTER_PASSWORD_FILE_ENV: str(password_file),
    }
    log = (tmp_path / "webserver.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leap_pipeline.app.dagster_login",
            "-f",
            str(tmp_path / "defs.py"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not answers(f"{base}/server_info"):
            assert server.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the webserver never answered"
            time.sleep(0.5)
        launch = 'mutation { launchRun(executionParams: {selector: {jobName: "greet", '
        launch += 'repositoryLocationName: "defs.py", repositoryName: "__repository__"}}) '
        launch += "{ __typename } }"

        def graphql(query: str, headers: dict) -> tuple[int, dict]:
            request = urllib.request.Request(
                f"{base}/graphql",
                data=json.dumps({"query": query}).encode(),
                headers={"Content-Type": "application/json", **headers},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return response.status, json.load(response)
            except urllib.error.HTTPError as refused:
                return refused.code, {}

        assert graphql(launch, {}) == (401, {})
        assert graphql("{ version }", _basic(LOGIN_USER, "wrong"))[0] == 401
        status, body = graphql("{ version }", login_header(data))
        assert status == 200 and body["data"]["version"], body
        write_private(password_file, "another\n")  # read once, at start: a change needs a restart
        assert graphql("{ version }", login_header(data))[0] == 401
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)
        server.wait(timeout=30)
