"""A migrated MLflow SQLite store, made once and copied (tests/conftest.py)."""

import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path


def copy_a_migrated_template(migrate: Callable, folder: Path) -> Callable:
    """``migrate`` (MLflow's ``_initialize_tables``), done once into ``folder`` for SQLite and
    copied from there into each new store: a SQLite file with no table yet. Any other store is
    migrated by ``migrate`` itself."""
    import sqlalchemy

    template, lock = folder / "template.db", threading.Lock()

    def initialize(engine) -> None:
        database = engine.url.database
        plain_file = engine.url.get_backend_name() == "sqlite" and not engine.url.query
        if not plain_file or database in (None, "", ":memory:"):
            migrate(engine)
            return
        with lock:  # stores made from several threads at once wait for one template
            # only a store with no table at all is a copy: MLflow migrates an older or a
            # half-migrated store in place, keeping its rows, and so does this
            if sqlalchemy.inspect(engine).get_table_names():
                migrate(engine)
                return
            if not template.exists():
                partial = template.with_suffix(".partial")
                partial.unlink(missing_ok=True)
                made = sqlalchemy.create_engine(f"sqlite:///{partial}")
                try:
                    migrate(made)
                finally:
                    made.dispose()
                partial.rename(template)
            source, target = sqlite3.connect(template), sqlite3.connect(database)
            with closing(source), closing(target):
                source.backup(target)

    return initialize


def schema(database: str | Path) -> tuple[list[tuple], list[tuple]]:
    """A SQLite store's tables, indexes and triggers as created, and its Alembic revision. A
    table's constraints are compared as a set: MLflow's own migration writes them in an order
    that varies from run to run (seen: the two CHECKs of ``runs`` swapped between two fresh
    migrations in one process)."""
    with closing(sqlite3.connect(database)) as con:
        objects = con.execute(
            "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        revision = con.execute("SELECT version_num FROM alembic_version").fetchall()
    return [(kind, name, _constraints_as_a_set(sql)) for kind, name, sql in objects], revision


_CONSTRAINT_LINES = ("CONSTRAINT", "CHECK", "FOREIGN KEY", "PRIMARY KEY", "UNIQUE")


def _constraints_as_a_set(sql: str | None) -> str | None:
    if sql is None:
        return None
    lines = [line.strip().rstrip(",").rstrip() for line in sql.splitlines()]
    constraints = sorted(line for line in lines if line.startswith(_CONSTRAINT_LINES))
    return "\n".join(
        [line for line in lines if not line.startswith(_CONSTRAINT_LINES)] + constraints
    )
