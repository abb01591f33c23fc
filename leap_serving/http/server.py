"""Running the service: a Ranker following its model, the app over it, uvicorn in front.

``leap serve`` (the pipeline's CLI) and ``python -m leap_serving.http`` (a host with only
``leap_serving``) both end here. The Ranker loads its model in the background, so the port
opens at once and ``/readyz`` answers 503 until the model is ready.

With ``webhook_port``, a second uvicorn server in the same process and event loop serves only
the admission webhook (``webhook``), over TLS and without a token. One process rather than a
``leap serve-webhook`` of its own: both listeners share one Ranker, so the model is loaded,
checked and held in memory once and an alias move reaches both at the same moment, and there is
one process to supervise; the webhook keeps its own ranking threads, so its queue is apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

from .app import create_app, tokens_of
from .config import HOST_ENV, ServeConfig

log = logging.getLogger("leap_serving")

# a server follows the pointer in the background, so a promoted model serves within a minute with
# no ranking traffic: the alias checked every 15 s, a new version's canary bounded at 20 s (the
# nightly gate checked the version first; the canary guards against a model that loads, then
# fails on live launches, which 20 s of a busy fleet's launches still shows)
FOLLOW_INTERVAL_S = 15.0
SERVE_CANARY_MAX_S = 20.0


def serve(
    config: ServeConfig,
    model_uri: str | None = None,
    *,
    check_interval_s: float = FOLLOW_INTERVAL_S,
    ranker: Any = None,
    timezone: str | None = None,
) -> None:
    """Serve until stopped (SIGINT or SIGTERM): the model ``model_uri`` names (default
    ``$LEAP_MODEL_URI``, else the production alias), or ``ranker``, its age counted in
    ``timezone`` (the calendar's; default the machine's). ``ValueError`` naming the setting
    when a TLS or token file cannot be used, before any port opens."""
    import uvicorn

    from ..decide.ranker import Ranker
    from .webhook import create_webhook_app

    config.check_files()
    tokens_of(config)  # a token file it cannot use stops the start before a model loads
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if ranker is None:
        ranker = Ranker(
            model_uri,
            check_interval_s=check_interval_s,
            canary_max_s=SERVE_CANARY_MAX_S,
            follow_in_background=True,
            timezone=timezone,
        )
    app = create_app(ranker, config)
    scheme = "https" if config.tls_cert else "http"
    log.info(
        "leap serve: %s://%s:%d, model %s, token %s, body limit %d bytes, deadline %g s",
        scheme,
        config.host,
        config.port,
        ranker.model_uri,
        "required" if config.authenticated else "none",
        config.max_body_bytes,
        config.deadline_s,
    )
    if config.exposed_without_token:
        log.warning(
            "leap serve: LISTENING ON %s=%s WITHOUT A TOKEN (--allow-unauthenticated): anyone "
            "who reaches port %d can rank and read /metrics; this is safe only behind a proxy "
            "that authenticates",
            HOST_ENV,
            config.host,
            config.port,
        )
    tls = {"ssl_certfile": config.tls_cert, "ssl_keyfile": config.tls_key}
    common = {"log_level": "warning", "access_log": False, "server_header": False, "lifespan": "on"}
    servers = [uvicorn.Config(app, host=config.host, port=config.port, **tls, **common)]
    if config.webhook_port is not None:
        host = config.webhook_host or config.host
        webhook = create_webhook_app(ranker, config, metrics=app.metrics)
        servers.append(
            uvicorn.Config(webhook, host=host, port=config.webhook_port, **tls, **common)
        )
        log.info(
            "leap serve: admission webhook on https://%s:%d/v1/k8s/mutate (no token, %d "
            "threads of its own)",
            host,
            config.webhook_port,
            config.webhook_threads,
        )
    run_servers(servers)


def run_servers(configs: list[Any]) -> None:
    """Run a uvicorn server for each of ``configs`` in one event loop until SIGINT or SIGTERM
    stops them all, or one of them stops (a port that would not bind): then the others stop
    too, so the process never lives on with half its listeners."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # the handlers below stop every server; uvicorn's own would stop only one

    servers = [Server(c) for c in configs]

    def stop(sig: int, frame: FrameType | None) -> None:
        for server in servers:
            server.handle_exit(sig, frame)

    async def run_one(server: Any) -> None:
        try:
            await server.serve()
        finally:
            for other in servers:
                other.should_exit = True

    async def run_all() -> None:
        await asyncio.gather(*(run_one(s) for s in servers))

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with asyncio.Runner(loop_factory=configs[0].get_loop_factory()) as runner:
            runner.run(run_all())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
