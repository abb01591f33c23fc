"""The bearer tokens ``leap serve`` accepts: ``LEAP_SERVE_TOKEN``'s one, and a file's several.

A token file holds one token a line; blank lines and lines starting with ``#`` are skipped. Every
token in it is valid at once, so a rotation adds the new token, moves the callers over, then
drops the old one, without a restart: the file is re-read when its modification time, size or
inode changes (one ``stat`` a request, about a microsecond). A Kubernetes Secret volume swaps its
files that way, and a rename over the old file (write beside it, then ``mv``) does too.

It fails closed: a file that cannot be read, holds no token, or that others may read (or its
group write) at start stops the service,
naming the file; one that turns unreadable, empty or bad later leaves only ``LEAP_SERVE_TOKEN``
valid (if set), logged once, until the file is good again. A token is never logged or echoed in
an error, only its line number.

Each token is kept as its SHA-256 digest and a request's token is hashed once and compared with
every one of them by ``hmac.compare_digest``, with no early exit: the time taken says neither
how long a valid token is, nor how much of one a guess got right, nor which one matched.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os

from .config import TOKEN_ENV, TOKEN_FILE_ENV

log = logging.getLogger("leap_serving")

UNSAFE_TOKEN_BITS = 0o037  # group write or execute, any access for others


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def read_token_file(path: str) -> list[str]:
    """The tokens in ``path``; ``ValueError`` naming the file (and the line, never the token)
    when it cannot be read, a line is not a token, or it holds none."""
    try:
        with open(path, encoding="utf-8") as file:
            mode = os.fstat(file.fileno()).st_mode & 0o777
            # a secret others can read, or its group rewrite, is no longer the owner's; a
            # group may read it (Kubernetes gives a 0400 Secret file 0440 under an fsGroup)
            if mode & UNSAFE_TOKEN_BITS:
                raise ValueError(
                    f"{TOKEN_FILE_ENV}={path!r}: its mode {mode:04o} lets others read it or "
                    "its group write it: chmod 600 it (640 for a group the service shares)"
                )
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"{TOKEN_FILE_ENV}={path!r}: cannot read it: {reason}") from None
    tokens = []
    for number, line in enumerate(text.splitlines(), start=1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        if not token.isprintable() or any(c.isspace() for c in token):
            raise ValueError(
                f"{TOKEN_FILE_ENV}={path!r}: line {number} is not a token (one token a line, "
                "printable, without spaces; # starts a comment line)"
            )
        tokens.append(token)
    if not tokens:
        raise ValueError(f"{TOKEN_FILE_ENV}={path!r}: holds no token (one token a line)")
    return tokens


class Tokens:
    """The tokens a listener accepts: ``token`` (``LEAP_SERVE_TOKEN``) and the lines of
    ``path`` (``LEAP_SERVE_TOKEN_FILE``), the file re-read when it changes.

    Parameters
    ----------
    token : the one static token, or None.
    path : the token file, or None; read here, so a bad file stops the service at start.
    """

    def __init__(self, token: str | None = None, path: str | None = None) -> None:
        if token is None and path is None:
            raise ValueError(f"no token: set {TOKEN_ENV} or {TOKEN_FILE_ENV}")
        self.path = path
        self._static = [_digest(token.encode())] if token is not None else []
        self._from_file: list[bytes] = []
        self._seen: tuple[int, int, int] | None = None
        self._failing = False
        if path is not None:
            self._seen = self._stamp()
            self._from_file = [_digest(t.encode()) for t in read_token_file(path)]

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return found.st_mtime_ns, found.st_size, found.st_ino

    def refresh(self) -> None:
        """Re-read the file if it changed since the last read; a bad file leaves no file
        token valid (fails closed), logged once per change."""
        if self.path is None:
            return
        stamp = self._stamp()
        if stamp == self._seen:
            return
        self._seen = stamp
        try:
            tokens = read_token_file(self.path)
        except ValueError as exc:
            self._from_file = []
            if not self._failing:
                log.error(
                    "leap_serving: %s; only %s (if set) is accepted until it is fixed",
                    exc,
                    TOKEN_ENV,
                )
            self._failing = True
            return
        self._from_file = [_digest(t.encode()) for t in tokens]
        if self._failing:
            log.warning(
                "leap_serving: %s=%r read again: %d tokens", TOKEN_FILE_ENV, self.path, len(tokens)
            )
        self._failing = False

    def __len__(self) -> int:
        """How many tokens are valid now (the file as last read)."""
        return len(self._static) + len(self._from_file)

    def allows(self, given: bytes) -> bool:
        """Whether ``given`` is one of the tokens, the file re-read first if it changed."""
        self.refresh()
        digest = _digest(given)
        found = False
        for expected in (*self._static, *self._from_file):
            found |= hmac.compare_digest(digest, expected)
        return found
