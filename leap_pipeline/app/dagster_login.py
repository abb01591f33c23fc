"""Dagster's webserver behind a login, for ``leap up``: no local user but the owner launches a run.

Dagster's webserver takes no credentials. On loopback that still let any local user of the
machine launch a run through its GraphQL API, and a run executes as the service's account,
which holds the MLflow admin password. ``leap up`` therefore starts the webserver through this
module: Dagster's own command line, unchanged, with its ASGI app wrapped in HTTP basic auth
(``BasicAuthGate``). The account is ``LOGIN_USER``; the password is generated once per data
folder into ``secrets/dagster-password`` (0600, in a 0700 folder), so only the owner can read
it, and its path reaches this process in ``$LEAP_DAGSTER_PASSWORD_FILE``, never on a command
line. A browser asks for it once, then carries a cookie (an HMAC of the password, HttpOnly,
SameSite=Strict) that the UI's websocket, which a browser may send without the password, is
let in with. ``GET /server_info`` (Dagster's version, nothing of the install) stays open for the
readiness probes.

Dagster has no documented hook for this: the one attribute replaced is
``dagster_webserver.cli.create_app_from_workspace_process_context``, which the CLI calls to
build its app. ``tests/test_dagster_login.py`` starts the CLI through this module and fails if
GraphQL then answers without the login.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

LOGIN_USER = "leap"
PASSWORD_FILE = "dagster-password"  # in the data folder's secrets/
OPEN_PATHS = frozenset({"/server_info"})
COOKIE = "leap_dagster"
REALM = 'Basic realm="leap up: Dagster", charset="UTF-8"'

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BasicAuthGate:
    """An ASGI app that lets a request through to ``app`` only with the account's basic-auth
    header or the cookie it sets; anything else is a 401 (a websocket is closed, 1008)."""

    def __init__(self, app: ASGIApp, user: str, password: str) -> None:
        if not password:
            raise ValueError("the Dagster login's password is empty")
        self.app = app
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._header = f"Basic {token}".encode()
        digest = hmac.new(password.encode(), b"leap-dagster-cookie", hashlib.sha256).hexdigest()
        self._cookie = digest.encode()

    def _admitted(self, scope: Scope) -> tuple[bool, bool]:
        """(admitted, by the password): the header, else the cookie, compared in constant
        time."""
        headers = dict(scope.get("headers") or [])
        if hmac.compare_digest(headers.get(b"authorization", b""), self._header):
            return True, True
        for part in headers.get(b"cookie", b"").split(b";"):
            name, _, value = part.strip().partition(b"=")
            if name == COOKIE.encode() and hmac.compare_digest(value, self._cookie):
                return True, False
        return False, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or (kind == "http" and scope["path"] in OPEN_PATHS):
            await self.app(scope, receive, send)
            return
        admitted, by_password = self._admitted(scope)
        if not admitted:
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"www-authenticate", REALM.encode()),
                        (b"content-type", b"text/plain; charset=utf-8"),
                    ],
                }
            )
            body = f"leap up's Dagster asks for a login: {LOGIN_USER} and the password in "
            body += f"the data folder's secrets/{PASSWORD_FILE}\n"
            await send({"type": "http.response.body", "body": body.encode()})
            return
        if not by_password or kind != "http":
            await self.app(scope, receive, send)
            return
        cookie = f"{COOKIE}={self._cookie.decode()}; Path=/; HttpOnly; SameSite=Strict"

        async def with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                message = {**message, "headers": [*headers, (b"set-cookie", cookie.encode())]}
            await send(message)

        await self.app(scope, receive, with_cookie)


def dagster_password(data: Path) -> Path:
    """The file of the login's password for the data folder ``data``, generated (0600, in
    ``secrets/``) the first time."""
    from leap_pipeline.app.credentials import secret, secrets_folder

    path = secrets_folder(data) / PASSWORD_FILE
    secret(path)
    return path


def login_header(data: Path) -> dict[str, str]:
    """The ``Authorization`` header of the login to ``leap up``'s Dagster on the data folder
    ``data`` (for a client of its GraphQL API run by the owner)."""
    from leap_pipeline.app.credentials import read_private, secrets_folder

    password = read_private(secrets_folder(data) / PASSWORD_FILE).strip()
    token = base64.b64encode(f"{LOGIN_USER}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def main(argv: list[str] | None = None) -> None:
    """``dagster-webserver ARGS``, its app behind ``BasicAuthGate`` with the password in the
    file ``$LEAP_DAGSTER_PASSWORD_FILE`` names."""
    import dagster_webserver.cli as webserver

    from leap_pipeline.app.credentials import read_private
    from leap_pipeline.settings import dagster_password_file

    where = dagster_password_file()
    if not where:
        raise SystemExit("leap: LEAP_DAGSTER_PASSWORD_FILE is not set: no login to ask for")
    password = read_private(Path(where)).strip()
    build = webserver.create_app_from_workspace_process_context

    def gated(*args: Any, **kwargs: Any) -> BasicAuthGate:
        return BasicAuthGate(build(*args, **kwargs), LOGIN_USER, password)

    webserver.create_app_from_workspace_process_context = gated
    sys.argv = ["dagster-webserver", *(sys.argv[1:] if argv is None else argv)]
    webserver.main()


if __name__ == "__main__":
    main()
