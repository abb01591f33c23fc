"""Exclusive locks held across processes: two runs that reach the same night at once (two
launches, a backfill beside the nightly run) take turns, so the second finds what the first
published and reuses it instead of training or registering the night again.

``held`` locks a file, which the processes of one host share. ``advisory_held`` takes a Postgres
advisory lock instead, which every host that reaches the database shares: the service topology
locks what several hosts may do at once (moving the production alias) there.

The lock is ``filelock``'s (``flock`` on Unix: it goes with the process, so a killed holder frees
it). A waiter gives up after ``$LEAP_LOCK_WAIT_S`` with ``LockTimeout``, naming the lock, its file
and the wait: a holder that hangs fails the waiting run, which the next tick retries, instead of
holding every later run of the night forever."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from leap_pipeline.settings import FILE_LOCK_WAIT_ENV, environment

log = logging.getLogger("leap_pipeline.orchestration.locks")


class LockTimeout(TimeoutError):
    """Another process held a lock for longer than the wait allows."""


@contextmanager
def held(path: Path, what: str, wait_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) while the block runs. Waiting for
    another holder is logged once, and lasts at most ``wait_s`` seconds (by default
    ``$LEAP_LOCK_WAIT_S``), then raises ``LockTimeout``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    wait = environment().lock_wait_s if wait_s is None else wait_s
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("waiting up to %g s for another run that holds %s (%s)", wait, what, path)
        started = time.monotonic()
        try:
            lock.acquire(timeout=wait)
        except Timeout:
            raise LockTimeout(
                f"{what}: its lock {path} was still held by another run after {wait:g} s "
                f"of waiting (${FILE_LOCK_WAIT_ENV}); the run that holds it is hung or slower than "
                "the wait: end it, or raise the wait"
            ) from None
        log.warning("got %s after %.0f s", what, time.monotonic() - started)
    try:
        yield
    finally:
        lock.release()


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for ``name`` (Postgres advisory locks are keyed by a bigint)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextmanager
def advisory_held(url: str, name: str, what: str, wait_s: float | None = None) -> Iterator[None]:
    """Hold the Postgres advisory lock ``name`` in the database at ``url`` while the block
    runs: a session lock on a connection of its own, so a holder that dies (its connection
    closed) frees it. Waiting is logged once and lasts at most ``wait_s`` (by default
    ``$LEAP_LOCK_WAIT_S``), then ``LockTimeout``. The password comes from where libpq looks
    (``$PGPASSFILE``, ``$PGPASSWORD`` or the URL), never from this code."""
    import psycopg2

    wait = environment().lock_wait_s if wait_s is None else wait_s
    key = advisory_key(name)
    connection = psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://", 1))
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            started, logged = time.monotonic(), False
            while True:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                if cursor.fetchone()[0]:
                    break
                if time.monotonic() - started >= wait:
                    raise LockTimeout(
                        f"{what}: its advisory lock {name!r} was still held by another process "
                        f"after {wait:g} s of waiting (${FILE_LOCK_WAIT_ENV}); the holder is hung "
                        "or slower than the wait: end it, or raise the wait"
                    )
                if not logged:
                    log.warning("waiting up to %g s for another process that holds %s", wait, what)
                    logged = True
                time.sleep(0.2)
            try:
                yield
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s)", (key,))
    finally:
        connection.close()
