"""The gate every request passes: the bearer token, the metrics, and the last word on errors.

A plain ASGI middleware around the Starlette app (cheaper than Starlette's ``BaseHTTPMiddleware``
on a path measured in milliseconds). With tokens set (``tokens.Tokens``: ``LEAP_SERVE_TOKEN``,
and the file ``LEAP_SERVE_TOKEN_FILE`` names), every route but ``/healthz`` and ``/readyz`` (a
kubelet's probes carry no token) needs ``Authorization: Bearer <token>`` with any one of them,
compared in constant time. The webhook's listener has none: the kube-apiserver sends no token.
Each answer is counted by route and status and timed; an exception no route caught is logged
with its traceback and answered 500 with a reason, never a dropped connection.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from .metrics import ServeMetrics
from .tokens import Tokens

log = logging.getLogger("leap_serving")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def authorized(headers: list[tuple[bytes, bytes]], tokens: Tokens) -> bool:
    """True when the request carries ``Authorization: Bearer <token>`` with one of ``tokens``;
    constant time in the tokens (``Tokens.allows``), so none can be guessed by timing."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, given = value.partition(b" ")
            return scheme.lower() == b"bearer" and tokens.allows(given.strip())
    return False


async def answer_json(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class Guard:
    """Authentication (``tokens``; None: none asked), metrics and the catch-all around ``app``."""

    def __init__(
        self, app: Any, metrics: ServeMetrics, routes: Collection[str], tokens: Tokens | None
    ) -> None:
        self.app, self.metrics, self.routes = app, metrics, frozenset(routes)
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        path = scope["path"]
        route = path if path in self.routes else "other"
        status = {"code": 500, "started": False}

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        try:
            if (
                self.tokens is not None
                and path not in OPEN_PATHS
                and not authorized(scope["headers"], self.tokens)
            ):
                await answer_json(
                    sending,
                    401,
                    {
                        "error": "unauthorized",
                        "field": "authorization",
                        "reason": "this route needs the header Authorization: Bearer <token>",
                    },
                    [(b"www-authenticate", b'Bearer realm="leap"')],
                )
            else:
                await self.app(scope, receive, sending)
        except Exception as exc:
            log.exception("leap_serving: %s %s failed", scope.get("method"), path[:200])
            if not status["started"]:
                await answer_json(
                    sending,
                    500,
                    {
                        "error": "internal_error",
                        "field": None,
                        "reason": f"{type(exc).__name__}: {str(exc)[:200]}",
                    },
                )
        finally:
            self.metrics.observe(route, status["code"], time.perf_counter() - started)
