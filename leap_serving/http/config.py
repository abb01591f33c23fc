"""What ``leap serve`` is told: where it listens, the tokens it asks for, TLS, and its limits.

A host that runs only ``leap_serving`` (``python -m leap_serving.http``) reads the same
``LEAP_SERVE_*`` variables here that ``leap serve`` reads through the pipeline's settings, as
``decide.ranker`` reads ``LEAP_MODEL_URI``. A bad value is an error naming the variable and the
value, at start: a server that starts has limits it can keep. Secrets come from the environment
or a file, never from a flag's value: argv is readable by every user of the host (``ps``).

Two rules are kept here so that no caller can forget them: the main listener binds off loopback
only with a token, or with ``allow_unauthenticated`` said out loud (something in front
authenticates); the admission webhook's listener only with TLS, since the kube-apiserver calls
webhooks over https alone.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

TOKEN_ENV = "LEAP_SERVE_TOKEN"
TOKEN_FILE_ENV = "LEAP_SERVE_TOKEN_FILE"
TLS_CERT_ENV = "LEAP_SERVE_TLS_CERT"
TLS_KEY_ENV = "LEAP_SERVE_TLS_KEY"
WEBHOOK_PORT_ENV = "LEAP_SERVE_WEBHOOK_PORT"
WEBHOOK_HOST_ENV = "LEAP_SERVE_WEBHOOK_HOST"
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
    """The service's settings; with neither ``token`` nor ``token_file`` it serves without
    authentication (on loopback only, unless ``allow_unauthenticated``)."""

    token: str | None = None
    # one token a line, several valid at once, re-read when it changes (``tokens.Tokens``)
    token_file: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    deadline_s: float = DEFAULT_DEADLINE_S
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    ranking_threads: int = 2  # rankings at once: one per core of the 2-core host it was sized on
    # the admission webhook's maps, top_k and queue (``handoff.config.load_config``'s file);
    # None: the defaults
    handoff_config: str | None = None
    # PEM files for https on both listeners (uvicorn's ssl_certfile / ssl_keyfile)
    tls_cert: str | None = None
    tls_key: str | None = None
    # the admission webhook's own listener (https, no token); None: no webhook
    webhook_port: int | None = None
    webhook_host: str | None = None  # None: ``host``
    webhook_threads: int = 2  # the webhook's rankings at once, apart from /v1/rank's
    # bind the main listener off loopback without a token: something in front authenticates
    allow_unauthenticated: bool = False

    def __post_init__(self) -> None:
        if self.token is not None and (not self.token or not self.token.isprintable()):
            raise ValueError(f"{TOKEN_ENV}: a token must be printable and not empty")
        if self.token_file is not None and not self.token_file:
            raise ValueError(f"{TOKEN_FILE_ENV}: the path is empty")
        if not 1024 <= self.max_body_bytes <= 1 << 30:
            raise ValueError(f"{MAX_BODY_ENV}={self.max_body_bytes!r} must be 1024..{1 << 30}")
        if not (math.isfinite(self.deadline_s) and 0 < self.deadline_s <= 600):
            raise ValueError(f"{DEADLINE_ENV}={self.deadline_s!r} must be above 0, at most 600")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"{PORT_ENV}={self.port!r} must be 0..65535")
        if not 1 <= self.ranking_threads <= 64:
            raise ValueError(f"ranking_threads={self.ranking_threads!r} must be 1..64")
        if not 1 <= self.webhook_threads <= 64:
            raise ValueError(f"webhook_threads={self.webhook_threads!r} must be 1..64")
        if (self.tls_cert is None) != (self.tls_key is None):
            given, missing = (
                (TLS_CERT_ENV, TLS_KEY_ENV) if self.tls_key is None else (TLS_KEY_ENV, TLS_CERT_ENV)
            )
            raise ValueError(
                f"{given} is set but {missing} is not: TLS needs both the certificate and its key "
                "(--tls-cert and --tls-key)"
            )
        if self.webhook_port is not None:
            if not 0 <= self.webhook_port <= 65535:
                raise ValueError(f"{WEBHOOK_PORT_ENV}={self.webhook_port!r} must be 0..65535")
            if self.webhook_port == self.port and self.port != 0:
                raise ValueError(
                    f"{WEBHOOK_PORT_ENV}={self.webhook_port!r} is {PORT_ENV}'s port too: the "
                    "webhook needs a listener of its own"
                )
            if self.tls_cert is None:
                raise ValueError(
                    f"{WEBHOOK_PORT_ENV}={self.webhook_port!r} needs TLS: the kube-apiserver "
                    f"calls webhooks over https only; set {TLS_CERT_ENV} and {TLS_KEY_ENV} "
                    "(--tls-cert, --tls-key)"
                )
        if not (self.authenticated or self.allow_unauthenticated or is_loopback(self.host)):
            raise ValueError(
                f"host {self.host!r} (--host, {HOST_ENV}) is not a loopback address and no "
                f"token is set, so anyone who reaches it could call every route. Set "
                f"{TOKEN_FILE_ENV} (--token-file: a file of tokens, one a line) or {TOKEN_ENV}; "
                "or listen on 127.0.0.1; or pass --allow-unauthenticated if a proxy in front "
                "authenticates"
            )

    @property
    def authenticated(self) -> bool:
        """Whether the main listener asks for a bearer token."""
        return self.token is not None or self.token_file is not None

    @property
    def exposed_without_token(self) -> bool:
        """Off loopback with no token: allowed only by ``allow_unauthenticated``, and warned."""
        return not self.authenticated and not is_loopback(self.host)

    def check_files(self) -> None:
        """``ValueError`` naming the setting and the file when a TLS file is missing,
        unreadable, or the key is not the certificate's: at start, rather than as an ssl error
        from deep inside uvicorn, or at the first handshake."""
        if self.tls_cert is None or self.tls_key is None:
            return
        for name, path in ((TLS_CERT_ENV, self.tls_cert), (TLS_KEY_ENV, self.tls_key)):
            try:
                with open(path, "rb") as file:
                    file.read(1)
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise ValueError(f"{name}={path!r}: cannot read it: {reason}") from None
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                self.tls_cert, self.tls_key
            )
        except ssl.SSLError as exc:
            raise ValueError(
                f"{TLS_CERT_ENV}={self.tls_cert!r}, {TLS_KEY_ENV}={self.tls_key!r}: not a PEM "
                f"certificate and its private key: {exc.reason or exc}"
            ) from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is 127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z) or ``localhost``. Any
    other name may resolve anywhere, so it counts as exposed; "" and 0.0.0.0 bind every
    interface."""
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(host.strip().strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def config_from_environment(environ: Mapping[str, str] | None = None, **given) -> ServeConfig:
    """The settings the ``LEAP_SERVE_*`` variables hold (empty: the default), with ``given``
    (e.g. the command's flags) over them."""
    environ = os.environ if environ is None else environ
    values: dict = {}
    for name, key, kind in (
        (TOKEN_ENV, "token", str),
        (TOKEN_FILE_ENV, "token_file", str),
        (TLS_CERT_ENV, "tls_cert", str),
        (TLS_KEY_ENV, "tls_key", str),
        (WEBHOOK_PORT_ENV, "webhook_port", int),
        (WEBHOOK_HOST_ENV, "webhook_host", str),
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


def add_listener_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``leap serve``'s listeners, shared with the pipeline's ``leap serve``. No
    flag takes a secret's value (argv is readable by every user of the host): a token comes
    from ``$LEAP_SERVE_TOKEN`` or a file."""
    parser.add_argument(
        "--token-file",
        default=None,
        help="a file of bearer tokens, one a line, "
        "re-read when it changes (default $LEAP_SERVE_TOKEN_FILE)",
    )
    parser.add_argument(
        "--tls-cert",
        default=None,
        help="PEM certificate: https on every listener (default $LEAP_SERVE_TLS_CERT)",
    )
    parser.add_argument(
        "--tls-key", default=None, help="its PEM private key (default $LEAP_SERVE_TLS_KEY)"
    )
    parser.add_argument(
        "--webhook-port",
        type=int,
        default=None,
        help="serve the Kubernetes "
        "admission webhook on this port: https, no token, its own threads "
        "(default $LEAP_SERVE_WEBHOOK_PORT, else none)",
    )
    parser.add_argument(
        "--webhook-host",
        default=None,
        help="the webhook's address (default $LEAP_SERVE_WEBHOOK_HOST, else --host's)",
    )
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="listen off loopback without a token (a proxy in front authenticates)",
    )


def listener_settings(args: argparse.Namespace) -> dict:
    """``add_listener_flags``' values as ``config_from_environment``'s keywords (None: unset)."""
    return {
        "token_file": args.token_file or None,
        "tls_cert": args.tls_cert or None,
        "tls_key": args.tls_key or None,
        "webhook_port": args.webhook_port,
        "webhook_host": args.webhook_host or None,
        "allow_unauthenticated": args.allow_unauthenticated or None,
    }
