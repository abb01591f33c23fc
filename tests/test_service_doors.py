"""Doors a local user or a crafted request could open into the service, each shut before
anything connects: a run config naming a plain-TCP (or local) Dask scheduler where the service's
TLS cluster is set up, Dask's HTTP routes, a token file others can read, a token sent in clear
text to another host."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from leap_pipeline.modeling.parallel import check_scheduler, expert_backend
from leap_serving.http.client import check_token_transport, rank_remote
from leap_serving.http.tokens import Tokens, read_token_file


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:{port}", "127.0.0.1:{port}", "local"])
def test_a_run_naming_a_plain_tcp_scheduler_is_refused_before_it_connects(
    tmp_path, monkeypatch, address
):
    """With LEAP_DASK_TLS_DIR set (leap up --dask), a run config's `dask_scheduler:
    tcp://...` made the run's worker connect and start Dask's pickle handshake in the clear.
    Now the run fails as its training resource is set up, and nothing reaches the listener."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    address = address.format(port=listener.getsockname()[1])
    monkeypatch.setenv("LEAP_DASK_TLS_DIR", str(tmp_path))
    try:
        with pytest.raises(ValueError, match=rf"dask_scheduler={address!r} is refused"):
            check_scheduler(address)
        with pytest.raises(ValueError, match="is refused"), expert_backend(address):
            pass
        from leap_pipeline.orchestration.resources import TrainingResource

        with pytest.raises(ValueError, match="is refused"):
            TrainingResource(dask_scheduler=address).setup_for_execution(None)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    finally:
        listener.close()
    check_scheduler("tls://127.0.0.1:8786")  # the service's own kind: allowed
    check_scheduler("")  # in process
    monkeypatch.delenv("LEAP_DASK_TLS_DIR")
    check_scheduler(address)  # no TLS cluster set up: a user's own cluster is theirs to name


def test_the_dask_cluster_serves_no_http_route():
    """leap up's Dask processes run with no HTTP route: /info, /json and /metrics told any
    local user the cluster's workers and tasks on a loopback port, without credentials."""
    from leap_pipeline.app.dask_servers import NO_DASK_HTTP

    read = (
        "import dask.config, distributed, json; print(json.dumps("
        "[dask.config.get('distributed.scheduler.http.routes'), "
        "dask.config.get('distributed.worker.http.routes')]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", read],
        capture_output=True,
        text=True,
        env={**os.environ, **NO_DASK_HTTP},
        check=True,
    )
    assert json.loads(done.stdout) == [[], []]


