"""Exclusive locks on files, held across processes: two runs that reach the same night at once
(two launches, a backfill beside the nightly run) take turns, so the second finds what the first
published and reuses it instead of training or registering the night again.

The lock is ``filelock``'s (``flock`` on Unix: it goes with the process, so a killed holder frees
it). A waiter gives up after ``$LEAP_LOCK_WAIT_S`` with ``LockTimeout``, naming the lock, its file
and the wait: a holder that hangs fails the waiting run, which the next tick retries, instead of
holding every later run of the night forever."""

from __future__ import annotations

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
