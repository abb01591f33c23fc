"""``leap up``'s lock on a data folder: one ``leap up`` per folder, and who may share it.

An ``flock`` on ``locks/up.lock`` (a killed holder frees it): ``leap up`` takes it whole and
keeps its record in it (pid, since when, its servers); ``leap ui`` and a backup of a stopped
Postgres take it shared, so neither runs beside a ``leap up`` on the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil


def up_lock(data: Path) -> Path:
    """``leap up``'s lock on ``data`` (an ``flock``: a killed holder frees it), which ``leap up``
    takes whole and ``leap ui`` and a backup of a stopped Postgres take shared."""
    return data / "locks" / "up.lock"


def up_lock_holder(text: str) -> dict:
    """The record a ``leap up`` keeps in its lock (its pid, since when, its servers), or ``{}``
    for an empty one (a clean stop cleared it) or one written by another release."""
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def live_up(holder: dict) -> int | None:
    """The pid of the ``leap up`` a lock's record names, if that process is alive."""
    pid = holder.get("pid")
    return pid if isinstance(pid, int) and psutil.pid_exists(pid) else None


@contextlib.contextmanager
def sharing_up_lock(data: Path, refused: Callable[[dict], Exception]) -> Iterator[None]:
    """Hold ``up_lock(data)`` shared while the block runs; held whole by another (a ``leap up``
    running, starting or stopping), raise ``refused(holder)``, given the lock's record."""
    path = up_lock(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise refused(up_lock_holder(handle.read())) from None
        yield


def sharing_folder(data: Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``leap up``'s lock on ``data`` shared while the UIs run: a ``leap up`` on the
    folder, which takes it whole, is refused meanwhile, and the UIs are refused on a folder
    ``leap up`` serves (naming its pid), whose webserver is that folder's UI: this one's daemon
    would be a second scheduler on another instance and registry."""

    def refused(holder: dict) -> ValueError:
        pid = live_up(holder)
        who = (
            f"leap up serves this folder (pid {pid}, since {holder.get('since', '?')}); "
            "open the Dagster and MLflow UIs it printed"
            if pid is not None
            else f"{up_lock(data)} is held: leap up is starting or stopping"
        )
        return ValueError(f"--data {data}: {who}")

    return sharing_up_lock(data, refused)
