"""One install, one folder: every path an install uses derives from ``LEAP_DATA`` whatever the
working directory, a variable that names a path explicitly still wins, and the calendar file
reads back whatever it holds."""

import datetime as dt
from pathlib import Path

import mlflow
import pytest

from leap_pipeline.app.cli import build_parser
from leap_pipeline.app.commands import install
from leap_pipeline.app.ui import ui_environment
from leap_pipeline.data.warehouse import default_path
from leap_pipeline.orchestration.calendar import Calendar, data_folder
from leap_pipeline.orchestration.night_records import records_root
from leap_pipeline.orchestration.resources import WarehouseResource
from leap_pipeline.settings import DATA_ENV, WAREHOUSE_ENV, environment
from leap_pipeline.simulation import SPAN_START
from leap_pipeline.studies.report_settings import ReportSettings

PATH_VARIABLES = (WAREHOUSE_ENV, "MLFLOW_TRACKING_URI", "DAGSTER_HOME")


@pytest.fixture
def folders(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """``LEAP_DATA`` names an install's folder; the process runs in another directory."""
    data, elsewhere = tmp_path / "srv" / "leap" / "data", tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv(DATA_ENV, str(data))
    for name in PATH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(elsewhere)
    return data, elsewhere


def test_every_default_path_lies_in_leap_data_whatever_the_working_directory(folders):
    data, elsewhere = folders
    env = environment()
    assert default_path() == data / "leap.duckdb"
    assert (env.mlflow_store, env.dagster_home_path) == (data / "mlflow", data / "dagster")
    assert env.tracking_uri == f"sqlite:///{data / 'mlflow' / 'mlflow.db'}"
    assert data_folder() == data and records_root() == data / "records"
    Calendar(source="files:/logs").save()
    assert (data / "leap.toml").is_file() and Calendar.load().source == "files:/logs"
    assert ReportSettings().data == data
    for command in ("demo", "ui", "import", "report", "rank"):
        argv = [command, "--attempts", "a", "--allocations", "b", "--hardware", "c"]
        args = build_parser().parse_args(argv if command == "import" else [command])
        assert install(args).data == data, command
    served = ui_environment(data)
    assert served["DAGSTER_HOME"] == str(data / "dagster")
    assert served[WAREHOUSE_ENV] == str(data / "leap.duckdb")
    assert served["MLFLOW_TRACKING_URI"] == env.tracking_uri
    assert not (elsewhere / "data").exists()


def test_the_mlflow_store_follows_leap_data(folders):
    from leap_pipeline.modeling import registry

    data, elsewhere = folders
    previous = mlflow.get_tracking_uri()
    try:
        assert registry.configure_tracking() == f"sqlite:///{data / 'mlflow' / 'mlflow.db'}"
    finally:
        mlflow.set_tracking_uri(previous)
        mlflow.set_registry_uri(previous)
    assert (data / "mlflow" / "mlflow.db").is_file() and not (elsewhere / "data").exists()


def test_a_sqlite_store_named_by_the_environment_keeps_its_artifacts_beside_it(
    folders, monkeypatch
):
    """MLflow alone puts a SQLite store's artifacts under ``mlruns`` in the working directory
    of whichever process created the experiment: outside the store, its backup and its
    permissions. The experiment keeps them beside the database, and a logged model goes there."""
    from leap_pipeline.app.backup import uncovered
    from leap_pipeline.modeling import registry

    data, elsewhere = folders
    store = data.parent / "registry"
    store.mkdir(parents=True)
    monkeypatch.delenv("LEAP_DATABASE_URL", raising=False)
    previous = mlflow.get_tracking_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store / 'mlflow.db'}")
    try:
        registry.configure_tracking()
        experiment = mlflow.get_experiment_by_name(registry.EXPERIMENT)
        assert experiment.artifact_location == (store / "artifacts").as_uri()
        with mlflow.start_run():
            mlflow.log_text("x", "check.txt")
        notes = uncovered(environment())
    finally:
        mlflow.set_tracking_uri(previous)
        mlflow.set_registry_uri(previous)
    assert list((store / "artifacts").rglob("check.txt")) and not (elsewhere / "mlruns").exists()
    # that store lies outside the data folder: a backup of the folder says it leaves it out
    (note,) = [n for n in notes if "SQLite" in n]
    assert str(store / "mlflow.db") in note and "not backed up" in note


def test_a_run_started_elsewhere_lands_in_the_install_and_the_next_process_finds_it(folders):
    """The report: a Dagster process started with ``LEAP_DATA`` from another directory made an
    empty ``./data/leap.duckdb``, and the next step failed with "its sources have not landed"."""
    from leap_pipeline.orchestration.definitions import materialize_days

    data, elsewhere = folders
    materialize_days(SPAN_START, SPAN_START, source="simulator:seed=3,scale=0.02",
                     log_level="WARNING")  # fmt: skip
    assert (data / "leap.duckdb").is_file() and not (elsewhere / "data").exists()
    assert WarehouseResource().landed_days("source_log") == [SPAN_START]


def test_a_variable_naming_a_path_still_wins(folders, tmp_path, monkeypatch):
    data, _ = folders
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path / "other.duckdb"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    env = environment()
    assert default_path() == tmp_path / "other.duckdb"
    assert env.tracking_uri == "http://mlflow.example:5000"
    assert env.dagster_home_path == tmp_path / "home"
    assert env.mlflow_store == data / "mlflow"  # the local store's place, if one is used
    # --data names a whole install: every path in it, whatever the variables say
    chosen = install(build_parser().parse_args(["ui", "--data", str(tmp_path / "mine")]))
    assert chosen.warehouse_path == tmp_path / "mine" / "leap.duckdb"
    assert ui_environment(tmp_path / "mine")["DAGSTER_HOME"] == str(tmp_path / "mine" / "dagster")


def test_without_leap_data_the_install_is_data_in_the_working_directory():
    env = environment({})
    assert env.warehouse_path == Path("data") / "leap.duckdb"
    assert env.mlflow_store == Path("data") / "mlflow"
    assert env.dagster_home_path == Path("data") / "dagster"


@pytest.mark.parametrize(
    "source",
    ["files:/data/𝔽leet", 'files:/logs "quoted" \\ back\tslash\nline', "files:/é/日本", ""],
)
def test_a_calendar_reads_back_whatever_its_source_holds(tmp_path, source):
    calendar = Calendar(first_day=dt.date(2026, 3, 1), timezone="Europe/Paris", source=source)
    calendar.save(tmp_path)
    assert Calendar.load(tmp_path) == calendar


def test_leap_model_uses_the_server_a_variable_names_even_with_data(folders, tmp_path, monkeypatch):
    """`leap model --data DIR` opened DIR's SQLite registry even with MLFLOW_TRACKING_URI set
    (`leap up`'s exports), so a rollback moved an alias no night or Ranker reads: --data picks
    the store only when the variable is unset, as `leap rank` and `leap serve` read it."""
    from leap_pipeline.app.cli import main
    from leap_pipeline.modeling import alias_records, registry

    given = []
    monkeypatch.setattr(registry, "configure_tracking", given.append)
    monkeypatch.setattr(registry, "promotion_history", lambda: [])
    monkeypatch.setattr(alias_records, "pinned", lambda: None)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert main(["model", "--data", str(tmp_path / "mine"), "history"]) == 0
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert main(["model", "--data", str(tmp_path / "mine"), "history"]) == 0
    assert main(["model", "history"]) == 0
    assert given == [None, tmp_path / "mine" / "mlflow", folders[0] / "mlflow"]
