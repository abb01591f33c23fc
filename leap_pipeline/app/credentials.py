"""The secrets of ``leap up``'s service topology, generated once per data folder and kept in
``$LEAP_DATA/secrets`` (a folder only its owner may enter, each file readable by its owner only).

Every secret lives in a file, never on a command line (``ps`` shows every process's argv to
every user of the machine): the Postgres password (and the libpq password file its clients name
in their connection URL), the MLflow server's admin password (the pipeline's account) and its
Flask secret key, and the Dask cluster's TLS certificates. A process reads the file, or gets the
value in its environment, which only its own user (and root) can read. Generated on first use and
kept: a data folder's Postgres, MLflow user store and Dask certificates must outlive a restart.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import shlex
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

SECRETS = "secrets"  # in the data folder
SECRET_BYTES = 32  # token_urlsafe: 43 characters, none of them ':' or '\' (pgpass's escapes)
CERT_DAYS = 3650  # the Dask certificates' validity; issued again within RENEW_DAYS of its end
RENEW_DAYS = 30
MLFLOW_ADMIN = "leap"  # the MLflow account the pipeline's processes use, an admin of the server


def secrets_folder(data: Path) -> Path:
    """``secrets`` in the data folder, created mode 0700 (and set back to it if it was opened
    up): only its owner may list or enter it."""
    folder = data / SECRETS
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(folder.stat().st_mode) != 0o700:
        folder.chmod(0o700)
    return folder


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` readable and writable by its owner only, whole or not at all
    (a sibling of a name of its own created 0600, then renamed over ``path``): never readable
    by others, even for a moment, and two writers at once never share a partial file."""
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0600
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return path


def read_private(path: Path) -> str:
    """The text of a secret file, its mode set back to 0600 first if someone opened it up
    (libpq ignores a password file others can read, and a secret others can read is no longer
    one of this owner's alone)."""
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        path.chmod(0o600)
    return path.read_text()


def secret(path: Path) -> str:
    """The secret in ``path`` (its first line), generated (``secrets.token_urlsafe``) and
    written 0600 if the file does not exist yet (by a link, which never replaces a file that
    another process created meanwhile: the first secret written is the one kept)."""
    if path.exists():
        value = read_private(path).strip()
        if not value:
            raise ValueError(f"{path} is empty: delete it to generate a new secret, or restore it")
        return value
    value = secrets.token_urlsafe(SECRET_BYTES)
    partial = write_private(path.with_name(f".{path.name}.new-{os.getpid()}"), value + "\n")
    try:
        os.link(partial, path)  # fails if another process wrote one meanwhile: theirs holds
    except FileExistsError:
        return secret(path)
    finally:
        partial.unlink()
    return value


def pgpass_line(user: str, password: str) -> str:
    """A line of libpq's password file for ``user`` on any host, port and database (the file is
    the server's own, beside its data): ``:`` and ``\\`` escaped as libpq reads them."""
    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    return f"*:*:*:{user}:{escaped}\n"


@dataclass(frozen=True)
class MlflowAuth:
    """What the MLflow server's basic-auth app and its clients need: the app's configuration
    (``MLFLOW_AUTH_CONFIG_PATH``, no secret in it), the pipeline's account and the files that
    hold its password and the Flask secret key (CSRF for the app's sign-up form)."""

    config: Path
    username: str
    password_file: Path
    secret_key_file: Path

    def server_environment(self) -> dict[str, str]:
        """The MLflow server's own variables: where the app's configuration is, the admin's
        password for the first start (the app creates the account then, and ignores it after),
        and the static Flask key the app refuses to start without."""
        return {
            "MLFLOW_AUTH_CONFIG_PATH": str(self.config),
            "MLFLOW_AUTH_ADMIN_USERNAME": self.username,
            "MLFLOW_AUTH_ADMIN_PASSWORD": secret(self.password_file),
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secret(self.secret_key_file),
        }

    def client_environment(self) -> dict[str, str]:
        """What an MLflow client (``MlflowClient``, the Ranker, ``leap model promote``) reads
        its credentials from: the pipeline's account."""
        return {
            "MLFLOW_TRACKING_USERNAME": self.username,
            "MLFLOW_TRACKING_PASSWORD": secret(self.password_file),
        }

    def client_exports(self) -> dict[str, str]:
        """The client's variables as shell text to print: the password read from its file when
        the line runs (``$(cat FILE)``), so it is never printed or kept in a shell history."""
        return {
            "MLFLOW_TRACKING_USERNAME": shlex.quote(self.username),
            "MLFLOW_TRACKING_PASSWORD": f'"$(cat {shlex.quote(str(self.password_file))})"',
        }


