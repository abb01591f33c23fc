"""A prototype of ``create_app`` on FastAPI, request bodies as pydantic models (issue 58, 5).

Measured against ``app.create_app`` with ``benchmarks/serve_load.py --app fastapi`` to decide
whether FastAPI may replace the hand-written body checks (``bodies``) and OpenAPI document
(``openapi``). The same routes, guard, pool, limits and error shape: ``{"error", "field",
"reason"}``, the field named as ``bodies`` names it (``launches[1].candidates``,
``budget.max_devices``) and the reason showing the value.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import re
import threading
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from leap_serving.http.app import EXCEPTION_HANDLERS, json_response, tokens_of
from leap_serving.http.bodies import Launch, RequestError, _shown, check_content_type
from leap_serving.http.config import MAX_BATCH, MAX_CANDIDATES, ServeConfig
from leap_serving.http.guard import Guard
from leap_serving.http.metrics import CONTENT_TYPE, ServeMetrics
from leap_serving.http.model_info import ModelDescriber
from leap_serving.http.ranking import RankingPool, status_of

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
MAX_DEVICES = 2**63 - 1  # a cap a caller in any language holds in a 64-bit integer


def _date(value: str) -> dt.date:
    if _DATE.fullmatch(value):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise PydanticCustomError("date", "is not a date YYYY-MM-DD")


class BudgetBody(BaseModel):
    """Caps on the candidates; null for either is no cap."""

    model_config = ConfigDict(extra="forbid", strict=True)
    max_cost_per_hour: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    max_devices: Annotated[int, Field(ge=1, le=MAX_DEVICES)] | None = None


class LaunchBody(BaseModel):
    """One launch: the launch config, its candidates, and optionally its date and caps."""

    model_config = ConfigDict(extra="forbid", strict=True)
    job: dict[str, Any] = Field(description="the launch config (docs/data-contract.md)")
    candidates: list[str] = Field(max_length=MAX_CANDIDATES)
    launch_date: Annotated[str, AfterValidator(_date)] | None = Field(
        default=None, json_schema_extra={"format": "date"}
    )
    budget: BudgetBody | None = None

    def launch(self) -> Launch:
        budget = self.budget.model_dump(exclude_none=True) if self.budget else None
        return Launch(self.job, self.candidates, self.launch_date, budget or None)


class BatchBody(BaseModel):
    """Many launches ranked on one model and one launch date."""

    model_config = ConfigDict(extra="forbid", strict=True)
    launches: list[LaunchBody] = Field(
        min_length=1, max_length=MAX_BATCH, description="all with the same launch_date"
    )


_FIELDS = {
    None: ("a launch", tuple(LaunchBody.model_fields)),
    "budget": ("a cap", tuple(BudgetBody.model_fields)),
}


def field_of(loc: tuple[Any, ...]) -> str:
    """pydantic's location as ``bodies`` names a field: ``launches[1].budget.max_devices``; an
    item of ``candidates`` is named by its list."""
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            if parts and parts[-1] == "launches":
                parts[-1] += f"[{part}]"
                continue
            break
        parts.append(part if len(part) <= 40 and part.isprintable() else _shown(part, 40))
    return ".".join(parts) or "body"


def reason_of(error: dict[str, Any], field: str, batch: bool) -> str:
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        return f"{field}: is missing"
    if kind == "extra_forbidden":
        parent = next((p for p in reversed(error["loc"][:-1]) if isinstance(p, str)), None)
        what, names = (
            ("a batch", ("launches",))
            if batch and parent is None
            else _FIELDS.get(parent, _FIELDS[None])
        )
        return f"{field}: is not a field of {what} (one of {', '.join(names)})"
    message = error["msg"][:1].lower() + error["msg"][1:]
    return f"{field}: {message} (got {_shown(value)})"


async def validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    # an unknown field first, as bodies does: a typo explains the missing field beside it
    error = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    loc = tuple(error["loc"])
    loc = loc[1:] if loc[:1] == ("body",) else loc
    if error["type"] == "json_invalid" or (error["type"] == "missing" and not loc):
        reason = f"the body is not JSON: {error.get('ctx', {}).get('error', 'empty')}"[:140]
        return json_response(400, {"error": "invalid_json", "field": "body", "reason": reason})
    field = field_of(loc)
    reason = reason_of({**error, "loc": loc}, field, request.url.path.endswith("/batch"))
    return json_response(422, {"error": "invalid_field", "field": field, "reason": reason})


def http_error(limit: int):
    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 413:  # FastAPI's max_body_size, counted as the body streams in
            reason = f"the body passes the limit of {limit} bytes"
            return json_response(
                413, {"error": "body_too_large", "field": "body", "reason": reason}
            )
        if exc.status_code == 400 and request.method == "POST":  # a body json cannot read
            reason = "the body is not JSON: undecodable or nested too deep"
            return json_response(400, {"error": "invalid_json", "field": "body", "reason": reason})
        return await EXCEPTION_HANDLERS[HTTPException](request, exc)

    return handle


async def json_type(request: Request) -> None:
    """415 naming the header when the body says it is not JSON (no type said is JSON). Async:
    FastAPI runs a plain function's dependency in a thread, a hop on every request."""
    check_content_type(request.headers.get("content-type"))


