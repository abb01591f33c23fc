"""Where a night's experts are fitted: joblib's processes on this machine, or a Dask cluster."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import joblib


@contextmanager
def expert_backend(dask_scheduler: str = "") -> Iterator[None]:
    """Where the experts' fits run: joblib's processes on this machine, or, with
    ``dask_scheduler`` (an address such as ``tcp://scheduler:8786``, or ``local`` for a cluster
    on this machine), a Dask cluster through joblib's ``dask`` backend."""
    if not dask_scheduler:
        yield
        return
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
        with Client(cluster or dask_scheduler), joblib.parallel_config(backend="dask"):
            yield
    finally:
        if cluster is not None:
            cluster.close()
