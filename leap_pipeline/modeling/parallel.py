"""Where a night's fits run: in this process and joblib's processes on this machine, or a Dask
cluster.

With a cluster, two kinds of work go to its workers. The cascade's experts are spread through
joblib's ``dask`` backend, EM and the classifier staying in this process. A fit that runs alone
(a one-bin cascade: the single GBDT and the single GBDT on the prior) goes whole, as one task,
to a worker: the night's lone fits then run side by side on two workers while the cascade fits
here. Each is the same seeded LightGBM fit it would be in this process, so the models do not
change. LightGBM's own distributed training (``lightgbm.dask``: one booster's rows spread over
the workers) was measured against this: slower, with trees that differ from the in-process ones
and from run to run (``benchmarks/dask_fit.py``, docs/deployment.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import joblib
import numpy as np

from leap_pipeline.settings import DASK_TLS_DIR_ENV, environment
from leap_serving.model.cascade import BinnedCascade

# the client of the enclosing ``expert_backend``, None outside one: what ``lone_fits`` submits to
_CLIENT: ContextVar[Any] = ContextVar("leap_dask_client", default=None)
# a TLS cluster's files in $LEAP_DASK_TLS_DIR (``leap up --dask`` writes them): the authority's
# certificate, the certificate the scheduler, the workers and the clients present, its key
DASK_TLS_FILES = ("ca.pem", "cert.pem", "key.pem")


def dask_security(address: str, tls_dir: Path | None = None) -> Any:
    """The ``distributed.security.Security`` a client of the scheduler at ``address`` needs:
    None for a ``tcp://`` (or ``local``) one; for a ``tls://`` one, the certificates in
    ``tls_dir`` (by default ``$LEAP_DASK_TLS_DIR``), encryption required, or else Dask's own
    TLS settings (``distributed.comm.tls.*``). A TLS scheduler refuses a client that presents
    no certificate its authority signed, so a missing one is an error here, naming the setting,
    rather than a refused connection there."""
    if not address.startswith("tls://"):
        return None
    from distributed.security import Security

    folder = tls_dir or environment().dask_tls_dir
    if folder is None:
        security = Security()  # Dask's configuration, if it names certificates
        if not security.tls_ca_file:
            raise ValueError(
                f"dask_scheduler={address!r} is a TLS address: set {DASK_TLS_DIR_ENV} to the "
                f"folder of its {', '.join(DASK_TLS_FILES)} (leap up --dask prints it), or "
                "Dask's distributed.comm.tls settings"
            )
        return security
    missing = [name for name in DASK_TLS_FILES if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"{DASK_TLS_DIR_ENV}={folder}: no {', '.join(missing)} in it")
    ca, cert, key = (str(folder / name) for name in DASK_TLS_FILES)
    return Security(
        tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True
    )


def check_scheduler(address: str) -> None:
    """Refuse, before anything connects, a scheduler a run's config may not name where a TLS
    cluster is set up (``$LEAP_DASK_TLS_DIR``, as ``leap up --dask`` sets it): a ``tcp://`` one
    (or a bare ``host:port``, which Dask reads as one), to which the run's worker, holding the
    service's MLflow password, would speak Dask's pickle handshake in the clear, and ``local``,
    whose cluster listens on plain TCP that any local user can reach. A ``tls://`` scheduler
    must present a certificate the service's own authority signed, which only its own does."""
    if not address or environment().dask_tls_dir is None:
        return
    if not address.startswith("tls://"):
        raise ValueError(
            f"dask_scheduler={address!r} is refused: {DASK_TLS_DIR_ENV} is set, so this service "
            "runs its fits on its own TLS cluster only (a tls:// address, or none for in "
            "process); a plain-TCP scheduler would receive the run's pickles in the clear"
        )


@contextmanager
def expert_backend(dask_scheduler: str = "") -> Iterator[None]:
    """Where the night's fits run: here and joblib's processes on this machine, or, with
    ``dask_scheduler`` (an address such as ``tcp://scheduler:8786``, or ``local`` for a cluster
    of two worker processes on this machine), a Dask cluster: the experts through joblib's
    ``dask`` backend, the lone fits as one task each (``lone_fits``). A ``tls://`` address is
    reached with the certificates ``dask_security`` finds."""
    if not dask_scheduler:
        yield
        return
    check_scheduler(dask_scheduler)
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ValueError(
            f"dask_scheduler={dask_scheduler!r} needs Dask: pip install -e '.[dask]'"
        ) from None
    cluster = (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
        if dask_scheduler == "local"
        else None
    )
    try:
        client = Client(cluster or dask_scheduler, security=dask_security(dask_scheduler))
        with client, joblib.parallel_config(backend="dask"):
            token = _CLIENT.set(client)
            try:
                yield
            finally:
                _CLIENT.reset(token)
    finally:
        if cluster is not None:
            cluster.close()


def _fit_alone(
    model: BinnedCascade, X: np.ndarray, y: np.ndarray, validation: np.ndarray
) -> tuple[BinnedCascade, float]:
    """One whole fit on a worker, on the worker's threads, and its wall time there.

    A lone fit takes ``n_jobs`` threads (``BinnedCascade``): here, the worker's. joblib's
    threading backend counts them, as its process backend would refuse inside a worker's
    daemon process (one thread, and a warning). ``n_jobs`` is put back after the fit, so the
    model's parameters are those it was given."""
    from dask.distributed import get_worker

    n_jobs, start = model.n_jobs, time.perf_counter()
    with joblib.parallel_config(backend="threading"):
        model.set_params(n_jobs=get_worker().state.nthreads).fit(X, y, validation=validation)
    return model.set_params(n_jobs=n_jobs), time.perf_counter() - start


class LoneFits:
    """Fits submitted whole to the cluster, one task each, collected in the order submitted."""

    def __init__(self, futures: dict[str, Any]) -> None:
        self.futures = futures

    def __contains__(self, name: str) -> bool:
        return name in self.futures

    def results(self) -> Iterator[tuple[str, BinnedCascade, float]]:
        """Each fit's name, fitted model and wall time on its worker, waiting for each."""
        for name, future in self.futures.items():
            model, seconds = future.result()
            yield name, model, seconds


def lone_fits(
    models: dict[str, BinnedCascade], X: np.ndarray, y: np.ndarray, validation: np.ndarray
) -> LoneFits:
    """Submit the one-bin cascades of ``models`` whole to the cluster of the enclosing
    ``expert_backend``, the rows sent once; none outside one (every fit then runs here, one
    after another, as it always did)."""
    client = _CLIENT.get()
    alone = {name: model for name, model in models.items() if model.n_bins == 1}
    if client is None or not alone:
        return LoneFits({})
    rows = client.scatter([X, y, validation])
    # each on a worker of its own where there are enough (its rows go there once), so two lone
    # fits never share a worker's threads while another worker waits
    workers = list(client.scheduler_info()["workers"])
    futures = {}
    for i, (name, model) in enumerate(alone.items()):
        where = {"workers": [workers[i % len(workers)]], "allow_other_workers": True}
        futures[name] = client.submit(_fit_alone, model, *rows, pure=False, **where)
    return LoneFits(futures)
