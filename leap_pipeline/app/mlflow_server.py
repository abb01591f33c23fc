"""The MLflow server's command, as ``leap ui`` and ``leap up`` start it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leap_pipeline.app.credentials import MlflowAuth


def mlflow_server(
    store: str,
    artifacts: Path,
    port: int,
    env: dict[str, str],
    *,
    proxy_artifacts: bool = False,
    auth: MlflowAuth | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The MLflow server of ``leap ui`` and ``leap up``: (argv, environment). One worker and no
    job execution (about 500 MiB instead of 2.5 GiB), on the loopback address, its backend
    ``store`` named explicitly (the server ignores ``MLFLOW_TRACKING_URI``). ``leap ui``: its
    SQLite store, the artifacts written by the clients themselves (``--default-artifact-root``),
    no accounts. ``leap up``: its Postgres store, the artifacts served through the server
    (``proxy_artifacts``: ``--artifacts-destination``) and, with ``auth``, MLflow's basic-auth
    app, every request needing an account. Nothing secret goes on the command line, which
    ``ps`` shows to everyone: the store's URL names a password file, and the app's configuration,
    its admin password and its Flask key travel in the server's environment."""
    argv = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--workers",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        store,
        "--artifacts-destination" if proxy_artifacts else "--default-artifact-root",
        artifacts.as_uri(),
    ]
    # MLflow's own import of a deprecated Starlette module warns at every start, which tells an
    # operator nothing they can act on: left out of the server's log (PYTHONWARNINGS' module
    # field is the module the warning is attributed to)
    quiet = "ignore::UserWarning:mlflow.server.fastapi_app"
    warnings_env = ",".join(filter(None, [env.get("PYTHONWARNINGS", ""), quiet]))
    env = {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONWARNINGS": warnings_env}
    if auth is not None:
        argv += ["--app-name", "basic-auth"]
        env.update(auth.server_environment())
    return argv, env
