"""How ``leap up`` keeps its servers (``app/supervision.py``), without the servers: one ``leap
up`` per folder and what a killed one left stopped, leader or not; a server's exit or hang ends
its group (the daemon's excepted: its run workers finish their nights) and it starts again once
its port is free; health probes count failures in a row."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from leap_pipeline.app.process_groups import free_port, start_group, stop_groups
from leap_pipeline.app.supervision import (
    MAX_RESTARTS,
    PROBE_FAILURES,
    Probe,
    holding_folder,
    port_holder,
    stop_retired,
    supervise,
)

# a server that binds its port, then forks a child that holds the same listening socket (as
# MLflow's CLI leaves its uvicorn worker); a start into a held port fails to bind and exits 0, as
# MLflow's did ("exited with code 0"); with the stop file there it exits at once
_SERVER = """
import os, socket, sys, time
port, log, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if os.path.exists(stop):
    sys.exit(0)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    listener.bind(("127.0.0.1", port))
except OSError:
    print("bind failed", file=open(log, "a"), flush=True)
    sys.exit(0)
listener.listen()
if os.fork() == 0:
    time.sleep(600)
    os._exit(0)
print(f"serving {os.getpid()}", file=open(log, "a"), flush=True)
time.sleep(600)
"""


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(autouse=True)
def _supervision_looks_often(monkeypatch):
    """Supervision looks at its servers every 20 ms here, not every 0.5 s: the restart limit's
    six exits and the hung server's eighteen failed probes are each one look apart."""
    from leap_pipeline.app import supervision

    monkeypatch.setattr(supervision, "LOOK_EVERY_S", 0.02)


