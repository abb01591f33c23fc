"""A restored data folder pointed at its new place: the absolute paths its stores recorded.

Two stores keep absolute paths into the data folder that a later run reads back. MLflow's SQLite
store records each experiment's, run's, logged model's and version's artifact location as a
``file://`` URI. The model assets' records (``records/<asset>/<day>/<run>.json``) name the
night's folder that ``model_evaluation`` opens. Left as they are, a restored install would read
the original's files, and fail once the original is gone. Only the paths under the old folder
change; the files a registered version hashed (its ``MLmodel``, its artifacts) are not touched,
and Dagster's event log keeps the old paths as history.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

from leap_serving.model.publish import write_atomic

# where MLflow's SQLite store records artifact locations; only these identifiers are put into
# the SQL, the values are bound
MLFLOW_LOCATIONS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
    ("model_versions", "storage_location"),
    ("model_versions", "source"),
)


def relocate_mlflow(store: Path, old: Path, new: Path) -> int:
    """Point the artifact locations MLflow's SQLite ``store`` records under ``old`` at the same
    places under ``new``; returns the rows changed."""
    old_uri, new_uri, changed = old.as_uri() + "/", new.as_uri() + "/", 0
    with contextlib.closing(sqlite3.connect(store)) as con, con:
        for table, column in MLFLOW_LOCATIONS:
            found = con.execute("SELECT name FROM pragma_table_info(?)", (table,))
            if column not in {row[0] for row in found}:
                continue  # another MLflow release: no such table or column
            changed += con.execute(
                f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                f"WHERE substr({column}, 1, ?) = ?",
                (new_uri, len(old_uri) + 1, len(old_uri), old_uri),
            ).rowcount
    return changed


def _moved(value, old: str, new: str):
    if isinstance(value, str):
        return new + value[len(old) :] if value == old or value.startswith(old + "/") else value
    if isinstance(value, dict):
        return {key: _moved(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_moved(item, old, new) for item in value]
    return value


def relocate_records(records: Path, old: Path, new: Path) -> int:
    """Rewrite each record under ``records`` whose strings name a path under ``old`` to name
    the same path under ``new`` (written atomically); returns the records changed."""
    changed = 0
    for path in sorted(records.rglob("*.json")) if records.is_dir() else []:
        record = json.loads(path.read_text())
        moved = _moved(record, str(old), str(new))
        if moved != record:
            write_atomic(path, json.dumps(moved, indent=1, default=str))
            changed += 1
    return changed