def create_fastapi_app(ranker: Any, config: ServeConfig | None = None) -> Any:
    """``create_app``'s service on FastAPI: the same guard, pool and answers."""
    config = config or ServeConfig()
    tokens = tokens_of(config)
    metrics = ServeMetrics(ranker)
    pool = RankingPool(ranker, config.ranking_threads, config.deadline_s)
    describer = ModelDescriber(ranker)
    info_pool = RankingPool(ranker, 1, config.deadline_s)

    settling = threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        settling.set()
        threading.Thread(target=settle, name="leap-serve-settle", daemon=True).start()
        try:
            yield
        finally:
            pool.close()
            info_pool.close()

    def settle() -> None:  # as create_app's
        ranker.wait_ready()
        gc.collect()
        gc.freeze()
        settling.clear()

    app = FastAPI(
        title="leap serve",
        version="1",
        docs_url=None,
        redoc_url=None,
        max_body_size=config.max_body_bytes,
        strict_content_type=False,
        exception_handlers={
            **EXCEPTION_HANDLERS,
            RequestValidationError: validation_error,
            HTTPException: http_error(config.max_body_bytes),
        },
        lifespan=lifespan,
    )

    @app.post("/v1/rank", dependencies=[Depends(json_type)])
    async def rank(body: LaunchBody) -> Response:
        launch = body.launch()
        pool.check_budgets([launch])
        ranking = await pool.run(pool.rank_one, launch)
        metrics.count_empty([ranking])
        return json_response(status_of(ranking.reason_code), ranking.to_dict())

    @app.post("/v1/rank/batch", dependencies=[Depends(json_type)])
    async def rank_batch(body: BatchBody) -> Response:
        launches = [item.launch() for item in body.launches]
        for i, launch in enumerate(launches):
            if launch.launch_date != launches[0].launch_date:
                field = f"launches[{i}].launch_date"
                reason = f"{field}: differs from launches[0]'s: a batch ranks on one launch date"
                raise RequestError(422, field, reason, "invalid_field")
        pool.check_budgets(launches, where="launches")
        rankings = await pool.run(pool.rank_many, launches)
        metrics.count_empty(rankings)
        codes = {r.reason_code for r in rankings}
        status = 503 if codes and codes <= {"model_loading", "no_model"} else 200
        return json_response(status, {"rankings": [r.to_dict() for r in rankings]})

    @app.get("/v1/model")
    async def model() -> Response:
        return json_response(200, await info_pool.run(describer.describe))

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response(200, {"alive": True})

    @app.get("/readyz")
    async def readyz() -> Response:
        ready = ranker.wait_ready(0) and not settling.is_set()
        return json_response(
            200 if ready else 503, {"ready": ready, "model_version": ranker.model_version}
        )

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), 200, media_type=CONTENT_TYPE)

    async def declared_cap(scope, receive, send) -> None:
        """413 at once for a Content-Length past the cap: FastAPI's own answers it in text."""
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                size = int(value) if name == b"content-length" and value.isdigit() else 0
                if size > config.max_body_bytes:
                    reason = f"the body is {size} bytes, the limit {config.max_body_bytes}"
                    error = RequestError(413, "body", reason, "body_too_large")
                    return await json_response(413, error.body())(scope, receive, send)
        await app(scope, receive, send)

    paths = [r.path for r in app.routes]
    guarded = Guard(declared_cap, metrics, paths, tokens)
    guarded.ranker, guarded.metrics, guarded.pool = ranker, metrics, pool
    return guarded
