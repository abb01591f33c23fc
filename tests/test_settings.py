"""The environment, read in one place: defaults when unset or empty, errors that name the value."""

import pytest

from leap_pipeline.settings import DEFAULT_SOURCE, environment


def test_unset_or_empty_variables_take_their_defaults():
    settings = environment({"LEAP_SOURCE": "", "LEAP_WAREHOUSE_WAIT_S": ""})
    assert settings.source == DEFAULT_SOURCE
    assert settings.warehouse_wait_s == 120.0
    assert str(settings.warehouse_path) == "data/leap.duckdb"
    assert settings.database_url == "" and settings.max_concurrent_runs == 1


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LEAP_WAREHOUSE_WAIT_S", "-1"),
        ("LEAP_WAREHOUSE_WAIT_S", "soon"),
        ("LEAP_WAREHOUSE_WAIT_S", "100000"),
        ("LEAP_MODEL_NAME", "my model"),
        ("LEAP_DATABASE_URL", "mysql://leap@db/dagster"),
        ("LEAP_MAX_CONCURRENT_RUNS", "0"),
        ("LEAP_MAX_CONCURRENT_RUNS", "65"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_variable_and_the_value(variable, value):
    with pytest.raises(ValueError, match=rf"^{variable}='{value}': "):
        environment({variable: value})


def test_a_run_executes_its_steps_in_its_process_unless_more_at_once_are_asked_for():
    import dagster as dg

    from leap_pipeline.orchestration.definitions import run_executor

    assert run_executor(1) is dg.in_process_executor
    many = run_executor(environment({"LEAP_MAX_CONCURRENT_STEPS": "3"}).max_concurrent_steps)
    assert many.name == "multiprocess"
    config = many.apply_config_mapping({}).value["config"]
    assert config["max_concurrent"] == 3
    preloaded = config["start_method"]["forkserver"]["preload_modules"]  # forked, warm
    assert "dagster" in preloaded and "lightgbm" in preloaded
    with pytest.raises(ValueError, match="LEAP_MAX_CONCURRENT_STEPS='0'"):
        environment({"LEAP_MAX_CONCURRENT_STEPS": "0"})


def test_the_step_forkserver_preloads_no_module_that_starts_polars():
    """Polars' threads, started as it is imported, must not be in the process steps fork from
    (its documentation: a child forked from them may deadlock). Checked in a fresh interpreter,
    as the forkserver imports them. The threads the preloaded modules do start (jemalloc's, by
    PyArrow; OpenBLAS's, by NumPy and SciPy) register fork handlers."""
    import subprocess
    import sys

    from leap_pipeline.orchestration.definitions import STEP_PRELOAD_MODULES

    script = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in STEP_PRELOAD_MODULES)
        + ("print(sorted(m for m in ('polars', 'mlflow') if m in sys.modules))")
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_definitions_import_neither_mlflow_nor_the_fits_stack():
    """Every step of a run, and the run's worker, import the definitions: MLflow (a second) and
    the fits' stack (scikit-learn, Numba, joblib: two more) are imported only in the steps that
    fit, score, register or move the alias."""
    import subprocess
    import sys

    heavy = ("joblib", "mlflow", "numba", "sklearn")
    script = (
        "import sys\n"
        "import leap_pipeline.orchestration.definitions as d\n"
        "d.defs()\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), -1.0])
def test_a_night_refuses_a_window_wait_it_could_never_end_or_measure(seconds):
    from leap_pipeline.orchestration.resources import TrainingResource

    assert TrainingResource(window_wait_s=60).window_wait() == 60.0
    with pytest.raises(ValueError, match="window_wait_s="):
        TrainingResource(window_wait_s=seconds).window_wait()


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"gate_floor": 2.0}, "gate_floor=2.0"),
        ({"gate_margin": -0.1}, "gate_margin=-0.1"),
        ({"keep_versions": 0}, "keep_versions=0"),
        ({"run_kind": "weekly"}, "run_kind='weekly'"),
    ],
)
def test_a_bad_gate_or_registry_setting_is_an_error_naming_it(config, named):
    """Read as the training starts (``train_nights``), not once the nights trained: a run_kind
    the registry would refuse as it logs a night is refused here too."""
    from leap_pipeline.modeling.registry import RUN_KINDS
    from leap_pipeline.orchestration.resources import TrainingResource

    for kind in ("", *RUN_KINDS):  # empty: the run's own kind, nightly or adhoc
        assert TrainingResource(run_kind=kind).registry_settings().run_kind == kind
    resource = TrainingResource(**config)
    with pytest.raises(ValueError, match=f"^{named}"):
        resource.gate_settings()
        resource.registry_settings()


@pytest.mark.parametrize(
    ("uri", "database"),
    [
        ("sqlite:////srv/leap/mlflow.db", "/srv/leap/mlflow.db"),
        ("sqlite:////srv/leap/mlflow.db?timeout=5", "/srv/leap/mlflow.db"),
        ("sqlite+pysqlite:////srv/leap/mlflow.db", "/srv/leap/mlflow.db"),
        ("sqlite:////srv/my%20data/mlflow.db", "/srv/my data/mlflow.db"),
        ("sqlite:///:memory:", None),
        ("sqlite:///file:mlflow.db?mode=ro&uri=true", None),
        ("http://127.0.0.1:5000", None),
        ("file:///srv/leap/mlruns", None),
    ],
)
def test_a_sqlite_tracking_uri_names_the_file_sqlalchemy_opens(uri, database):
    """Where a SQLite store's artifacts go, and whether a backup holds it, follow its file."""
    from pathlib import Path

    from leap_pipeline.settings import sqlite_file

    assert sqlite_file(uri) == (Path(database) if database else None)
