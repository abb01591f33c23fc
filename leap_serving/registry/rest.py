"""The registry's few reads made over MLflow's REST API with the standard library, not MLflow.

Importing MLflow costs about 0.8 s of CPU, a quarter of an in-process ``leap rank`` that must
answer in 3 s, and ``leap serve`` loads it only to read a version. The serving side makes four
reads: a version by alias, a version by number, a registered model's tags, and one artifact of
a run (the version's bundle). For a tracking server (an ``http(s)://`` URI) configured the ways
``leap up`` and the docs configure one (basic auth or a token, a CA file, client certificates),
``rest_registry`` returns a client for them; for anything else (a SQLite store, a folder,
Databricks, an auth plugin, a credentials file MLflow would read) it returns None and the
caller goes through MLflow as before.

Unlike MLflow's client, a read is not retried: a 503 or a timeout fails it at once (the caller
keeps what it serves and checks again on its next interval), so a registry that is down never
holds a server's background thread for MLflow's minutes of back-off.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT_ENV = "MLFLOW_HTTP_REQUEST_TIMEOUT"
DEFAULT_TIMEOUT_S = 120.0  # MLflow's own default for one request
# any of these asks for behaviour only MLflow's client has: leave the read to MLflow
MLFLOW_ONLY_ENV = ("MLFLOW_TRACKING_AUTH", "MLFLOW_WORKSPACE", "MLFLOW_ENABLE_WORKSPACES")
NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"
CHUNK = 1 << 20


class RegistryReadError(Exception):
    """A read the registry did not answer: unreachable, a timeout, a 5xx, 401 or 403."""


class RegistryNotFound(RegistryReadError):
    """The registry answered that the model, alias, version or run does not exist."""


@dataclass(frozen=True)
class VersionRecord:
    """What a loader needs of one registry version (MLflow's ``ModelVersion``, in part)."""

    version: str
    run_id: str
    tags: dict[str, str]


def says_absent(error_code: str | None, message: str | None) -> bool:
    """Whether an MLflow error says the thing asked for does not exist: a registered model or
    version (``RESOURCE_DOES_NOT_EXIST``), or an alias (which MLflow answers as an invalid
    parameter "alias ... not found"). Any other error says nothing of what exists."""
    if error_code == NOT_FOUND:
        return True
    text = (message or "").lower()
    return error_code == "INVALID_PARAMETER_VALUE" and "alias" in text and "not found" in text


def configured_uris(environ: dict[str, str] | None = None) -> tuple[str, str]:
    """The tracking and registry URIs MLflow itself would use: ``mlflow.get_tracking_uri()``
    and ``get_registry_uri()`` when this process has imported MLflow (a launcher may have set
    them in code), else the variables (the registry's defaulting to the tracking one)."""
    mlflow = sys.modules.get("mlflow") if environ is None else None
    if mlflow is not None and hasattr(mlflow, "get_registry_uri"):
        return str(mlflow.get_tracking_uri()), str(mlflow.get_registry_uri())
    env = os.environ if environ is None else environ
    tracking = env.get("MLFLOW_TRACKING_URI", "")
    return tracking, env.get("MLFLOW_REGISTRY_URI") or tracking


def rest_registry(environ: dict[str, str] | None = None) -> RestRegistry | None:
    """A REST client for the tracking server the process is configured for, or None when the
    read must go through MLflow (not an ``http(s)`` URI, a registry apart from the tracking
    server, or configured in a way only MLflow's client reads)."""
    env = dict(os.environ if environ is None else environ)
    tracking, uri = configured_uris(environ)
    if uri.rstrip("/") != tracking.rstrip("/"):
        return None  # runs and versions in two stores: MLflow joins them
    if urllib.parse.urlsplit(uri).scheme not in ("http", "https"):
        return None
    if any(env.get(name) for name in MLFLOW_ONLY_ENV):
        return None
    user, password = env.get("MLFLOW_TRACKING_USERNAME"), env.get("MLFLOW_TRACKING_PASSWORD")
    token = env.get("MLFLOW_TRACKING_TOKEN")
    named = (user and password) or token
    if not named and (Path.home() / ".mlflow" / "credentials").is_file():
        return None  # MLflow reads the account from that file: it does
    if user and password:
        raw = f"{user}:{password}".encode()
        authorization = "Basic " + base64.standard_b64encode(raw).decode()
    else:
        authorization = f"Bearer {token}" if token else None
    try:
        timeout = float(env.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    except ValueError:
        return None  # MLflow's own error names the variable
    return RestRegistry(uri.rstrip("/"), authorization, _tls_context(env), timeout)


def _tls_context(env: dict[str, str]) -> ssl.SSLContext:
    """TLS as MLflow sets it up from the same variables: the CA file, a client certificate,
    or (``MLFLOW_TRACKING_INSECURE_TLS``) no check at all."""
    if env.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    context = ssl.create_default_context(cafile=env.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)
    if client := env.get("MLFLOW_TRACKING_CLIENT_CERT_PATH"):
        context.load_cert_chain(client)
    return context


class RestRegistry:
    """The serving side's reads of one MLflow tracking server."""

    def __init__(
        self, uri: str, authorization: str | None, tls: ssl.SSLContext, timeout_s: float
    ) -> None:
        self.uri = uri
        self._authorization = authorization
        self._tls = tls
        self.timeout_s = timeout_s

    def _open(self, endpoint: str, query: dict[str, str]) -> Any:
        url = f"{self.uri}{endpoint}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(url)
        if self._authorization:
            request.add_header("Authorization", self._authorization)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s, context=self._tls)
        except urllib.error.HTTPError as exc:
            body = exc.read(4096).decode(errors="replace")
            try:
                answer = json.loads(body)
            except ValueError:
                answer = {}
            code = answer.get("error_code") if isinstance(answer, dict) else None
            message = answer.get("message") if isinstance(answer, dict) else None
            error = RegistryNotFound if says_absent(code, message) else RegistryReadError
            raise error(f"{url}: HTTP {exc.code} {code or ''} {message or body:.300}") from None
        except (OSError, ValueError) as exc:  # URLError, a timeout, a refused connection, TLS
            raise RegistryReadError(f"{url}: {exc}") from None

    def _get(self, endpoint: str, **query: str) -> dict:
        with self._open(endpoint, query) as response:
            try:
                answer = json.loads(response.read())
            except ValueError as exc:
                raise RegistryReadError(f"{self.uri}{endpoint}: not JSON: {exc}") from None
        if not isinstance(answer, dict):
            raise RegistryReadError(f"{self.uri}{endpoint}: not a JSON object")
        return answer

    def version_by_alias(self, name: str, alias: str) -> VersionRecord:
        answer = self._get("/api/2.0/mlflow/registered-models/alias", name=name, alias=alias)
        return _version_record(answer)

    def version(self, name: str, version: str) -> VersionRecord:
        answer = self._get("/api/2.0/mlflow/model-versions/get", name=name, version=version)
        return _version_record(answer)

    def model_tags(self, name: str) -> dict[str, str]:
        answer = self._get("/api/2.0/mlflow/registered-models/get", name=name)
        return _tags(answer.get("registered_model", {}).get("tags"))

    def download_run_artifact(
        self, run_id: str, path: str, dst: Path, max_bytes: int
    ) -> Path | None:
        """The run's artifact ``path`` written to ``dst / basename``; None when the run's
        artifacts are not proxied by this server (``mlflow-artifacts:/...``): MLflow then
        fetches them from wherever they are. Refused once larger than ``max_bytes``."""
        info = self._get("/api/2.0/mlflow/runs/get", run_id=run_id).get("run", {}).get("info", {})
        where = urllib.parse.urlsplit(str(info.get("artifact_uri", "")))
        if where.scheme != "mlflow-artifacts" or where.netloc:
            return None
        remote = f"{where.path.strip('/')}/{path.strip('/')}"
        endpoint = "/api/2.0/mlflow-artifacts/artifacts/" + urllib.parse.quote(remote)
        local = dst / Path(path).name
        written = 0
        with self._open(endpoint, {}) as response, local.open("xb") as out:
            while chunk := response.read(CHUNK):
                written += len(chunk)
                if written > max_bytes:
                    raise RegistryReadError(f"{remote}: larger than {max_bytes:,} bytes")
                out.write(chunk)
        return local


def _tags(listed: Any) -> dict[str, str]:
    """MLflow's ``[{"key": k, "value": v}, ...]`` as a mapping; anything else holds none."""
    if not isinstance(listed, list):
        return {}
    return {
        str(t["key"]): str(t.get("value", "")) for t in listed if isinstance(t, dict) and "key" in t
    }


def _version_record(answer: dict) -> VersionRecord:
    record = answer.get("model_version")
    if not isinstance(record, dict) or "version" not in record:
        raise RegistryReadError(f"no model_version in the answer: {answer!s:.200}")
    return VersionRecord(
        version=str(record["version"]),
        run_id=str(record.get("run_id") or ""),
        tags=_tags(record.get("tags")),
    )
