"""Every setting of the pipeline, in one place: the environment it reads and the typed settings
of a night, each with its default and its valid range.

The environment is read when a function asks (``environment()``), never at import, so every
process of an install (the UI, the daemon, a run worker, the CLI) sees the variables it was started
with. This is the one module of ``leap_pipeline`` that touches ``os.environ``: it also writes the
variables a child process inherits. ``TrainingResource`` holds the night's fields flat, as Dagster's
run config sets them (``resources: {training: {config: {...}}}``), and hands out the dataclasses
below; the report and the demo build theirs from their flags. A bad value is an error naming the
field and the value. The table of variables in docs/configuration.md is tested against
``VARIABLES``.

Every path an install uses derives from one setting, its data folder (``$LEAP_DATA``): the
warehouse, the calendar, the MLflow store, the Dagster home, night records and locks all default
to a place inside it, whatever the working directory; a variable that names one of them
explicitly (``LEAP_WAREHOUSE``, ``MLFLOW_TRACKING_URI``, ``DAGSTER_HOME``) still wins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from leap_serving.model.profiles import PROFILES  # the profiles alone: no scikit-learn loads

WINDOW_DAYS = 30  # a night trains on the 30 days before day D (paper section 3.1)
MIN_WINDOW_DAYS = 7  # a shorter window is refused: too few days to fit and early-stop on
MIN_SUPPORT = 20  # attempts a lookup-table key needs before the table answers for it

DEFAULT_DATA = Path("data")
DEFAULT_SOURCE = "simulator:seed=0,scale=0.05"
DEFAULT_MODEL_NAME = "leap-throughput"
DEFAULT_LOCK_WAIT_S = 120.0
# a night's file lock is held while it trains (about 15 min at the paper scale on 2 cores): a
# waiter gives up after four times that, not never
DEFAULT_FILE_LOCK_WAIT_S = 3600.0

DATA_ENV = "LEAP_DATA"
WAREHOUSE_ENV = "LEAP_WAREHOUSE"
LOCK_WAIT_ENV = "LEAP_WAREHOUSE_WAIT_S"
FILE_LOCK_WAIT_ENV = "LEAP_LOCK_WAIT_S"
SOURCE_ENV = "LEAP_SOURCE"
MODEL_NAME_ENV = "LEAP_MODEL_NAME"
DATABASE_URL_ENV = "LEAP_DATABASE_URL"
MAX_CONCURRENT_RUNS_ENV = "LEAP_MAX_CONCURRENT_RUNS"
MAX_CONCURRENT_STEPS_ENV = "LEAP_MAX_CONCURRENT_STEPS"
ALERT_WEBHOOK_ENV = "LEAP_ALERT_WEBHOOK_URL"
DASK_TLS_DIR_ENV = "LEAP_DASK_TLS_DIR"
# set by ``leap up`` for its Dagster webserver and daemon, whose runs any local user who reaches
# the webserver can launch: such a run's config may not promote or name another source
SERVICE_RUNS_ENV = "LEAP_SERVICE_RUNS"
DAGSTER_PASSWORD_FILE_ENV = "LEAP_DAGSTER_PASSWORD_FILE"  # set by `leap up`
# the drivers the service extra installs: SQLAlchemy 2.1 reads a bare postgresql:// as psycopg
# (version 3), which nothing here installs, so the Dagster and MLflow stores name psycopg2
POSTGRES_SCHEMES = ("postgresql://", "postgresql+psycopg2://")


def sqlalchemy_url(url: str) -> str:
    """A Postgres URL with the psycopg2 driver named, as SQLAlchemy must read it."""
    return url.replace(POSTGRES_SCHEMES[0], POSTGRES_SCHEMES[1], 1)


def sqlite_file(uri: str) -> Path | None:
    """The database file of a SQLite tracking URI (``sqlite:///`` or ``sqlite+DRIVER:///``),
    absolute, read as SQLAlchemy reads it: the query dropped, the path percent-decoded, a
    relative path taken from the working directory. None for a server, SQLite in memory, or a
    ``file:`` URI."""
    found = re.fullmatch(r"sqlite(?:\+\w+)?:///([^?]*)(?:\?.*)?", uri, re.S)
    if not found or found[1] in ("", ":memory:") or found[1].startswith("file:"):
        return None
    return Path(unquote(found[1])).resolve()


class Environment(BaseModel):
    """The environment variables the pipeline reads, validated. Empty means the default."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    data: Path = Field(DEFAULT_DATA, alias=DATA_ENV)
    warehouse: Path | None = Field(None, alias=WAREHOUSE_ENV)
    warehouse_wait_s: float = Field(DEFAULT_LOCK_WAIT_S, ge=0.0, le=86_400.0, alias=LOCK_WAIT_ENV)
    lock_wait_s: float = Field(
        DEFAULT_FILE_LOCK_WAIT_S, ge=0.0, le=86_400.0, alias=FILE_LOCK_WAIT_ENV
    )
    source: str = Field(DEFAULT_SOURCE, min_length=1, alias=SOURCE_ENV)
    model_name: str = Field(DEFAULT_MODEL_NAME, pattern=r"^[A-Za-z0-9_.-]+$", alias=MODEL_NAME_ENV)
    mlflow_tracking_uri: str = Field("", alias="MLFLOW_TRACKING_URI")
    dagster_home: str = Field("", alias="DAGSTER_HOME")
    database_url: str = Field("", pattern=r"^postgresql(\+psycopg2)?://", alias=DATABASE_URL_ENV)
    max_concurrent_runs: int = Field(1, ge=1, le=64, alias=MAX_CONCURRENT_RUNS_ENV)
    max_concurrent_steps: int = Field(1, ge=1, le=64, alias=MAX_CONCURRENT_STEPS_ENV)
    alert_webhook_url: str = Field("", pattern=r"^https?://\S+$", alias=ALERT_WEBHOOK_ENV)
    dask_tls_dir: Path | None = Field(None, alias=DASK_TLS_DIR_ENV)
    service_runs: bool = Field(False, alias=SERVICE_RUNS_ENV)

    @property
    def warehouse_path(self) -> Path:
        """``$LEAP_WAREHOUSE``, else ``leap.duckdb`` in the data folder."""
        return self.warehouse or self.data / "leap.duckdb"

    @property
    def mlflow_store(self) -> Path:
        """The local MLflow store (its SQLite file and artifacts): ``mlflow`` in the data folder,
        used unless ``$MLFLOW_TRACKING_URI`` names another."""
        return self.data / "mlflow"

    @property
    def tracking_uri(self) -> str:
        """``$MLFLOW_TRACKING_URI``, else the SQLite file of the local store (absolute)."""
        local = f"sqlite:///{(self.mlflow_store / 'mlflow.db').resolve()}"
        return self.mlflow_tracking_uri or local

    @property
    def dagster_home_path(self) -> Path:
        """``$DAGSTER_HOME``, else ``dagster`` in the data folder (what ``leap ui`` and ``leap
        demo`` set; with neither, an in-process run uses a throwaway instance)."""
        return Path(self.dagster_home) if self.dagster_home else self.data / "dagster"

    @property
    def database_sqlalchemy_url(self) -> str:
        """``$LEAP_DATABASE_URL`` as SQLAlchemy (Dagster's and MLflow's stores) must read it,
        with the psycopg2 driver named; empty on the embedded default."""
        return sqlalchemy_url(self.database_url) if self.database_url else ""

    @property
    def postgres_folder(self) -> Path:
        """Where ``leap up``'s embedded Postgres keeps its data: ``postgres`` in the data folder."""
        return self.data / "postgres"

    @property
    def service_dagster_home(self) -> Path:
        """The Dagster home ``leap up`` writes, its instance on Postgres: ``dagster-postgres`` in
        the data folder, beside the embedded default's ``dagster`` (which stays on SQLite)."""
        return self.data / "dagster-postgres"


# name -> (default as docs/configuration.md shows it, what it sets); the serving runtime's own
# two variables are read by ``leap_serving.decide.ranker`` (it imports nothing of the pipeline)
# and listed here too.
VARIABLES: dict[str, tuple[str, str]] = {
    DATA_ENV: ("data", "the install's folder: every default path below lies in it"),
    WAREHOUSE_ENV: ("$LEAP_DATA/leap.duckdb", "the DuckDB warehouse file"),
    LOCK_WAIT_ENV: ("120", "seconds to wait for another process's warehouse lock (0-86400)"),
    FILE_LOCK_WAIT_ENV: ("3600", "seconds to wait for a night's or the alias's lock (0-86400)"),
    SOURCE_ENV: (DEFAULT_SOURCE, "where days come from: a simulator URI or a folder of logs"),
    MODEL_NAME_ENV: (DEFAULT_MODEL_NAME, "the registered model's name (letters, digits, _ . -)"),
    "MLFLOW_TRACKING_URI": ("sqlite:///$LEAP_DATA/mlflow/mlflow.db", "the MLflow tracking store"),
    "DAGSTER_HOME": ("$LEAP_DATA/dagster", "Dagster's instance folder (run history, schedules)"),
    DATABASE_URL_ENV: ("(none)", "a Postgres database for the Dagster instance's storage"),
    MAX_CONCURRENT_RUNS_ENV: ("1", "runs the Dagster instance runs at once (1-64)"),
    MAX_CONCURRENT_STEPS_ENV: (
        "1",
        "a run's steps at once: 1 in the run's process, more in a process each",
    ),
    ALERT_WEBHOOK_ENV: ("(none)", "a URL each failed run is posted to (Slack-compatible JSON)"),
    DASK_TLS_DIR_ENV: ("(none)", "the certificates a tls:// dask_scheduler is reached with"),
    SERVICE_RUNS_ENV: (
        "(none)",
        "1 under `leap up`'s Dagster: run config sets no promote, no source",
    ),
    DAGSTER_PASSWORD_FILE_ENV: (
        "(none)",
        "set by `leap up`: the file of its Dagster webserver's login password",
    ),
    "LEAP_MODEL_URI": ("models:/leap-throughput@production", "the model the Ranker loads"),
    "LEAP_ROUTING_SWITCHES": ("(none)", "a JSON file of switches the Ranker re-reads"),
    # `leap serve`'s, read by ``leap_serving.http.config`` (``serve_config`` below)
    "LEAP_SERVE_HOST": ("127.0.0.1", "the address `leap serve` listens on"),
    "LEAP_SERVE_PORT": ("8765", "the port `leap serve` listens on"),
    "LEAP_SERVE_TOKEN": ("(none)", "the bearer token `leap serve` asks for (none: no token)"),
    "LEAP_SERVE_TOKEN_FILE": ("(none)", "a file of bearer tokens, one a line, re-read on change"),
    "LEAP_SERVE_TLS_CERT": ("(none)", "PEM certificate: `leap serve` listens on https"),
    "LEAP_SERVE_TLS_KEY": ("(none)", "the certificate's PEM private key"),
    "LEAP_SERVE_WEBHOOK_PORT": ("(none)", "the admission webhook's own https port"),
    "LEAP_SERVE_WEBHOOK_HOST": ("$LEAP_SERVE_HOST", "the admission webhook's address"),
    "LEAP_SERVE_MAX_BODY_BYTES": ("1048576", "the largest request body `leap serve` reads"),
    "LEAP_SERVE_DEADLINE_S": ("2", "seconds a ranking may take before a 504 (0-600]"),
    "LEAP_SERVE_HANDOFF_CONFIG": ("(none)", "the admission webhook's hand-off config file"),
}


def environment(values: Mapping[str, str] | None = None) -> Environment:
    """The settings the environment holds now (or ``values``); empty variables take their
    default. Raises ``ValueError`` naming the variable and its value when one is out of range."""
    values = os.environ if values is None else values
    names = [field.alias for field in Environment.model_fields.values()]
    given = {name: values[name] for name in names if values.get(name)}
    try:
        return Environment.model_validate(given)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = error["loc"][0]
        raise ValueError(f"{name}={given.get(name)!r}: {error['msg']}") from None


def serve_config(**given):
    """``leap serve``'s settings (``leap_serving.http.config.ServeConfig``): the
    ``LEAP_SERVE_*`` variables, with ``given`` (the command's flags) over them; a bad value is
    an error naming the variable."""
    from leap_serving.http.config import config_from_environment

    return config_from_environment(os.environ, **given)


def dagster_password_file() -> str:
    """The file of the password ``leap up``'s Dagster webserver asks for (``app.dagster_login``):
    set by ``leap up`` for the webserver alone; empty when not set."""
    return os.environ.get(DAGSTER_PASSWORD_FILE_ENV, "")


def ranker_model_uri() -> str:
    """What a ``Ranker`` given no model loads: ``$LEAP_MODEL_URI``, else the production
    alias (``leap_serving.decide.ranker`` reads the same variable, importing nothing of this)."""
    return os.environ.get("LEAP_MODEL_URI") or VARIABLES["LEAP_MODEL_URI"][0]


def set_environment(overwrite: bool = True, **values: str) -> None:
    """Set variables for this process and the processes it starts (``overwrite=False`` keeps
    one already set, as ``os.environ.setdefault``)."""
    for name, value in values.items():
        if overwrite or not os.environ.get(name):
            os.environ[name] = value


# MLflow reads its registry from this variable before the tracking URI; LEAP registers where it
# tracks (``registry.configure_tracking`` sets both), so a started server runs without it
_REGISTRY_ENV = "MLFLOW_REGISTRY_URI"


def child_environment(**values: str) -> dict[str, str]:
    """This process's environment with ``values`` over it: what a started server inherits.
    ``MLFLOW_REGISTRY_URI`` is left out unless given: set by this process's shell, or by
    ``mlflow.set_registry_uri`` (which exports it), it would point a server's Ranker and its runs
    at another registry than the tracking store ``values`` names."""
    inherited = {k: v for k, v in os.environ.items() if k != _REGISTRY_ENV}
    return {**inherited, **values}


@dataclass(frozen=True)
class TrainingSettings:
    """What a night fits, on which days, and where the experts run."""

    profile: str = "fast"  # "paper" for the paper's hyperparameters, "quick" for tests
    window_days: int = WINDOW_DAYS  # at most 30: the assets' partition mapping declares 30 days
    lookup_min_support: int = MIN_SUPPORT  # attempts a lookup-table key needs
    n_jobs: int | None = 1  # experts fitted at once (joblib; -1: one per core or Dask worker)
    dask_scheduler: str = ""  # experts and single GBDTs on a Dask cluster: its address, or "local"

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile={self.profile!r} is not one of {sorted(PROFILES)}")
        if not MIN_WINDOW_DAYS <= self.window_days <= WINDOW_DAYS:
            raise ValueError(
                f"window_days={self.window_days!r} must be {MIN_WINDOW_DAYS}..{WINDOW_DAYS}"
            )
        if self.lookup_min_support < 1:
            raise ValueError(f"lookup_min_support={self.lookup_min_support!r} must be >= 1")
        if self.n_jobs == 0:
            raise ValueError("n_jobs=0: use a positive count, or -1 for one per core")


@dataclass(frozen=True)
class GateSettings:
    """When a night's model may move the production alias."""

    floor: float = 0.30  # the published model's w20 must reach this
    margin: float = 0.02  # ... and be at most this far below production's on the same day

    def __post_init__(self) -> None:
        for name in ("floor", "margin"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"gate_{name}={value!r} must be between 0 and 1")


@dataclass(frozen=True)
class RegistrySettings:
    """How a night's version is tagged, promoted and kept."""

    run_kind: str = ""  # empty: "nightly" when a schedule launched the run, else "adhoc"
    promote: bool = False  # also move the alias on an ad-hoc run (the gate still applies)
    keep_versions: int = 30  # registered versions kept; the production one always is

    def __post_init__(self) -> None:
        if self.keep_versions < 1:
            raise ValueError(f"keep_versions={self.keep_versions!r} must be >= 1")
