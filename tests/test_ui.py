"""``leap ui``: both servers answer on the loopback address and one Ctrl-C stops both."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_leap_ui_serves_both_uis_and_ctrl_c_stops_them(tmp_path):
    dagster_port, mlflow_port = _free_port(), _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "leap_pipeline.cli", "ui", "--data", str(tmp_path),
         "--dagster-port", str(dagster_port), "--mlflow-port", str(mlflow_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "DAGSTER_DISABLE_TELEMETRY": "1", "MLFLOW_DISABLE_TELEMETRY": "true"},
    )  # fmt: skip
    dagster = f"http://127.0.0.1:{dagster_port}/server_info"
    mlflow = f"http://127.0.0.1:{mlflow_port}/health"
    try:
        deadline = time.monotonic() + 180
        while not (_answers(dagster) and _answers(mlflow)):
            assert process.poll() is None, process.stdout.read()
            assert time.monotonic() < deadline, "the UIs did not answer within 180 s"
            time.sleep(1)
        # the MLflow server reads the project's store: the experiment list answers from it
        query = f"http://127.0.0.1:{mlflow_port}/api/2.0/mlflow/experiments/search?max_results=5"
        with urllib.request.urlopen(query, timeout=5) as response:
            assert "experiments" in json.load(response)
        assert (tmp_path / "mlflow" / "mlflow.db").exists()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:  # a failed check: stop the servers too, not only leap ui
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    output = process.stdout.read()
    assert f"http://127.0.0.1:{dagster_port}" in output
    assert f"http://127.0.0.1:{mlflow_port}" in output
    time.sleep(1)
    assert not _answers(dagster) and not _answers(mlflow)  # both stopped, children included
    assert Path(tmp_path / "dagster").is_dir()
