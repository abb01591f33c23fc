"""``leap serve``'s routes over one Ranker: ``create_app(ranker, config)``, an ASGI app.

``POST /v1/rank`` ranks one launch (``Ranking.to_dict()``), ``POST /v1/rank/batch`` many in one
``rank_many`` call (one model for the whole batch), ``GET /v1/model`` says which model answers,
``/healthz`` and ``/readyz`` are the probes, ``/metrics`` is Prometheus's, ``GET /openapi.json``
the document ``openapi`` holds, and ``POST /v1/k8s/mutate`` the Kubernetes admission webhook
(``handoff.kubernetes``). Every answer is JSON but ``/metrics``; a caller's mistake is a 4xx
naming the field (``bodies``), the status of a ranking follows its reason code (``ranking``).
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

from ..handoff.config import load_config
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


def is_admission_review(body: dict[str, Any]) -> str | None:
    """None when ``body`` has an AdmissionReview's shape, else what is wrong with it."""
    if body.get("kind") != "AdmissionReview":
        return "kind must be AdmissionReview"
    if not isinstance(body.get("apiVersion"), str) or not body["apiVersion"].startswith(
        "admission.k8s.io/"
    ):
        return "apiVersion must be admission.k8s.io/v1"
    request = body.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        return "request must be an object with a uid"
    return None


def create_app(ranker: Any, config: ServeConfig | None = None) -> Any:
    """The service over ``ranker``: a Starlette app inside the guard (token, metrics, errors)."""
    config = config or ServeConfig()
    metrics = ServeMetrics(ranker)
    pool = RankingPool(ranker, config.ranking_threads, config.deadline_s)
    describer = ModelDescriber(ranker)
    # /v1/model may wait on the registry (a version's first ask): a thread of its own, so a
    # registry that does not answer never holds the threads rankings need
    info_pool = RankingPool(ranker, 1, config.deadline_s)
    # read at start: a bad hand-off file stops the service with its reason, not each webhook call
    handoff = load_config(config.handoff_config) if config.handoff_config else None
    settling = threading.Event()  # set while a served process settles its first model

    async def read_json(request: Request) -> dict[str, Any]:
        check_content_type(request.headers.get("content-type"))
        try:
            body = await read_capped(
                request.stream(), request.headers.get("content-length"), config.max_body_bytes
            )
        except ClientDisconnect:
            raise RequestError(
                400, "body", "the client left before sending the whole body", "client_disconnected"
            ) from None
        return parse_object(body)

    async def rank(request: Request) -> Response:
        launch = parse_launch(await read_json(request))
        pool.check_budgets([launch])
        ranking = await pool.run(pool.rank_one, launch)
        metrics.count_empty([ranking])
        return json_response(status_of(ranking.reason_code), ranking.to_dict())

    async def rank_batch(request: Request) -> Response:
        launches = parse_batch(await read_json(request))
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

    async def mutate(request: Request) -> Response:
        review = await read_json(request)
        if (wrong := is_admission_review(review)) is not None:
            raise RequestError(
                400,
                "body",
                f"not an admission.k8s.io/v1 AdmissionReview: {wrong}",
                "invalid_admission_review",
            )
        from ..handoff.kubernetes import admission_response  # written beside this route

        return json_response(200, await pool.run(admission_response, review, ranker, handoff))

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
        Route("/v1/k8s/mutate", mutate, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            RequestError: request_error,
            HTTPException: http_error,
            Exception: internal_error,
        },
    )
    guarded = Guard(app, metrics, [r.path for r in routes], config.token)
    guarded.ranker, guarded.metrics, guarded.pool = ranker, metrics, pool  # for the tests
    return guarded
