"""Dagster resources: where the sources come from and where the warehouse lives, the training's
settings, the MLflow store, and the IO manager that hands a night from one model asset to the next.

The first two are set in one place: run config (``resources: {source: {config: {uri: ...}}}``)
or, when left empty, the environment (``LEAP_SOURCE``, ``LEAP_WAREHOUSE``), read when a run
starts.
"""

import datetime as dt
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from leap_pipeline.data.sources import Source, source_from_uri
from leap_pipeline.data.warehouse import Warehouse, default_path, open_warehouse
from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.settings import (
    GateSettings,
    RegistrySettings,
    TrainingSettings,
    environment,
)


class SourceResource(dg.ConfigurableResource):
    """``simulator[:seed=S,scale=X]`` or ``files:/folder``; empty: the calendar's source
    (``default_uri``, set where the definitions are built, else read from the calendar file
    when the run starts, so run config that leaves it out cannot lose it), then
    ``$LEAP_SOURCE``, then the default simulated fleet."""

    uri: str = ""
    default_uri: str = ""

    def source(self) -> Source:
        return source_from_uri(self.uri or self.default_uri or Calendar.load().source)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Under ``leap up``'s Dagster (``$LEAP_SERVICE_RUNS``), whose runs any local user who
        reaches the webserver can launch, a run may land the calendar's source only: another
        (``files:/any/folder``) would be read as the service's account."""
        if not self.uri or not environment().service_runs:
            return
        calendar = self.default_uri or Calendar.load().source
        if self.uri != calendar:
            raise ValueError(
                f"source uri={self.uri!r} is refused: runs launched through leap up's Dagster "
                f"land the calendar's source ({calendar}) only; land another with `leap "
                "materialize --source` from a shell with the service's variables"
            )


# how long a read of the landed days (``landed_days``, ``empty_days``: the schedule's and the
# sensors' plans, the demo's look at what it landed before) waits for a run that holds the
# warehouse: a tick that cannot read says so and the retry sensor plans it again, rather than
# stall the daemon
PLAN_READ_WAIT_S = 5.0


class WarehouseResource(dg.ConfigurableResource):
    """Path of the DuckDB file; empty: ``$LEAP_WAREHOUSE``, else ``leap.duckdb`` in the data
    folder (``$LEAP_DATA``)."""

    path: str = ""

    @contextmanager
    def open(self) -> Iterator[Warehouse]:
        with open_warehouse(self.path or None) as warehouse:
            yield warehouse

    def landed_days(self, table: str) -> list[dt.date]:
        """Days of ``table`` written so far, read without taking the writer's lock; none when
        there is no warehouse yet."""
        path = Path(self.path) if self.path else default_path()
        if not path.exists():
            return []
        with open_warehouse(path, read_only=True, wait_s=PLAN_READ_WAIT_S) as warehouse:
            return warehouse.partitions(table)

    def refused_days(self) -> list[dt.date]:
        """Days whose last landing was refused by its audit (``landing_refusals``)."""
        return self.landed_days("landing_refusals")

    def empty_days(self) -> list[dt.date]:
        """Landed days that kept no measured attempt (their landing recorded ``kept`` = 0)."""
        path = Path(self.path) if self.path else default_path()
        if not path.exists():
            return []
        with open_warehouse(path, read_only=True, wait_s=PLAN_READ_WAIT_S) as warehouse:
            if not warehouse.has("source_log"):
                return []
            log = warehouse.read("source_log")
        if "kept" not in log.columns:
            return []
        return log.filter(log["kept"] == 0)["ds"].to_list()


class TrainingResource(dg.ConfigurableResource):
    """The training, gate and registry settings as Dagster config, flat; each concern's typed
    object (``settings.py``, where every knob is documented) comes from one method."""

    profile: str = TrainingSettings.profile
    window_days: int = TrainingSettings.window_days
    lookup_min_support: int = TrainingSettings.lookup_min_support
    n_jobs: int = TrainingSettings.n_jobs
    dask_scheduler: str = TrainingSettings.dask_scheduler
    gate_floor: float = GateSettings.floor
    gate_margin: float = GateSettings.margin
    run_kind: str = RegistrySettings.run_kind
    promote: bool = RegistrySettings.promote
    keep_versions: int = RegistrySettings.keep_versions
    # how long a night whose window is still landing (another run's) waits before it fails
    window_wait_s: float = 900.0

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A scheduler the service does not allow (``parallel.check_scheduler``: plain TCP
        where TLS is set up) fails the run as it starts, before any step connects anywhere; so
        does ``promote`` under ``leap up``'s Dagster (``$LEAP_SERVICE_RUNS``)."""
        from leap_pipeline.modeling.parallel import check_scheduler  # the fits' stack: here only

        check_scheduler(self.dask_scheduler)
        if not environment().service_runs:
            return
        # run_kind nightly moves the alias as promote does: the schedule's runs are nightly
        # by their schedule's tag, with no run config
        for name, value in (("promote", self.promote), ("run_kind", self.run_kind)):
            if value is True or value == "nightly":
                raise ValueError(
                    f"{name}={value!r} is refused: a run launched through leap up's Dagster, "
                    "which any local user who reaches the webserver can launch, moves the alias "
                    "only as the nightly schedule's run whose gate passed; promote a version "
                    "with `leap model promote VERSION` (the pipeline's MLflow account)"
                )

    def training_settings(self) -> TrainingSettings:
        return TrainingSettings(
            self.profile,
            self.window_days,
            self.lookup_min_support,
            self.n_jobs,
            self.dask_scheduler,
        )

    def window_wait(self) -> float:
        """``window_wait_s``, checked before a night starts: finite and not negative (an endless
        wait would hold the run and the night's lock for good)."""
        if not (math.isfinite(self.window_wait_s) and self.window_wait_s >= 0):
            raise ValueError(f"window_wait_s={self.window_wait_s!r} must be finite seconds >= 0")
        return float(self.window_wait_s)

    def gate_settings(self) -> GateSettings:
        return GateSettings(self.gate_floor, self.gate_margin)

    def registry_settings(self) -> RegistrySettings:
        """``run_kind``, when set, checked here too: the registry checks it only as it logs a
        night, after the night trained."""
        from leap_pipeline.modeling.registry import RUN_KINDS

        if self.run_kind and self.run_kind not in RUN_KINDS:
            raise ValueError(f"run_kind={self.run_kind!r} is not one of {RUN_KINDS}")
        return RegistrySettings(self.run_kind, self.promote, self.keep_versions)


class MlflowResource(dg.ConfigurableResource):
    """Tracking store; empty: ``$MLFLOW_TRACKING_URI``, else SQLite under ``mlflow`` in the data
    folder (``$LEAP_DATA``)."""

    store: str = ""

    def configure(self) -> str:
        from leap_pipeline.modeling.registry import configure_tracking

        return configure_tracking(self.store or None)
