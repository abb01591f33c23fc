"""Servers as process groups: each started in a group of its own, watched, and stopped whole.

``leap ui`` and ``leap up`` start every server with ``start_group`` (a new session: the
terminal's Ctrl-C reaches the command only, which then stops the groups in order with
``stop_groups``, SIGTERM then SIGKILL, children included). ``interrupted_by_signals`` turns
SIGINT and SIGTERM into ``KeyboardInterrupt`` while they run, and ``signals_ignored`` keeps a
second Ctrl-C from cutting a stop short. ``free_port`` and ``answers`` are the probes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

PROJECT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 20.0


def free_port() -> int:
    """A port no one listens on now, on the loopback address (tests, screenshots)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether ``url`` answers 200 within ``timeout`` seconds: a server is up."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def start_group(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start a server in a process group of its own (a new session: the terminal's Ctrl-C
    reaches this process only, which stops the groups in order)."""
    return subprocess.Popen(argv, env=env, cwd=PROJECT, start_new_session=True)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(process.pid, sig)


def group_members(pgid: int, before: float) -> list[psutil.Process]:
    """The processes of the process group ``pgid`` that started no later than ``before`` (a
    group id is one of its members' process ids: a process started since cannot belong to the
    group that was there)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(process.pid) == pgid and process.create_time() <= before:
                found.append(process)
    return found


def live(process: psutil.Process) -> bool:
    """Whether ``process`` still runs: a zombie has ended and holds nothing (no port, no
    file), only its entry waits for its parent, or a container's init, to reap it."""
    with contextlib.suppress(psutil.Error):  # is_running: the same process, not a pid reused
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    return False


def end_members(members: list[psutil.Process], timeout_s: float | None = None) -> None:
    """After a SIGTERM to their group: wait until no process of ``members`` runs, and SIGKILL
    those still running after ``timeout_s`` (default ``STOP_TIMEOUT_S``; then a moment for the
    kernel to end them). A zombie counts as ended: ``psutil.wait_procs`` waited the whole
    timeout for one whose reaper was slow (an orphan of an exited server, reaped by a
    container's init when it gets to it)."""

    def running_until(deadline: float) -> list[psutil.Process]:
        while (left := [p for p in members if live(p)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left

    wait_s = STOP_TIMEOUT_S if timeout_s is None else timeout_s
    for process in running_until(time.monotonic() + wait_s):
        with contextlib.suppress(psutil.Error):
            process.kill()  # cannot be ignored
    running_until(time.monotonic() + 5.0)
    psutil.wait_procs(members, timeout=0)  # reaps those that are this process's children


def _left_in(pgids: list[int]) -> list[int]:
    """The groups among ``pgids`` that still hold a live process (a zombie holds nothing)."""
    return [g for g in pgids if any(live(p) for p in group_members(g, time.time()))]


def stop_groups(processes: dict[str, subprocess.Popen]) -> None:
    """SIGTERM to each server's whole group, then wait for every process in it, not only its
    leader (a Dask worker's forked process outlived its ``dask worker`` by a moment in CI,
    after the stop had returned), and SIGKILL to any group that outlives ``STOP_TIMEOUT_S``."""
    for process in processes.values():
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait()
    groups = [process.pid for process in processes.values()]
    while (left := _left_in(groups)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pgid in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    end = time.monotonic() + 5.0  # SIGKILL is not refused: a moment for the kernel to end them
    while _left_in(left) and time.monotonic() < end:
        time.sleep(0.1)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGINT and SIGTERM stop the servers alike


@contextlib.contextmanager
def interrupted_by_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the block (both explicitly: a process
    started in the background of a script inherits SIGINT ignored); the handlers are restored."""
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored in the block, then restored: a second Ctrl-C while the servers
    stop must not cut the stop short, leaving servers (and ``leap up``'s Postgres) running. The
    stop is bounded anyway: each group gets SIGKILL after ``STOP_TIMEOUT_S``."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def watch(processes: dict[str, subprocess.Popen], log: Callable = print) -> int:
    """Wait until one of the servers exits (1, having said which); Ctrl-C raises
    ``KeyboardInterrupt`` out of the wait."""
    while True:
        for name, process in processes.items():
            if process.poll() is not None:
                log(f"the {name} server exited with code {process.returncode}: stopping")
                return 1
        time.sleep(0.5)