def _wait(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_killed_servers_child_is_ended_and_it_starts_again_once_its_port_is_free(tmp_path):
    """SIGKILL of a server's main process left its child holding the port: every restart
    failed to bind, was logged as "exited with code 0", and six of them stopped the service.
    Now the group goes with its server, and the restart waits for the port and binds."""
    port, log, stop = free_port(), tmp_path / "log", tmp_path / "stop"
    commands = {
        "mlflow": ([sys.executable, "-c", _SERVER, str(port), str(log), str(stop)], {**os.environ})
    }
    processes = {"mlflow": start_group(*commands["mlflow"])}
    said: list[str] = []
    outcome: list[int] = []
    supervisor = threading.Thread(
        target=lambda: outcome.append(
            supervise(processes, commands, lambda *a: None, said.append, [], {}, {"mlflow": port})
        ),
        daemon=True,
    )
    supervisor.start()
    try:
        _wait(lambda: len(_lines(log)) == 1)
        first = int(_lines(log)[0].split()[1])
        os.kill(first, signal.SIGKILL)  # the main process only: its child keeps the port
        _wait(lambda: len(_lines(log)) == 2)
        assert _lines(log)[1].startswith("serving") and int(_lines(log)[1].split()[1]) != first
        assert any(
            "stopping 1 process(es) left in the group of the mlflow server" in line for line in said
        )
        stop.touch()  # from now on every start exits at once: the restart limit ends it
        os.kill(int(_lines(log)[1].split()[1]), signal.SIGKILL)
        supervisor.join(60)
        assert outcome == [1]
        assert "bind failed" not in _lines(log)
    finally:
        stop.touch()
        stop_groups(processes)
    _wait(lambda: port_holder(port) is None)  # no child of any incarnation holds it


def test_a_restart_into_a_held_port_counts_as_a_failure_naming_the_holder(tmp_path, monkeypatch):
    """A port another process holds (not the server's group) is waited for, then the exit
    counts as a failure with the holder named, and no start is made into it."""
    import socket

    from leap_pipeline.app import supervision

    monkeypatch.setattr(supervision, "PORT_WAIT_S", 0.2)
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    commands = {"mlflow": ([sys.executable, "-c", "import sys; sys.exit(0)"], {**os.environ})}
    processes = {"mlflow": start_group(*commands["mlflow"])}
    said: list[str] = []
    try:
        code = supervise(
            processes, commands, lambda *a: None, said.append, [], {}, {"mlflow": port}
        )
    finally:
        holder.close()
    assert code == 1
    assert f"its port {port} is still held by pid {os.getpid()}" in said[-1]
    assert not [line for line in said if "started again" in line]


def test_a_killed_leap_ups_leftover_group_is_stopped_though_its_leader_is_gone(tmp_path):
    """leap up killed, then its server's main process: the child holding the port lived on,
    and the next leap up, which stopped a group only while its leader lived, left it."""
    port, log, stop = free_port(), tmp_path / "log", tmp_path / "stop"
    with holding_folder(tmp_path, log=lambda line: None) as record:
        server = start_group(
            [sys.executable, "-c", _SERVER, str(port), str(log), str(stop)], {**os.environ}
        )
        _wait(lambda: len(_lines(log)) == 1)
        record({"mlflow": server})
        lock = (tmp_path / "locks" / "up.lock").read_text()
    (tmp_path / "locks" / "up.lock").write_text(lock)  # what a SIGKILL of leap up leaves
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    assert port_holder(port) is not None  # the child holds it
    said: list[str] = []
    with holding_folder(tmp_path, log=said.append):
        _wait(lambda: port_holder(port) is None, 10)
    assert said == [
        f"stopping the mlflow server a killed leap up left running (group {server.pid}: "
        "1 process(es))"
    ]


def test_one_leap_up_per_folder_and_the_servers_a_killed_one_left_are_stopped(tmp_path):
    with holding_folder(tmp_path, log=lambda line: None) as record:
        with (
            pytest.raises(
                ValueError, match=rf"leap up already runs on {tmp_path} \(pid {os.getpid()}"
            ),
            holding_folder(tmp_path),
        ):
            pass
        # a server it started, in a group of its own, recorded; then this leap up is "killed"
        server = subprocess.Popen(["sleep", "600"], start_new_session=True)
        record({"sleeper": server})
        lock = (tmp_path / "locks" / "up.lock").read_text()
    (tmp_path / "locks" / "up.lock").write_text(lock)  # what a SIGKILL leaves: the record
    said = []
    with holding_folder(tmp_path, log=said.append):
        assert not psutil.pid_exists(server.pid)  # stopped (and reaped) before anything else
    assert said == [
        f"stopping the sleeper server a killed leap up left running (group {server.pid}: "
        "1 process(es))"
    ]
    assert (tmp_path / "locks" / "up.lock").read_text() == ""  # stopped cleanly: nothing to stop


def test_a_restart_of_the_daemon_ends_only_what_it_restarts_and_a_stop_ends_the_rest(tmp_path):
    """The daemon, which started a child (a run worker) and then exited, is started again
    without touching that child, which carries on mid-night; the service's stop ends it. The server
    here exits at once every time, so supervision gives up after ``MAX_RESTARTS``."""
    children = tmp_path / "children"
    script = (
        "import subprocess, sys; "
        "child = subprocess.Popen(['sleep', '600']); "
        f"open({str(children)!r}, 'a').write(f'{{child.pid}}\\n'); sys.exit(3)"
    )
    commands = {"dagster-daemon": ([sys.executable, "-c", script], {**os.environ})}
    from leap_pipeline.app.process_groups import start_group

    processes = {"dagster-daemon": start_group(*commands["dagster-daemon"])}
    retired, said, recorded = [], [], []
    code = supervise(processes, commands, lambda *a: recorded.append(a), said.append, retired)
    assert code == 1 and said[-1].startswith(
        f"the dagster-daemon server exited {MAX_RESTARTS + 1} times"
    )
    pids = [int(line) for line in children.read_text().split()]
    assert len(pids) == MAX_RESTARTS + 1 and len(retired) == MAX_RESTARTS
    # every restart left its predecessor's child running (the last one's group is not retired)
    assert all(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    assert recorded[-1][1] == retired
    stop_retired(retired, said.append)
    from leap_pipeline.app.process_groups import stop_groups

    stop_groups(processes)  # the last one's group: SIGTERM, not waited on past its leader
    alive = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
    _wait(lambda: all(_ended(p) for p in alive), 10)


def _ended(process: psutil.Process) -> bool:
    """Gone, or a zombie (exited; its parent, not this test, reaps it)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_hung_server_is_restarted_by_its_health_probe_within_the_restart_limit(tmp_path):
    """A server that never answers its probe (a process alive, its check failing) is ended with
    its group and started again after ``PROBE_FAILURES`` failures, until ``MAX_RESTARTS`` of them
    stop the service; a probe with a restart of its own (Postgres) calls it instead."""
    from leap_pipeline.app.process_groups import start_group, stop_groups

    commands = {"mlflow": (["sleep", "600"], {**os.environ})}
    processes = {"mlflow": start_group(*commands["mlflow"])}
    first = processes["mlflow"]
    asked, restarted, said = [], [], []

    def check() -> bool:
        asked.append(time.monotonic())
        return False

    probes = {
        "mlflow": Probe(check, interval_s=0.01, grace_s=0),
        "postgres": Probe(
            lambda: len(restarted) >= 2,
            restart=lambda: restarted.append(1),
            interval_s=0.01,
            grace_s=0,
        ),
    }
    try:
        code = supervise(processes, commands, lambda *a: None, said.append, [], probes)
    finally:
        stop_groups(processes)
    assert code == 1 and said[-1].startswith(
        f"the mlflow server needed a restart {MAX_RESTARTS + 1} times"
    )
    assert len(asked) == PROBE_FAILURES * (MAX_RESTARTS + 1)  # every failure counted, in a row
    assert first.poll() is not None  # the hung one was ended, not left beside the new one
    restarts = [line for line in said if line.startswith("the mlflow server started again")]
    assert len(restarts) == MAX_RESTARTS
    # Postgres's restart is its own; it answered after two, so it was restarted twice only
    assert restarted == [1, 1]
    assert said.count("the postgres server started again") == 2


def test_a_probe_counts_failures_in_a_row_once_the_server_answered_or_its_grace_ended():
    answers_ = iter([False, False, True, False, False, True])
    probe = Probe(lambda: next(answers_), interval_s=0, grace_s=3600)

    def failed() -> bool:
        return probe.failed(time.monotonic())

    assert not failed() and not failed() and probe.failures == 0  # still starting: not counted
    assert not failed() and probe.armed  # answered: from now on failures count
    assert not failed() and not failed() and probe.failures == 2
    assert not failed() and probe.failures == 0  # one answer resets the count
    late = Probe(lambda: False, interval_s=0, grace_s=0)  # its grace over: every failure counts
    tries = [late.failed(time.monotonic()) for _ in range(PROBE_FAILURES)]
    assert tries == [False] * (PROBE_FAILURES - 1) + [True]
    asked = []
    slow = Probe(lambda: asked.append(1) or False, interval_s=3600, grace_s=0)
    assert not slow.failed(time.monotonic()) and not slow.failed(time.monotonic())
    assert asked == [1] and slow.failures == 1  # asked once: the next is due in an hour


def test_a_probe_of_a_server_whose_process_is_gone_restarts_it_at_once():
    """A killed postmaster is dead, not slow: one failed check restarts it, not three (30 s
    of a fleet without its database); a live server that fails its check still needs three."""
    dead = Probe(lambda: False, interval_s=0, grace_s=0, gone=lambda: True)
    assert dead.failed(time.monotonic())
    alive = Probe(lambda: False, interval_s=0, grace_s=0, gone=lambda: False)
    tries = [alive.failed(time.monotonic()) for _ in range(PROBE_FAILURES)]
    assert tries == [False] * (PROBE_FAILURES - 1) + [True]
