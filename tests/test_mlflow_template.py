"""The tests' MLflow stores are copies of one migrated store (tests/conftest.py): each must be
the store MLflow's own migration makes, and work as one."""

import sqlite3
from contextlib import closing

from mlflow import MlflowClient
from mlflow.store.db import utils as db_utils
from mlflow.store.model_registry import sqlalchemy_store as registry_store
from mlflow_template import schema

from leap_pipeline.modeling import registry


def test_a_new_store_is_the_store_mlflows_migration_makes_and_works(
    tmp_path, monkeypatch, _mlflow_stores_from_a_migrated_template
):
    migrate = _mlflow_stores_from_a_migrated_template
    assert db_utils._initialize_tables is not migrate  # the copy is what this test checks
    uri = registry.configure_tracking(tmp_path / "copied")
    with monkeypatch.context() as unpatched:  # the same store, made as MLflow makes it
        unpatched.setattr(db_utils, "_initialize_tables", migrate)
        unpatched.setattr(registry_store, "_initialize_tables", migrate)
        registry.configure_tracking(tmp_path / "migrated")
    copied, migrated = (tmp_path / name / "mlflow.db" for name in ("copied", "migrated"))
    assert schema(copied) == schema(migrated)
    objects, (revision,) = schema(copied)
    assert len(objects) > 20 and revision[0]
    # the store works as one: the experiment, a registered model and its version
    client = MlflowClient(uri, uri)
    assert client.get_experiment_by_name(registry.EXPERIMENT) is not None
    client.create_registered_model("template-check")
    assert client.get_registered_model("template-check").name == "template-check"


def test_a_store_that_has_tables_is_migrated_in_place_never_replaced(tmp_path):
    """MLflow calls its initialisation for any store lacking a table, an older store
    included; that store keeps its rows (MLflow migrates it in place), never becomes a copy."""
    older = tmp_path / "older.db"
    with closing(sqlite3.connect(older)) as con:
        con.execute("CREATE TABLE kept (note TEXT)")
        con.execute("INSERT INTO kept VALUES ('a row')")
        con.commit()
    uri = f"sqlite:///{older}"
    MlflowClient(uri, uri).search_experiments()  # the tracking store initialises it
    with closing(sqlite3.connect(older)) as con:
        assert con.execute("SELECT note FROM kept").fetchall() == [("a row",)]
        assert con.execute("SELECT version_num FROM alembic_version").fetchall()
