"""A tiny model registered twice (versions 1 and 2 of the same artifacts, the alias on 1), and
launches for it: what the HTTP tests serve. Trained as tests/test_serving.py's ``registered``
is: a quick cascade on day 1 of a tiny simulated fleet, in a few seconds."""

import contextlib
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import polars as pl
import pytest

from leap_pipeline.modeling import registry
from leap_pipeline.settings import MODEL_NAME_ENV
from leap_pipeline.simulation import SimulatedFleet
from leap_serving.decide.ranker import Ranker
from leap_serving.launch.families import with_family
from leap_serving.launch.features import LAUNCH_COLUMNS, launch_matrix
from leap_serving.launch.snapshot import history_snapshot
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.profiles import profile_params
from leap_serving.model.published import LeapModel

W20 = 0.4321  # the published w20 the versions carry
TOKEN = "s3cret-token"


def tiny_model() -> tuple[LeapModel, pl.DataFrame, pl.DataFrame]:
    """A quick cascade fitted on day 1 of a tiny fleet (its measured throughput, day 0's
    history), shipping the history snapshot as of day 1; with days 0 and 1 (family added).
    The serving, HTTP and hand-off tests' one model recipe: a few seconds."""
    fleet = SimulatedFleet(seed=3, scale=0.02)
    day0, day1 = (with_family(fleet.day(i).attempts) for i in range(2))
    night = day1["ds"].max()
    specs = fleet.hardware_specs()
    train = day1.filter(pl.col("status") == "succeeded")
    X = launch_matrix(train, specs, history_snapshot(day0, day0["ds"].max()))
    cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": 3}).fit(
        X, np.log(train["throughput"].to_numpy())
    )
    return LeapModel(cascade, history_snapshot(pl.concat([day0, day1]), night), specs), day0, day1


def register_tiny_model(root: Path, versions: int = 2) -> dict:
    """Trains, saves and registers the model under the tracking store and model name the
    environment names (the caller sets both); returns the versions, the night, the launches."""
    model, _, day1 = tiny_model()
    night = day1["ds"].max()
    model.save(root / "model")
    registered = []
    for _ in range(versions):
        _, version = registry.log_candidate(
            artifact_folder=root / "model", day=night, window=(night, night), run_kind="test",
            params={}, metrics={"published_w20": W20}, files=[],
        )  # fmt: skip
        registered.append(version)
    registry.promote(registered[0], reason="test", actor="pytest")
    rows = day1.unique("family", keep="first", maintain_order=True).head(8)
    launches = []
    for row in rows.iter_rows(named=True):
        job = {k: _plain(row[k]) for k in LAUNCH_COLUMNS if k not in ("hardware_type", "ds")}
        launches.append({"job": job, "candidates": list(row["candidate_hardware"])})
    return {"versions": registered, "night": night, "launches": launches,
            "launch_date": (night + dt.timedelta(days=1)).isoformat(),
            "uri": registry.model_uri(), "folder": root / "model"}  # fmt: skip


def _plain(value):
    return value.isoformat() if isinstance(value, dt.date) else value


@contextlib.contextmanager
def registered_model(root: Path):
    """The tiny model registered in a store under ``root``, and a Ranker on its alias."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(MODEL_NAME_ENV, "leap-http-test")
        # configure_tracking exports both (mlflow.set_*_uri): put back as they were at exit
        env.delenv("MLFLOW_TRACKING_URI", raising=False)
        env.delenv("MLFLOW_REGISTRY_URI", raising=False)
        tracking = registry.configure_tracking(root / "mlflow")
        model = register_tiny_model(root)
        ranker = Ranker(model["uri"], check_interval_s=float("inf"), wait=True)
        yield {**model, "ranker": ranker, "tracking": tracking, "root": root}


def launch_body(served: dict, i: int = 0, **extra) -> dict:
    """Launch ``i`` as a body of ``POST /v1/rank``, dated the day after the model's night."""
    return {**served["launches"][i], "launch_date": served["launch_date"], **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(served, tmp_path, *extra: str, token: str | None = None, env: dict | None = None):
    """``leap serve`` as a real subprocess on a free loopback port, ready; yields its URL."""
    port = _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": served["tracking"],
           "LEAP_SERVE_TOKEN": token or "", **(env or {})}  # fmt: skip
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "leap"), "serve", "--model", served["uri"],
         "--port", str(port), *extra],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.3)
        yield base, server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        log.close()
