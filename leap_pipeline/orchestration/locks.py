"""Exclusive locks on files, held across processes: two runs that reach the same night at once
(two launches, a backfill beside the nightly run) take turns, so the second finds what the first
published and reuses it instead of training or registering the night again."""

from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("leap_pipeline.orchestration.locks")


@contextmanager
def held(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) while the block runs; waiting for
    another holder is logged once. The lock goes with the process: a killed holder frees it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("waiting for another run that holds %s (%s)", what, path)
            started = time.monotonic()
            fcntl.flock(handle, fcntl.LOCK_EX)
            log.warning("got %s after %.0f s", what, time.monotonic() - started)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
