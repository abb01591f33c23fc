"""Time loading a registered version from ``leap up``'s registry: one bundle or every file.

``python benchmarks/model_load.py [--repeats 3] [--json]`` starts ``leap up`` (no Dask) on a
fresh folder, registers one small model through it with the pipeline's account (as a night
does), then, in this one process, loads the version ``--repeats`` times each way:

- ``bundle``: as the loaders do now, the version's one tar (``leap_serving/registry/bundle.py``);
- ``file by file``: the same version with its ``model_bundle`` tag taken off, as a version
  registered before bundles is fetched (about 90 downloads, each checking the password).

It prints the median wall time of each and their ratio, how many artifact requests the MLflow
server logged for one load each way, and the wall time of one ``leap rank`` command (a new
process: imports, the alias resolved, the version loaded, a ranking printed) with the service's
variables set. In-process ``leap rank`` took 26 s of wall time on 3 s of CPU before bundles,
3.27 s before the registry was read over REST (``leap_serving/registry/rest.py``), 2.4-2.6 s after.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def _artifact_requests(log: Path, since: int) -> int:
    text = log.read_text(errors="replace")[since:]
    return text.count("GET /api/2.0/mlflow-artifacts/artifacts")


def _register(env: dict[str, str], scratch: Path) -> str:
    """One small model registered and promoted as a night would; returns its version."""
    import numpy as np
    import polars as pl

    from leap_pipeline.modeling import registry
    from leap_pipeline.simulation import SimulatedFleet
    from leap_serving.launch.features import FEATURE_COLUMNS
    from leap_serving.launch.snapshot import SNAPSHOT_SCHEMA
    from leap_serving.model.cascade import BinnedCascade
    from leap_serving.model.profiles import profile_params
    from leap_serving.model.published import LeapModel

    os.environ.update(env)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, len(FEATURE_COLUMNS)))
    y = X[:, 0] + 0.1 * rng.normal(size=len(X))
    cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": 3}).fit(X, y)
    specs = SimulatedFleet(seed=0, scale=0.01).hardware_specs()
    LeapModel(cascade, pl.DataFrame(schema=SNAPSHOT_SCHEMA), specs).save(scratch / "model")
    registry.configure_tracking()
    day = dt.date(2026, 1, 10)
    _, version = registry.log_candidate(
        artifact_folder=scratch / "model",
        day=day,
        window=(day - dt.timedelta(days=30), day - dt.timedelta(days=1)),
        run_kind="adhoc",
        params={},
        metrics={"w20": 0.5},
        files=[],
    )
    registry.promote(version, reason="benchmark", actor="benchmarks/model_load.py")
    return version


def _timed_loads(uri: str, repeats: int) -> list[float]:
    from leap_serving.registry.registered import load_registered

    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        load_registered(uri)
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from soak_service import ServiceTopology  # leap up started and its exports read

    from leap_pipeline.orchestration.calendar import Calendar

    root = Path(tempfile.mkdtemp(prefix="leap-model-load-"))
    root.chmod(0o755)  # under root, Postgres's own user must reach the folder
    data = root / "data"
    Calendar(source="simulator:seed=0,scale=0.02").save(data)
    drop = ("DAGSTER_HOME", "MLFLOW_TRACKING_URI", "LEAP_DATABASE_URL", "LEAP_DATA")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    service = ServiceTopology(data, log=lambda line: None)
    log, env = service.output, service.env
    try:
        version = _register(env, root)
        from leap_pipeline.modeling import registry

        uri = f"models:/{registry.model_name()}/{version}"
        mark = len(log.read_text(errors="replace"))
        _timed_loads(uri, 1)
        bundle_requests = _artifact_requests(log, mark)
        bundle = _timed_loads(uri, args.repeats)

        rank = [sys.executable, "-m", "leap_pipeline.app.cli", "rank", "--json"]
        t0 = time.perf_counter()
        ranked = subprocess.run(rank, env={**base, **env}, cwd=PROJECT, capture_output=True)
        rank_s = time.perf_counter() - t0
        if ranked.returncode != 0:
            print(ranked.stderr.decode()[-2000:], file=sys.stderr)
            return 1

        from leap_serving.registry.bundle import BUNDLE_TAG

        registry.MlflowClient().delete_model_version_tag(registry.model_name(), version, BUNDLE_TAG)
        mark = len(log.read_text(errors="replace"))
        _timed_loads(uri, 1)
        file_requests = _artifact_requests(log, mark)
        one_by_one = _timed_loads(uri, args.repeats)
    finally:
        if service.stop() == 0:  # stopped cleanly: its folder goes (else kept, its log)
            shutil.rmtree(root, ignore_errors=True)
    result = {
        "bundle_s": round(statistics.median(bundle), 2),
        "file_by_file_s": round(statistics.median(one_by_one), 2),
        "ratio": round(statistics.median(one_by_one) / statistics.median(bundle), 1),
        "artifact_requests": {"bundle": bundle_requests, "file_by_file": file_requests},
        "leap_rank_command_s": round(rank_s, 2),
        "repeats": args.repeats,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
