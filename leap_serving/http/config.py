"""What ``leap serve`` is told: where it listens, the token it asks for, and its limits.

A host that runs only ``leap_serving`` (``python -m leap_serving.http``) reads the same
``LEAP_SERVE_*`` variables here that ``leap serve`` reads through the pipeline's settings, as
``decide.ranker`` reads ``LEAP_MODEL_URI``. A bad value is an error naming the variable and the
value, at start: a server that starts has limits it can keep.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

TOKEN_ENV = "LEAP_SERVE_TOKEN"
MAX_BODY_ENV = "LEAP_SERVE_MAX_BODY_BYTES"
DEADLINE_ENV = "LEAP_SERVE_DEADLINE_S"
HOST_ENV = "LEAP_SERVE_HOST"
PORT_ENV = "LEAP_SERVE_PORT"
HANDOFF_ENV = "LEAP_SERVE_HANDOFF_CONFIG"

DEFAULT_HOST = "127.0.0.1"  # loopback: exposing the service is a decision, not a default
DEFAULT_PORT = 8765
# a launch is a few hundred bytes; 1 MiB holds a batch of ~1,000 launches and no abuse
DEFAULT_MAX_BODY_BYTES = 1 << 20
# a ranking takes milliseconds; two seconds is a stuck model or a swamped host, and a launcher
# should fall back to its own order rather than wait on one
DEFAULT_DEADLINE_S = 2.0
MAX_BATCH = 1000  # launches in one batch request
MAX_CANDIDATES = 256  # candidates in one launch: the fleet has a few dozen types


@dataclass(frozen=True)
class ServeConfig:
    """The service's settings; ``token`` None serves without authentication."""

    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    deadline_s: float = DEFAULT_DEADLINE_S
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    ranking_threads: int = 2  # rankings at once: one per core of the 2-core host it was sized on
    # the admission webhook's maps, top_k and queue (``handoff.config.load_config``'s file);
    # None: the defaults
    handoff_config: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and (not self.token or not self.token.isprintable()):
            raise ValueError(f"{TOKEN_ENV}: a token must be printable and not empty")
        if not 1024 <= self.max_body_bytes <= 1 << 30:
            raise ValueError(f"{MAX_BODY_ENV}={self.max_body_bytes!r} must be 1024..{1 << 30}")
        if not (math.isfinite(self.deadline_s) and 0 < self.deadline_s <= 600):
            raise ValueError(f"{DEADLINE_ENV}={self.deadline_s!r} must be above 0, at most 600")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"{PORT_ENV}={self.port!r} must be 0..65535")
        if not 1 <= self.ranking_threads <= 64:
            raise ValueError(f"ranking_threads={self.ranking_threads!r} must be 1..64")


def config_from_environment(environ: Mapping[str, str] | None = None, **given) -> ServeConfig:
    """The settings the ``LEAP_SERVE_*`` variables hold (empty: the default), with ``given``
    (e.g. the command's flags) over them."""
    environ = os.environ if environ is None else environ
    values: dict = {}
    for name, key, kind in (
        (TOKEN_ENV, "token", str),
        (MAX_BODY_ENV, "max_body_bytes", int),
        (DEADLINE_ENV, "deadline_s", float),
        (HOST_ENV, "host", str),
        (PORT_ENV, "port", int),
        (HANDOFF_ENV, "handoff_config", str),
    ):
        text = environ.get(name)
        if text:
            try:
                values[key] = kind(text)
            except ValueError:
                raise ValueError(f"{name}={text!r} is not a {kind.__name__}") from None
    values.update({k: v for k, v in given.items() if v is not None})
    return ServeConfig(**values)