AUTH_CACHE_TTL_S = 60  # MLflow's basic-auth credential cache, per server process


def auth_ini(database_uri: str, default_permission: str = "READ") -> str:
    """The basic-auth app's configuration: every request needs an account; one that is not an
    admin reads (``default_permission``) and changes nothing it was not granted, so only the
    pipeline's account (the admin) moves an alias. The users' store is ``database_uri``. The
    admin's password comes from the server's environment, not this file."""
    if default_permission not in ("READ", "USE", "EDIT", "MANAGE", "NO_PERMISSIONS"):
        raise ValueError(f"default_permission={default_permission!r} is not an MLflow permission")
    if "\n" in database_uri:  # it would start another setting
        raise ValueError(f"database_uri={database_uri!r}: a newline is not allowed")
    database_uri = database_uri.replace("%", "%%")  # configparser reads '%%' as '%'
    return (
        "# MLflow's basic-auth app, as leap up runs it (written at each start)\n"
        "[mlflow]\n"
        f"default_permission = {default_permission}\n"
        f"database_uri = {database_uri}\n"
        f"admin_username = {MLFLOW_ADMIN}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        "grant_default_workspace_access = false\n"
        # a password checked once a minute per account, not at every request (scrypt, about
        # 0.1 s each: a model's 98 downloads took 15 s); one worker, so no other worker's copy
        # outlives a password change made through the server
        f"auth_cache_ttl_seconds = {AUTH_CACHE_TTL_S}\n"
    )


def mlflow_auth(data: Path, database_uri: str) -> MlflowAuth:
    """The basic-auth configuration of the data folder's MLflow server, written now; the
    admin's password and the Flask key generated on the first start."""
    folder = secrets_folder(data)
    auth = MlflowAuth(
        config=folder / "mlflow-auth.ini",
        username=MLFLOW_ADMIN,
        password_file=folder / "mlflow-password",
        secret_key_file=folder / "mlflow-flask-secret-key",
    )
    write_private(auth.config, auth_ini(database_uri))
    secret(auth.password_file)
    secret(auth.secret_key_file)
    return auth


# -- the Dask cluster's TLS ------------------------------------------------------------------------


def _valid_until(certificate_pem: bytes) -> dt.datetime:
    from cryptography import x509

    return x509.load_pem_x509_certificate(certificate_pem).not_valid_after_utc


def _issue(folder: Path, now: dt.datetime) -> None:
    """A new certificate authority and one certificate it signs for the scheduler, the workers
    and the clients alike (a key each would be held by the same user on the same machine). The
    authority's key signs that certificate and is not kept: nothing else can be signed by it,
    so whoever holds none of these files cannot join."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    until = now + dt.timedelta(days=CERT_DAYS)
    signs_only = x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    # the one certificate serves the scheduler and the workers (servers) and every client
    both_ends = x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("leap up dask CA"))
        .issuer_name(name("leap up dask CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(signs_only, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(name("leap up dask"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(both_ends, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    from leap_pipeline.modeling.parallel import DASK_TLS_FILES

    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    ca_name, cert_name, key_name = DASK_TLS_FILES
    write_private(folder / key_name, key_pem)
    write_private(folder / cert_name, leaf.public_bytes(pem).decode())
    write_private(folder / ca_name, ca.public_bytes(pem).decode())  # last: a whole set is there


def dask_certificates(data: Path, now: dt.datetime | None = None) -> Path:
    """The folder of the data folder's Dask TLS files (``DASK_TLS_FILES``: the authority's
    certificate, the certificate, its key), issued on first use and again when one is missing
    or the certificate ends within ``RENEW_DAYS``."""
    from leap_pipeline.modeling.parallel import DASK_TLS_FILES

    folder = secrets_folder(data) / "dask"
    folder.mkdir(mode=0o700, exist_ok=True)
    now = now or dt.datetime.now(dt.UTC)
    ca_name, cert_name, _ = DASK_TLS_FILES
    if all((folder / name).exists() for name in DASK_TLS_FILES):
        try:
            until = min(_valid_until((folder / n).read_bytes()) for n in (ca_name, cert_name))
        except ValueError:  # not a certificate: issue new ones
            until = now
        if until - now > dt.timedelta(days=RENEW_DAYS):
            for name in DASK_TLS_FILES:
                read_private(folder / name)  # mode back to 0600 if it was opened up
            return folder
    _issue(folder, now)
    return folder
