"""How ``leap up`` keeps its servers: one ``leap up`` per data folder (``holding_folder``, a lock
that also records the servers, so the next ``leap up`` stops what a killed one left), and the
supervision that starts again a server that exits or stops answering its health probe
(``supervise``, ``Probe``), within a limit past which something is wrong that a restart does not
fix. The servers themselves, and what they run with, are ``up``'s.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from leap_pipeline.app.process_groups import (
    end_members,
    group_members,
    start_group,
    stop_groups,
)
from leap_pipeline.app.up_lock import live_up, up_lock, up_lock_holder

# how long the servers may take to answer at a start; a restarted one's probe counts no failure
# before it answered or this long has passed
READY_TIMEOUT_S = 180.0
# a server that exits is started again, as a service manager would, unless it exited this many
# times within the window: then something is wrong that a restart does not fix, and all stop
MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0
# a server that hangs (answers nothing, exits never) is found by its health probe, every
# PROBE_INTERVAL_S, each try given PROBE_TIMEOUT_S; PROBE_FAILURES failures in a row restart it
# (counted with the exits above). A 30 s outage at most before the restart: MLflow's clients
# retry for longer, Dagster's storage reconnects
PROBE_INTERVAL_S = 10.0
PROBE_TIMEOUT_S = 5.0
PROBE_FAILURES = 3
# a server is started again only once its port is free: a restart into a held port fails to
# bind (counted as a failure, with the holder named), never "exits with code 0" unexplained
PORT_WAIT_S = 10.0
# how often supervision looks at its servers: an exit is seen within this, and a probe's
# interval is at least this
LOOK_EVERY_S = 0.5
# the servers whose group outlives them: the daemon's run workers finish their nights (the rest
# run no one's work, and a child left behind holds the server's port)
KEEP_GROUP_ON_EXIT = ("dagster-daemon",)


def end_group(pgid: int, log: Callable, what: str) -> int:
    """End every process left in group ``pgid``, whether or not its leader lives (a killed
    MLflow server's uvicorn child holds its port after it): SIGTERM, then SIGKILL after
    ``STOP_TIMEOUT_S``; returns how many there were."""
    members = group_members(pgid, time.time())
    if not members:
        return 0
    log(f"stopping {len(members)} process(es) left in the group of {what} (group {pgid})")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    end_members(members)
    return len(members)


def port_holder(port: int) -> str | None:
    """Who listens on loopback ``port`` (``pid N (name)``, or ``another user's process``), or
    None when it is free to bind."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            return None
        except OSError:
            pass
    with contextlib.suppress(psutil.Error):
        for connection in psutil.net_connections("tcp"):
            if connection.laddr and connection.laddr.port == port and connection.pid:
                with contextlib.suppress(psutil.Error):
                    return f"pid {connection.pid} ({psutil.Process(connection.pid).name()})"
    return "another user's process"


def listens(port: int) -> bool:
    """Whether a socket listens on ``port``, read from the kernel's table, not by connecting: a
    bare connection to the TLS scheduler made it warn of a failed handshake at every start."""
    with contextlib.suppress(psutil.Error):
        return any(
            c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
            for c in psutil.net_connections("tcp")
        )
    return False


def wait_for_port(port: int, timeout_s: float | None = None) -> str | None:
    """Wait up to ``timeout_s`` (default ``PORT_WAIT_S``) for ``port`` to be free; None once
    it is, else its holder."""
    deadline = time.monotonic() + (PORT_WAIT_S if timeout_s is None else timeout_s)
    while (holder := port_holder(port)) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    return holder


def stop_retired(groups: list[tuple[int, float]], log: Callable) -> None:
    """End what is left of the groups of servers that exited and were started again (their
    run workers, their code servers): SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``. Only on a
    stop of the whole service, never on a restart: a restart ends only what it restarts."""
    for pgid, retired_at in groups:
        members = group_members(pgid, retired_at)
        if not members:
            continue
        log(
            f"stopping {len(members)} process(es) left by a server that was started again "
            f"(group {pgid})"
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        end_members(members)


def _stop_leftovers(
    servers: dict, log: Callable, retired: list | None = None, recorded_at: float | None = None
) -> None:
    """Stop the servers a ``leap up`` that was killed (SIGKILL, a crash) left running: each
    recorded group whose leader is still the process recorded (same start time), and what is
    left of the groups of servers it had started again."""
    stop_retired([(int(pgid), float(at)) for pgid, at in retired or []], log)
    for name, (pid, started) in servers.items():
        # the group, whether or not its leader lives: a child holding a port outlives it. It is
        # the recorded group only if a member started between the leader's start and the last
        # write of the record (``recorded_at``): that member lived while the killed leap up
        # did, and a group id is never reused while a member of it lives. A group with no such
        # member is another one that took the id since (after a reboot, say): left alone
        members = group_members(pid, time.time())
        last = recorded_at if recorded_at is not None else time.time()
        if not any(_started_between(p, started, last) for p in members):
            continue
        log(
            f"stopping the {name} server a killed leap up left running (group {pid}: "
            f"{len(members)} process(es))"
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        end_members(members)


def _started_between(process: psutil.Process, first: float, last: float) -> bool:
    with contextlib.suppress(psutil.Error):
        return first - 0.01 <= process.create_time() <= last + 0.01
    return False


@contextlib.contextmanager
def holding_folder(data: Path, log: Callable = print) -> Iterator[Callable[[dict], None]]:
    """Hold ``locks/up.lock`` in ``data`` (an ``flock``: a killed holder frees it): a second
    ``leap up`` on the folder fails, naming the first. The file records the holder and its
    servers (``record(processes)``): the next ``leap up`` after a killed one stops those first."""
    path = up_lock(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        handle.seek(0)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = up_lock_holder(handle.read())
            if live_up(holder) is None:  # no live leap up named
                raise ValueError(
                    f"{path} is held: leap ui runs on {data} (stop it first: one scheduler per "
                    "folder), a backup runs, or another leap up is starting"
                ) from None
            raise ValueError(
                f"leap up already runs on {data} (pid {holder.get('pid', '?')}, since "
                f"{holder.get('since', '?')}; lock {path}): use that one, or stop it first "
                "(Ctrl-C in its terminal, or kill -TERM its pid)"
            ) from None
        recorded_at = os.fstat(handle.fileno()).st_mtime  # the killed leap up's last record
        left = up_lock_holder(handle.read())
        _stop_leftovers(left.get("servers", {}), log, left.get("retired"), recorded_at)
        since = dt.datetime.now().isoformat(timespec="seconds")

        def record(processes: dict[str, subprocess.Popen], retired: list | None = None) -> None:
            servers = {}
            for name, process in processes.items():
                with contextlib.suppress(psutil.NoSuchProcess):  # exited at once: none to stop
                    servers[name] = [process.pid, psutil.Process(process.pid).create_time()]
            handle.seek(0)
            handle.truncate()
            holder = {"pid": os.getpid(), "since": since, "servers": servers}
            json.dump({**holder, "retired": retired or []}, handle)
            handle.flush()

        record({})
        try:
            yield record
        finally:
            handle.seek(0)
            handle.truncate()  # stopped cleanly: nothing left to stop


@dataclass
class Probe:
    """The health probe of a server that can hang rather than exit: ``check`` answers whether
    it is healthy (bounded by its own timeout), asked every ``interval_s``. ``PROBE_FAILURES``
    failures in a row restart the server: ``restart`` if given (Postgres, which is no process of
    ``processes``), else its process in ``processes`` under the probe's name, ended with its
    group and started again. Failures count only once the server has answered since it
    (re)started, or ``grace_s`` after: a server still starting is not hung. With ``gone``, a
    failure while the server's process is gone restarts it at once."""

    check: Callable[[], bool]
    restart: Callable[[], None] | None = None
    # whether the server's process is gone (a killed postmaster): then one failed check is
    # enough, a dead server is not slow; None: only the check counts
    gone: Callable[[], bool] | None = None
    interval_s: float = PROBE_INTERVAL_S
    grace_s: float = READY_TIMEOUT_S
    failures: int = 0
    armed: bool = False
    started: float = field(default_factory=time.monotonic)
    due: float = 0.0

    def reset(self, now: float) -> None:
        """A (re)start: nothing counted, not armed until it answers (or ``grace_s`` passes)."""
        self.failures, self.armed, self.started, self.due = 0, False, now, now + self.interval_s

    def failed(self, now: float) -> bool:
        """Probe now if due; True when the server has failed ``PROBE_FAILURES`` times in a row
        (counted once armed)."""
        if now < self.due:
            return False
        healthy = self.check()
        self.due = time.monotonic() + self.interval_s
        if healthy:
            self.failures, self.armed = 0, True
            return False
        if self.armed or now - self.started >= self.grace_s:
            self.armed = True
            self.failures += 1
            if self.gone is not None and self.gone():
                return True  # dead, not hung: restarted at once
        return self.failures >= PROBE_FAILURES


def _count_restart(exits: list[float], now: float) -> list[float]:
    return [t for t in exits if now - t < RESTART_WINDOW_S] + [now]


def supervise(
    processes: dict[str, subprocess.Popen],
    commands: dict[str, tuple[list[str], dict[str, str]]],
    record: Callable,
    log: Callable = print,
    retired: list[tuple[int, float]] | None = None,
    probes: dict[str, Probe] | None = None,
    ports: dict[str, int] | None = None,
) -> int:
    """Until Ctrl-C: start again each server that exits (the MLflow server killed, the daemon
    crashed), and each whose health probe (``probes``, by name) fails ``PROBE_FAILURES`` times
    in a row (MLflow hung, Postgres stopped or hung), saying so; after ``MAX_RESTARTS``
    restarts of one server within ``RESTART_WINDOW_S``, stop everything (1). A restart after an
    exit ends only the process it restarts, which has exited already: what it started stays
    (the daemon's code server, and the run workers that server started, which finish their
    nights, the code server exiting after its last run), its group remembered in ``retired`` so
    that stopping the service ends it too. Every other server's group goes with it, an exit or
    a hang alike (MLflow's uvicorn child holds its port after a SIGKILL of its main process; it
    runs no one's work), and it starts again once its port (``ports``, by name) is free: a port
    still held after ``PORT_WAIT_S`` counts as a failure, naming the holder. Postgres is
    stopped and started by its ``restart``. Work in flight rides the gap: MLflow's client
    retries its requests, Dagster's run workers and storage reconnect."""
    retired = retired if retired is not None else []
    probes = probes or {}
    ports = ports or {}
    exits: dict[str, list[float]] = {name: [] for name in [*processes, *probes]}

    def too_many(name: str, what: str, last: str) -> bool:
        exits[name] = _count_restart(exits[name], time.monotonic())
        if len(exits[name]) > MAX_RESTARTS:
            log(
                f"the {name} server {what} {len(exits[name])} times within "
                f"{RESTART_WINDOW_S:.0f} s ({last}): stopping"
            )
            return True
        return False

    while True:
        for name, process in list(processes.items()):
            if process.poll() is None:
                continue
            if name not in KEEP_GROUP_ON_EXIT:  # the daemon's run workers finish their nights
                end_group(process.pid, log, f"the {name} server that exited")
            held = wait_for_port(ports[name]) if name in ports else None
            why = f"code {process.returncode}"
            if held is not None:
                why += f"; its port {ports[name]} is still held by {held}"
            if too_many(name, "exited", f"last {why}"):
                return 1
            if name in KEEP_GROUP_ON_EXIT:  # its group outlives it, remembered for the stop
                retired.append((process.pid, time.time()))
            if held is not None:  # a start would fail to bind: a failure, tried again
                log(f"the {name} server exited ({why}): not started into a held port")
                continue
            argv, env = commands[name]
            processes[name] = start_group(argv, env)
            record(processes, retired)
            if name in probes:
                probes[name].reset(time.monotonic())
            log(f"the {name} server exited with {why}: started again (pid {processes[name].pid})")
        for name, probe in probes.items():
            if not probe.failed(time.monotonic()):
                continue
            if too_many(name, "needed a restart", "last: its health probe failed"):
                return 1
            log(
                f"the {name} server failed its health probe {PROBE_FAILURES} times in a row "
                f"(every {probe.interval_s:.0f} s): restarting it"
            )
            if probe.restart is not None:
                probe.restart()
            elif name in processes:
                stop_groups({name: processes[name]})  # SIGTERM, then SIGKILL: hung, after all
                end_group(processes[name].pid, log, f"the hung {name} server")
                if name in ports and (held := wait_for_port(ports[name])) is not None:
                    log(f"the {name} server's port {ports[name]} is still held by {held}")
                argv, env = commands[name]
                processes[name] = start_group(argv, env)
                record(processes, retired)
            probe.reset(time.monotonic())
            log(
                f"the {name} server started again"
                + (f" (pid {processes[name].pid})" if name in processes else "")
            )
        time.sleep(LOOK_EVERY_S)
