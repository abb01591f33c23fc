"""``leap serve``'s routes over one Ranker: ``create_app(ranker, config)``, an ASGI app.

``POST /v1/rank`` ranks one launch (``Ranking.to_dict()``), ``POST /v1/rank/batch`` many in one
``rank_many`` call (one model for the whole batch), ``GET /v1/model`` says which model answers,
``/healthz`` and ``/readyz`` are the probes, ``/metrics`` is Prometheus's, and ``GET
/openapi.json`` the document ``openapi`` holds. The Kubernetes admission webhook is not here: it
has a listener of its own (``webhook``), since the kube-apiserver sends no bearer token and its
Pod CREATEs must not queue behind these routes. Every answer is JSON but ``/metrics``; a caller's
mistake is a 4xx naming the field (``bodies``), the status of a ranking follows its reason code
(``ranking``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import math
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from .bodies import (
    RequestError,
    check_content_type,
    parse_batch,
    parse_launch,
    parse_object,
    read_capped,
)
from .config import ServeConfig
from .guard import Guard
from .metrics import CONTENT_TYPE, ServeMetrics
from .model_info import ModelDescriber
from .openapi import document
from .ranking import RankingPool, status_of
from .tokens import Tokens

log = logging.getLogger("leap_serving")

RETRY_AFTER_S = "5"  # a model loads in seconds


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    """JSON with non-finite floats as null: strict JSON a caller in any language can read."""
    try:
        payload = json.dumps(body, allow_nan=False)
    except ValueError:
        payload = json.dumps(_finite(body), allow_nan=False)
    if status == 503:
        headers = {"retry-after": RETRY_AFTER_S, **(headers or {})}
    return Response(payload, status, headers, media_type="application/json")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


async def read_json(request: Request, max_body_bytes: int) -> dict[str, Any]:
    """The request's body as a JSON object, read up to ``max_body_bytes`` (``RequestError``
    naming the field otherwise)."""
    check_content_type(request.headers.get("content-type"))
    try:
        body = await read_capped(
            request.stream(), request.headers.get("content-length"), max_body_bytes
        )
    except ClientDisconnect:
        raise RequestError(
            400, "body", "the client left before sending the whole body", "client_disconnected"
        ) from None
    return parse_object(body)


async def request_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)
    return json_response(exc.status, exc.body())


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    reason = f"{request.method} {request.url.path[:200]}: {exc.detail}"
    return json_response(exc.status_code, {"error": "http", "field": None, "reason": reason})


async def internal_error(request: Request, exc: Exception) -> Response:
    # logged with its traceback by the guard, which the exception reaches next
    return json_response(
        500,
        {
            "error": "internal_error",
            "field": None,
            "reason": f"{type(exc).__name__}: {str(exc)[:200]}",
        },
    )


# every listener's: a caller's mistake names its field, anything else is a 500 with a reason
EXCEPTION_HANDLERS = {
    RequestError: request_error,
    HTTPException: http_error,
    Exception: internal_error,
}


def tokens_of(config: ServeConfig) -> Tokens | None:
    """The tokens ``config`` names (the file read now: a bad one stops the start), or None."""
    if not config.authenticated:
        return None
    return Tokens(config.token, config.token_file)


def create_app(ranker: Any, config: ServeConfig | None = None) -> Any:
    """The service over ``ranker``: a Starlette app inside the guard (tokens, metrics, errors)."""
    config = config or ServeConfig()
    tokens = tokens_of(config)  # first: a bad token file stops the start before threads start
    metrics = ServeMetrics(ranker)
    pool = RankingPool(ranker, config.ranking_threads, config.deadline_s)
    describer = ModelDescriber(ranker)
    # /v1/model may wait on the registry (a version's first ask): a thread of its own, so a
    # registry that does not answer never holds the threads rankings need
    info_pool = RankingPool(ranker, 1, config.deadline_s)
    settling = threading.Event()  # set while a served process settles its first model

    async def rank(request: Request) -> Response:
        launch = parse_launch(await read_json(request, config.max_body_bytes))
        pool.check_budgets([launch])
        ranking = await pool.run(pool.rank_one, launch)
        metrics.count_empty([ranking])
        return json_response(status_of(ranking.reason_code), ranking.to_dict())

    async def rank_batch(request: Request) -> Response:
        launches = parse_batch(await read_json(request, config.max_body_bytes))
        pool.check_budgets(launches, where="launches")
        rankings = await pool.run(pool.rank_many, launches)
        metrics.count_empty(rankings)
        codes = {r.reason_code for r in rankings}
        # no model for any of them is the service's state, not an answer per launch
        status = 503 if codes and codes <= {"model_loading", "no_model"} else 200
        return json_response(status, {"rankings": [r.to_dict() for r in rankings]})

    async def model(request: Request) -> Response:
        return json_response(200, await info_pool.run(describer.describe))

    async def healthz(request: Request) -> Response:
        return json_response(200, {"alive": True})

    async def readyz(request: Request) -> Response:
        ready = ranker.wait_ready(0) and not settling.is_set()
        body = {"ready": ready, "model_version": ranker.model_version}
        return json_response(200 if ready else 503, body)

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), 200, media_type=CONTENT_TYPE)

    async def openapi(request: Request) -> Response:
        return json_response(200, document())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        settling.set()
        threading.Thread(target=settle, name="leap-serve-settle", daemon=True).start()
        try:
            yield
        finally:
            pool.close()
            info_pool.close()

    def settle() -> None:
        """Once the first model is in, collect the loading's garbage and freeze what is left
        out of the collector's sight, before ``/readyz`` says ready: the full collections a
        load leaves behind stalled the served process 20-250 ms each in its first seconds
        (measured), long enough to back up a fixed load of 200 rankings a second."""
        ranker.wait_ready()
        gc.collect()
        gc.freeze()
        settling.clear()

    routes = [
        Route("/v1/rank", rank, methods=["POST"]),
        Route("/v1/rank/batch", rank_batch, methods=["POST"]),
        Route("/v1/model", model, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=EXCEPTION_HANDLERS)
    guarded = Guard(app, metrics, [r.path for r in routes], tokens)
    guarded.ranker, guarded.metrics, guarded.pool = ranker, metrics, pool  # for the tests
    return guarded
