"""``leap up`` on a demo's folder: the embedded registry's production model is carried into the
service's registry (here a second store standing in for the server), which then serves the same
ranking; a service registry with a production model of its own is never touched."""

import datetime as dt
import os
import subprocess
import sys

from http_model import registered_model
from mlflow import MlflowClient

from leap_pipeline.app.carry import ACTOR, carry_production
from leap_pipeline.modeling import registry
from leap_serving import Ranker
from leap_serving.registry.registered import SHA256_TAG


def test_the_demos_production_model_is_carried_once_and_serves_the_same(tmp_path, monkeypatch):
    with registered_model(tmp_path / "demo") as demo:
        job = demo["launches"][0]
        date = dt.date.fromisoformat(demo["launch_date"])
        before = demo["ranker"].rank(job["job"], job["candidates"], launch_date=date)
        embedded = tmp_path / "demo" / "mlflow"
        original = registry.production_version()
        service = tmp_path / "service" / "mlflow.db"
        service.parent.mkdir()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{service}")
        said = []
        carried = carry_production(embedded, said.append)
        assert carried is not None and said[-1].startswith(
            f"carried production version {original.version} of {embedded / 'mlflow.db'}"
        )
        # MLflow still points at the service, and the carried run was logged there, beside its
        # version, not into the demo's store
        assert os.environ["MLFLOW_TRACKING_URI"] == f"sqlite:///{service}"
        version = registry.production_version()  # the service's, as configured now
        assert str(version.version) == carried
        assert MlflowClient(f"sqlite:///{service}").get_run(version.run_id).info.run_id
        demo_runs = MlflowClient(f"sqlite:///{embedded / 'mlflow.db'}").search_runs(
            [e.experiment_id for e in MlflowClient(
                f"sqlite:///{embedded / 'mlflow.db'}").search_experiments()]
        )  # fmt: skip
        assert version.run_id not in {r.info.run_id for r in demo_runs}
        assert version.tags[SHA256_TAG] == original.tags[SHA256_TAG]
        assert version.tags["evaluation_day"] == original.tags["evaluation_day"]
        (move,) = registry.promotion_history()
        assert move["by"] == ACTOR and "carried from the embedded registry" in move["reason"]
        after = Ranker(registry.model_uri(), check_interval_s=float("inf"), wait=True)
        again = after.rank(job["job"], job["candidates"], launch_date=date)
        assert again.ranking and [c.hardware_type for c in again.ranking] == [
            c.hardware_type for c in before.ranking
        ]
        assert [c.predicted_throughput for c in again.ranking] == [
            c.predicted_throughput for c in before.ranking
        ]
        # a second leap up: the service has its production model, nothing is carried
        said.clear()
        assert carry_production(embedded, said.append) is None
        assert "has a production model: nothing carried" in said[0]
        assert len(registry.promotion_history()) == 1


def test_a_folder_with_no_embedded_production_model_carries_nothing(tmp_path):
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'service.db'}", "PATH": "/usr/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "leap_pipeline.app.carry", str(tmp_path / "no-store")],
        capture_output=True, text=True, env={**env, "HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no production model in" in done.stdout
