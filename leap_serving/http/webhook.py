"""The Kubernetes admission webhook's listener: ``POST /v1/k8s/mutate`` and ``GET /healthz``.

Apart from ``app``'s routes for three reasons. The kube-apiserver calls webhooks over https only
and sends no bearer token, so this listener has TLS and no token (``ServeConfig`` refuses a
webhook port without a certificate), while the main one keeps its tokens. Its rankings run in a
pool of their own (``webhook_threads``), so a burst of Pod CREATEs never queues into
``/v1/rank``'s threads nor the other way round. And only this route is reachable on its port:
whoever reaches it can rank a launch and nothing else.

It never fails a Pod: a ranking that misses the deadline, or a pool with too many waiting, is
answered 200 with the object allowed unchanged and a warning (``kubectl`` prints it), not the
504 or 503 the main listener gives, which the kube-apiserver would count as the webhook failing.
"""

from __future__ import annotations

import contextlib
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..handoff.config import load_config
from ..handoff.kubernetes import admission_response, unranked
from .app import EXCEPTION_HANDLERS, json_response, read_json
from .bodies import RequestError
from .config import ServeConfig
from .guard import Guard
from .metrics import ServeMetrics
from .ranking import RankingPool

MUTATE_PATH = "/v1/k8s/mutate"


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


def create_webhook_app(
    ranker: Any, config: ServeConfig | None = None, metrics: ServeMetrics | None = None
) -> Any:
    """The webhook over ``ranker``, inside a guard with no token; ``metrics`` the main app's,
    so one ``/metrics`` counts both listeners (by route)."""
    config = config or ServeConfig()
    # read at start: a bad hand-off file stops the service with its reason, not each webhook call
    handoff = load_config(config.handoff_config) if config.handoff_config else None
    metrics = metrics or ServeMetrics(ranker)
    pool = RankingPool(ranker, config.webhook_threads, config.deadline_s)

    async def mutate(request: Request) -> Response:
        review = await read_json(request, config.max_body_bytes)
        if (wrong := is_admission_review(review)) is not None:
            raise RequestError(
                400,
                "body",
                f"not an admission.k8s.io/v1 AdmissionReview: {wrong}",
                "invalid_admission_review",
            )
        try:
            answer = await pool.run(admission_response, review, ranker, handoff)
        except RequestError as exc:
            if exc.status not in (503, 504):
                raise
            answer = unranked(review, f"not ranked: {exc.reason} ({exc.code})")
        return json_response(200, answer)

    async def healthz(request: Request) -> Response:
        return json_response(200, {"alive": True})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        try:
            yield
        finally:
            pool.close()

    routes = [
        Route(MUTATE_PATH, mutate, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=EXCEPTION_HANDLERS)
    guarded = Guard(app, metrics, [r.path for r in routes], None)
    guarded.ranker, guarded.metrics, guarded.pool = ranker, metrics, pool  # for the tests
    return guarded
