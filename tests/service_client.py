"""The service's other processes in tests/test_service.py, each configured by its environment
alone, as a run worker or a launcher is (``MLFLOW_TRACKING_URI`` naming the MLflow server):

    python tests/service_client.py register FOLDER   # two versions of a small model, the alias
                                                     # on the first; prints {"versions": [...]}
    python tests/service_client.py rank              # a Ranker following $LEAP_MODEL_URI: one
                                                     # ranking of examples/job.json per stdin line
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
DAY = dt.date(2026, 1, 10)


def register(folder: Path) -> None:
    import numpy as np
    import polars as pl

    from leap_pipeline.modeling import registry
    from leap_pipeline.simulation import SimulatedFleet
    from leap_serving.launch.features import FEATURE_COLUMNS
    from leap_serving.launch.snapshot import SNAPSHOT_SCHEMA
    from leap_serving.model.cascade import BinnedCascade
    from leap_serving.model.profiles import profile_params
    from leap_serving.model.published import LeapModel

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, len(FEATURE_COLUMNS)))
    cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": 2}).fit(X, X[:, 0])
    specs = SimulatedFleet(seed=0, scale=0.01).hardware_specs()
    LeapModel(cascade, pl.DataFrame(schema=SNAPSHOT_SCHEMA), specs).save(folder)
    uri = registry.configure_tracking()  # $MLFLOW_TRACKING_URI: the server
    versions = []
    for _ in range(2):
        _, version = registry.log_candidate(
            artifact_folder=folder, day=DAY, window=(DAY - dt.timedelta(days=7), DAY),
            run_kind="test", params={}, metrics={"w20": 0.5}, files=[],
        )  # fmt: skip
        versions.append(version)
    registry.promote(versions[0], reason="test", actor="pytest")
    print(json.dumps({"tracking_uri": uri, "versions": versions}), flush=True)


def rank() -> None:
    from leap_serving import Ranker

    # checks the pointer at most every 0.2 s; no canary: a new version serves at once
    ranker = Ranker(check_interval_s=0.2, wait=True, canary_launches=0, max_model_age_days=None)
    job = json.loads((PROJECT / "examples" / "job.json").read_text())
    candidates = job.pop("candidates")
    for _ in sys.stdin:
        result = ranker.rank(job, candidates)
        answer = {"version": result.model_version, "ranked": len(result.ranking),
                  "reason": result.reason}  # fmt: skip
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "register":
        register(Path(sys.argv[2]))
    else:
        rank()
