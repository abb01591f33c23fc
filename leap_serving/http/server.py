"""Running the service: a Ranker following its model, the app over it, uvicorn in front.

``leap serve`` (the pipeline's CLI) and ``python -m leap_serving.http`` (a host with only
``leap_serving``) both end here. The Ranker loads its model in the background, so the port
opens at once and ``/readyz`` answers 503 until the model is ready.
"""

from __future__ import annotations

import logging
from typing import Any

from .app import create_app
from .config import ServeConfig

log = logging.getLogger("leap_serving")


def serve(
    config: ServeConfig,
    model_uri: str | None = None,
    *,
    check_interval_s: float = 60.0,
    ranker: Any = None,
) -> None:
    """Serve until stopped (SIGINT or SIGTERM): the model ``model_uri`` names (default
    ``$LEAP_MODEL_URI``, else the production alias), or ``ranker``."""
    import uvicorn

    from ..decide.ranker import Ranker

    if ranker is None:
        ranker = Ranker(model_uri, check_interval_s=check_interval_s)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    log.info(
        "leap serve: http://%s:%d, model %s, token %s, body limit %d bytes, deadline %g s",
        config.host,
        config.port,
        ranker.model_uri,
        "required" if config.token else "none",
        config.max_body_bytes,
        config.deadline_s,
    )
    uvicorn.run(
        create_app(ranker, config),
        host=config.host,
        port=config.port,
        log_level="warning",
        access_log=False,
        server_header=False,
        lifespan="on",
    )
