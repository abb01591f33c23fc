"""How ``leap up`` runs its Dask cluster's processes: TLS only, and nothing of them answers
over HTTP to a local user without credentials."""

from __future__ import annotations

from pathlib import Path

from leap_pipeline.modeling.parallel import DASK_TLS_FILES

# Dask serves its health and metrics routes even with the dashboard off, on the dashboard's
# address, which defaults to every interface (0.0.0.0:8787 for the scheduler): loopback only,
# on a free port, so nothing of leap up listens off loopback without credentials
LOOPBACK_DIAGNOSTICS = ("--no-dashboard", "--dashboard-address", "127.0.0.1:0")
# ... and with no route at all: /info, /json and /metrics told any local user the cluster's
# workers, tasks and addresses without credentials (Dask's own settings, read from the
# environment); the cluster is reached on tls:// only, and probed there
NO_DASK_HTTP = {
    "DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES": "[]",
    "DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": "[]",
}


def dask_tls_arguments(folder: Path) -> list[str]:
    """The scheduler's and the workers' TLS flags: the authority, the certificate, its key."""
    ca, cert, key = (str(folder / name) for name in DASK_TLS_FILES)
    return ["--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]
