"""Doors a local user or a crafted request could open into the service, each shut before
anything connects: a run config naming a plain-TCP (or local) Dask scheduler where the service's
TLS cluster is set up, Dask's HTTP routes, a token file others can read, a token sent in clear
text to another host."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

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
    from leap_pipeline.app.up import NO_DASK_HTTP

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
    for mode in (0o644, 0o640, 0o604, 0o620):
        path.chmod(mode)
        with pytest.raises(ValueError, match=rf"mode {mode:04o} lets others read or write"):
            Tokens(path=str(path))
        with pytest.raises(ValueError, match="chmod 600"):
            read_token_file(str(path))  # the client's --token-file alike
    path.chmod(0o600)
    assert read_token_file(str(path)) == ["a-token-of-mine"]
    path.chmod(0o400)
    assert Tokens(path=str(path)).path == str(path)


def test_a_token_is_never_sent_in_clear_text_to_another_host():
    for server in ("http://10.0.0.7:8765", "http://leap.example.com", "http://[2001:db8::1]:80"):
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
