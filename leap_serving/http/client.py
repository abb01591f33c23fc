"""A client of ``leap serve``: one launch ranked over HTTP, with the standard library alone.

``leap rank --server URL`` calls ``rank_remote`` instead of loading a model: the server holds the
model warm, and this process imports no polars, numpy, LightGBM or MLflow, so a launcher's shell
call answers in a fraction of a second instead of the seconds a model load takes
(``benchmarks/rank_server.py`` times it). urllib rather than httpx: one request a process needs
no connection pool, and nothing beyond the standard library has to load.

The token is the server's own: ``LEAP_SERVE_TOKEN``, else the first token of the file
``--token-file`` or ``LEAP_SERVE_TOKEN_FILE`` names (the file ``leap serve`` reads, one token a
line), never a flag's value: argv is readable by every user of the host (``ps``). An https server
is verified against ``cacert`` or, without one, the system's trust store (which
``SSL_CERT_FILE`` can point elsewhere). Redirects are not followed: urllib would resend the
token to wherever a redirect points.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from ..decide.results import Ranking
from .config import TOKEN_ENV, TOKEN_FILE_ENV
from .tokens import read_token_file

RANK_PATH = "/v1/rank"
# the server answers within its deadline (LEAP_SERVE_DEADLINE_S, 2 s by default) or says 504;
# this bounds a server that accepted the connection and then never answered
TIMEOUT_S = 10.0


class ServerError(RuntimeError):
    """The server could not be asked, or answered something other than a ranking (no or a
    wrong token, a full queue, a deadline passed, a bug): the message names the URL and why."""


def client_token(
    token_file: str | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The bearer token to send: the first token of ``token_file`` when given, else
    ``LEAP_SERVE_TOKEN``, else the first of ``LEAP_SERVE_TOKEN_FILE``'s; None when none is set.
    ``ValueError`` naming the variable or file (never the token) when it is unusable."""
    environ = os.environ if environ is None else environ
    if token_file:
        return read_token_file(token_file)[0]
    token = environ.get(TOKEN_ENV)
    if token:
        if not token.isprintable() or any(c.isspace() for c in token):
            raise ValueError(f"{TOKEN_ENV}: a token is printable and holds no spaces")
        return token
    if environ.get(TOKEN_FILE_ENV):
        return read_token_file(environ[TOKEN_FILE_ENV])[0]
    return None


def rank_url(server: str) -> str:
    """``server``'s ranking route (``server`` may carry a path prefix, as behind a proxy);
    ``ValueError`` naming ``--server`` when it is not an http(s) URL with a host and a port
    other than 0, or carries a password (a URL on the command line is readable by every user of
    the host)."""
    try:
        parts = urllib.parse.urlsplit(server)
        port = parts.port  # a port that is not a number, or out of range, raises here
    except ValueError as exc:
        raise ValueError(f"--server {server!r}: not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"--server {server!r}: not an http:// or https:// URL with a host "
            "(e.g. http://127.0.0.1:8765)"
        )
    if port == 0:
        raise ValueError(f"--server {server!r}: port 0 is no port a server listens on")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"--server: the URL carries credentials, which argv shows to every user of the "
            f"host: set {TOKEN_ENV} or {TOKEN_FILE_ENV} instead"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"--server {server!r}: the base URL takes no query or fragment")
    return server.rstrip("/") + RANK_PATH


def _loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1), never a name that merely starts
    like one (``127.attacker.example``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token_transport(url: str) -> None:
    """A token goes over https, or over plain http to this machine only: ``ValueError`` naming
    ``--server`` for an ``http://`` URL of another host, where anyone on the path reads it."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "http" and not _loopback(host):
        raise ValueError(
            f"--server {url.removesuffix(RANK_PATH)!r}: a token is never sent in clear text to "
            "another host: use https:// (--cacert names its CA), or a loopback address"
        )


def tls_context(url: str, cacert: str | None) -> ssl.SSLContext | None:
    """The context that verifies an https server (``cacert``'s CA, else the trust store);
    ``ValueError`` naming ``--cacert`` when it cannot be read or the URL is not https."""
    if not url.startswith("https://"):
        if cacert:
            raise ValueError(f"--cacert {cacert!r}: the server {url} is not https")
        return None
    try:
        return ssl.create_default_context(cafile=cacert)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(
            f"--cacert {cacert!r}: cannot read a PEM CA certificate: {reason}"
        ) from None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx comes back as an error instead of being followed with the token."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def rank_remote(
    server: str,
    job: Any,
    candidates: Any,
    *,
    token: str | None = None,
    cacert: str | None = None,
    timeout_s: float = TIMEOUT_S,
) -> Ranking:
    """``POST /v1/rank`` of ``job`` on ``candidates`` to the ``leap serve`` at ``server``: the
    ``Ranking`` it answers, empty with its reason as an in-process ``Ranker`` would give it (a
    bad launch, no model yet). ``ServerError`` when there is no ranking to read: the server
    cannot be reached or verified, or it answered an error (its status and reason quoted)."""
    url = rank_url(server)
    context = tls_context(url, cacert)
    headers = {"content-type": "application/json", "accept": "application/json"}
    if token:
        check_token_transport(url)
        headers["authorization"] = f"Bearer {token}"
    body = json.dumps({"job": job, "candidates": candidates}).encode()
    request = urllib.request.Request(url, body, headers, method="POST")
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=timeout_s) as answer:
            status, payload = answer.status, answer.read()
    except urllib.error.HTTPError as error:  # a status other than 2xx: its body says why
        status, payload = error.code, error.read()
    except urllib.error.URLError as error:
        raise ServerError(f"--server {server}: cannot reach it: {_why(error.reason)}") from None
    except TimeoutError:
        raise ServerError(f"--server {server}: no answer within {timeout_s:g} s") from None
    except (OSError, http.client.HTTPException) as error:  # reset, cut off mid-answer
        raise ServerError(f"--server {server}: the connection failed: {_why(error)}") from None
    return _ranking_of(server, status, payload)


def _why(reason: Any) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (
            f"{reason.verify_message or reason}: the server's certificate is not signed by a CA "
            "this host trusts (--cacert names the CA that signed it)"
        )
    if isinstance(reason, TimeoutError):
        return "no answer in time"
    return str(getattr(reason, "strerror", None) or reason)


def _ranking_of(server: str, status: int, payload: bytes) -> Ranking:
    """The answer's ranking, whatever its status (a 422 bad launch and a 503 no model carry
    one, as an in-process call returns it); ``ServerError`` for any other answer."""
    try:
        answer = json.loads(payload)
    except ValueError:
        shown = payload[:200].decode("utf-8", "replace")
        raise ServerError(f"--server {server}: answered {status} with no JSON: {shown!r}") from None
    if isinstance(answer, dict) and "ranking" in answer and "reason_code" in answer:
        try:
            return Ranking.from_dict(answer)
        except (TypeError, ValueError) as exc:
            raise ServerError(
                f"--server {server}: answered a ranking that is not one: {exc}"
            ) from None
    error = answer if isinstance(answer, dict) else {}
    field, reason = error.get("field"), error.get("reason") or str(answer)[:200]
    hint = ""
    if status == 401:
        hint = f" (the token comes from {TOKEN_ENV}, or the first line of {TOKEN_FILE_ENV}'s file)"
    where = f"{field}: " if field else ""
    raise ServerError(f"--server {server}: answered {status}: {where}{reason}{hint}")