def test_a_token_file_others_can_read_is_refused_naming_its_mode(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("a-token-of-mine\n")
    for mode in (0o644, 0o604, 0o620, 0o660, 0o601):
        path.chmod(mode)
        with pytest.raises(ValueError, match=rf"mode {mode:04o} lets others read it"):
            Tokens(path=str(path))
        with pytest.raises(ValueError, match="chmod 600"):
            read_token_file(str(path))  # the client's --token-file alike
    for mode in (0o600, 0o400, 0o640, 0o440):  # a group may read (Kubernetes' fsGroup: 0440)
        path.chmod(mode)
        assert read_token_file(str(path)) == ["a-token-of-mine"]
        assert Tokens(path=str(path)).path == str(path)


def test_a_token_is_never_sent_in_clear_text_to_another_host():
    others = (
        "http://10.0.0.7:8765",
        "http://leap.example.com",
        "http://[2001:db8::1]:80",
        "http://127.attacker.example:8765",
        "http://localhost.attacker.example",
    )
    for server in others:
        with pytest.raises(ValueError, match="never sent in clear text"):
            check_token_transport(server + "/v1/rank")
        with pytest.raises(ValueError, match="never sent in clear text"):
            rank_remote(server, {}, ["A10G"], token="t")
    for server in (
        "http://127.0.0.1:8765",
        "http://localhost:1",
        "http://[::1]:8765",
        "https://leap.example.com",
    ):
        check_token_transport(server + "/v1/rank")


def test_leap_rank_on_a_leap_up_folder_never_reads_the_demos_leftover_registry(tmp_path):
    """A demo's SQLite registry left in a folder leap up now runs answered `leap rank --data`
    with its old version, silently; without the service's MLFLOW_TRACKING_URI it is refused,
    naming the variables to set."""

    data = tmp_path / "data"
    (data / "postgres").mkdir(parents=True)
    (data / "mlflow").mkdir()
    (data / "mlflow" / "mlflow.db").write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "LEAP_DATA")}
    for argv in (["rank", "--data", str(data)], ["model", "--data", str(data), "history"]):
        done = subprocess.run(
            [sys.executable, "-m", "leap_pipeline.app.cli", *argv],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 2, done.stderr
        assert "a leap up folder" in done.stderr and "MLFLOW_TRACKING_URI" in done.stderr


_READ_AS_NOBODY = """
import os, sys
os.setgid(65534)
os.setuid(65534)
found = []
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(1)
        found.append(path)
    except PermissionError:
        pass
print("\\n".join(found))
"""


def test_leap_ups_data_folder_is_its_owners_only(request):
    """342 files of a live leap up folder (the warehouse, the artifacts, records/, the compute
    logs) were readable by every local user. leap up runs under umask 0077 and takes group and
    other access off what is there at each start; only postgres/ keeps Postgres's own modes,
    and the folder keeps the traversal bit Postgres's own user needs to reach it."""
    from leap_pipeline.app.lockdown import SERVICE_UMASK, lock_down

    # not under pytest's temporary root, which is 0700: another uid could reach nothing there
    root = Path(tempfile.mkdtemp(prefix="leap-lockdown-"))
    root.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    data = root / "data"
    (data / "records" / "cascade_model").mkdir(parents=True)
    (data / "records" / "cascade_model" / "night.json").write_text("{}")
    (data / "leap.duckdb").write_bytes(b"warehouse")
    (data / "postgres").mkdir()
    (data / "postgres" / "PG_VERSION").write_text("15")
    for path in [data, *data.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (data / "postgres").chmod(0o700)
    (data / "link").symlink_to("leap.duckdb")
    night = data / "records" / "cascade_model" / "night.json"
    wanted = [data, data / "records", data / "leap.duckdb", night]

    def read_by_another_uid() -> list[str]:
        argv = [sys.executable, "-c", _READ_AS_NOBODY, *map(str, wanted)]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()

    if os.geteuid() == 0:  # before: another uid reads and lists all of it
        assert read_by_another_uid() == [str(p) for p in wanted]
    assert SERVICE_UMASK == 0o077
    group = os.getgid() + 1  # Postgres's own user's group (not root's)
    assert lock_down(data, data / "postgres", postgres_group=group) == 6
    modes = {
        p.relative_to(data).as_posix(): stat.S_IMODE(p.lstat().st_mode)
        for p in data.rglob("*")
        if not p.is_symlink()
    }
    assert modes == {
        "records": 0o700,
        "records/cascade_model": 0o700,
        "records/cascade_model/night.json": 0o600,
        "leap.duckdb": 0o600,
        "postgres": 0o700,
        "postgres/PG_VERSION": 0o644,
    }
    assert stat.S_IMODE(data.stat().st_mode) == 0o710 and data.stat().st_gid == group
    (data / "later.json").write_text("{}")  # a file another process creates later, 0644
    (data / "later.json").chmod(0o644)
    wanted.append(data / "later.json")
    if os.geteuid() == 0:  # after: it reads and lists nothing of the folder, later files too
        assert read_by_another_uid() == []
    assert lock_down(data, data / "postgres") == 2  # later.json, and 0710 -> 0700


def test_a_service_run_may_not_promote_or_land_another_source(monkeypatch, tmp_path):
    """Under leap up's Dagster (LEAP_SERVICE_RUNS, which it sets for its webserver and daemon),
    any local user who reaches the webserver can launch a run: its config could set `promote:
    true` (or `run_kind: nightly`) and move the alias as the service's account, past MLflow's
    auth, or a `files:` source and have the service read any folder. Such a run fails as it
    starts, naming the field; outside the service (the owner's own commands) both stay open."""
    from leap_pipeline.orchestration.resources import SourceResource, TrainingResource

    calendar = "simulator:seed=0,scale=0.01"
    asked = [
        (TrainingResource(promote=True), "promote=True is refused"),
        (TrainingResource(run_kind="nightly"), "run_kind='nightly' is refused"),
        (SourceResource(uri=f"files:{tmp_path}", default_uri=calendar), "source uri='files:"),
    ]
    for resource, _ in asked:
        resource.setup_for_execution(None)  # not the service: the owner's to set
    monkeypatch.setenv("LEAP_SERVICE_RUNS", "1")
    for resource, refused in asked:
        with pytest.raises(ValueError, match=re.escape(refused)):
            resource.setup_for_execution(None)
    TrainingResource(run_kind="adhoc", profile="quick").setup_for_execution(None)
    SourceResource(uri=calendar, default_uri=calendar).setup_for_execution(None)
    SourceResource(default_uri=calendar).setup_for_execution(None)
