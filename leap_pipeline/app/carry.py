"""The embedded registry's production model carried into the service's, once.

``leap demo`` (and any night run on the embedded default) registers its versions in a SQLite
store in the data folder. ``leap up`` on that folder starts an MLflow server on Postgres, a
registry of its own, which would be empty: launchers following
``models:/leap-throughput@production`` would get ``no_model`` until the first night passes its
gate. So when the service's registry names no production model and the folder's SQLite store
does, that version is registered again on the server, from its own files (each checked against
the sha256 its version recorded), with its tags, and promoted there, the move recorded as a
carry. A service registry that has a production model is never touched.

Run by ``leap up`` in a process of its own, with the service's environment (the server's URL
and the pipeline's account):

    python -m leap_pipeline.app.carry MLFLOW_STORE
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ACTOR = "leap up"
# the registered version's tags that log_candidate writes again from its own arguments
CARRIED_METRICS = {"published_w20": "published_w20"}


@contextmanager
def pointed_at(uri: str) -> Iterator[None]:
    """MLflow's tracking and registry at ``uri`` inside the block, and back where they were
    after it: ``mlflow.set_tracking_uri`` also writes ``$MLFLOW_TRACKING_URI``, which
    ``registry.configure_tracking`` reads, so without the restore (which writes it back the same
    way) the carried run would be logged into the embedded store while its version is
    registered on the server."""
    import mlflow

    tracking, registry_uri = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(tracking)
        mlflow.set_registry_uri(registry_uri)


def embedded_uri(store: Path) -> str | None:
    """The SQLite store in ``store`` (``mlflow.db``) as a tracking URI; None when it is absent."""
    database = store / "mlflow.db"
    return f"sqlite:///{database.resolve()}" if database.exists() else None


def embedded_production(store: Path) -> dict | None:
    """The production version of the SQLite store in ``store`` (``mlflow.db``), as
    ``{"version", "tags"}``, or None when there is no store or it names no production model.
    MLflow is left pointed where it was; point it first (``registry.configure_tracking``, as
    ``carry_production`` does), else "where it was" is MLflow's default store."""
    from leap_pipeline.modeling import registry

    uri = embedded_uri(store)
    if uri is None:
        return None
    with pointed_at(uri):
        version = registry.production_version()
    return None if version is None else {"version": str(version.version), "tags": version.tags}


def carry_production(store: Path, log=print) -> str | None:
    """Carry the production model of the SQLite store in ``store`` into the registry
    ``$MLFLOW_TRACKING_URI`` names, when that registry has none; returns the new version, or
    None when nothing was carried (saying why)."""
    from leap_pipeline.modeling import registry
    from leap_pipeline.orchestration.promotion import alias_lock

    server = registry.configure_tracking()
    # read, carry and move under the alias lock the nights and `leap model promote` hold: a
    # night promoting meanwhile is never overwritten by the demo's model; a registry that
    # cannot say whether it has production (RegistryUnavailable) carries nothing
    with alias_lock():
        return _carry_when_absent(store, server, log)


def _carry_when_absent(store: Path, server: str, log) -> str | None:
    import mlflow

    from leap_pipeline.modeling import registry
    from leap_serving.registry.registered import fetch_registered

    if registry.production_version() is not None:
        log(f"the service registry ({server}) has a production model: nothing carried")
        return None
    found = embedded_production(store)
    if found is None:
        log(f"no production model in {store / 'mlflow.db'}: nothing carried")
        return None
    tags = found["tags"]
    with tempfile.TemporaryDirectory(prefix="leap-carry-") as scratch:
        # downloaded from the SQLite store, every file checked against the version's records
        with pointed_at(embedded_uri(store)):
            local, version, _ = fetch_registered(
                registry.model_uri(), found["version"], dst=scratch
            )
        registry.configure_tracking()  # the server, run and version alike
        mlflow.set_registry_uri(server)
        first, _, last = tags["training_window"].partition("..")
        _, carried = registry.log_candidate(
            artifact_folder=local / "artifacts",
            day=dt.date.fromisoformat(tags["evaluation_day"]),
            window=(dt.date.fromisoformat(first), dt.date.fromisoformat(last)),
            run_kind=tags.get("run_kind", "nightly"),
            params={"carried_from": f"{store / 'mlflow.db'} version {version}"},
            metrics={k: float(tags[t]) for k, t in CARRIED_METRICS.items() if t in tags},
            files=[],
            fingerprint=tags.get("night_fingerprint", ""),
            gate_reason=tags.get("gate_reason", ""),
        )
    registry.promote(
        carried,
        reason=f"carried from the embedded registry ({store / 'mlflow.db'}, version {version}, "
        f"evaluated on {tags['evaluation_day']})",
        actor=ACTOR,
    )
    log(
        f"carried production version {version} of {store / 'mlflow.db'} into the service "
        f"registry as version {carried}, now production"
    )
    return carried


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m leap_pipeline.app.carry MLFLOW_STORE", file=sys.stderr)
        return 2
    carry_production(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
