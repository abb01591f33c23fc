"""A small demo, its summary, then ``leap ui`` on its data: what the two UIs show, read through
their own APIs from the running servers on the loopback address, and one Ctrl-C stops both."""

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from leap_pipeline.app.process_groups import answers, free_port
from leap_pipeline.orchestration.calendar import Calendar

MODEL = "leap-throughput"


class Servers:
    def __init__(self, data: Path, process: subprocess.Popen, dagster: int, mlflow: int):
        self.data, self.process = data, process
        self.demo_output = self.demo_summary = ""
        self.dagster, self.mlflow = f"http://127.0.0.1:{dagster}", f"http://127.0.0.1:{mlflow}"

    def graphql(self, query: str) -> dict:
        request = urllib.request.Request(
            f"{self.dagster}/graphql",
            data=json.dumps({"query": query}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.load(response)
        assert "errors" not in body, body["errors"]
        return body["data"]

    def rest(self, path: str, **params) -> dict:
        url = f"{self.mlflow}/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:  # a failed check: stop the servers too, not only leap ui
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def servers(small_demo):
    """`leap ui` on the small demo's folder (``conftest.small_demo``)."""
    data = small_demo.data
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "LEAP_DATA")},
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    dagster_port, mlflow_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "leap_pipeline.app.cli", "ui", "--data", str(data),
         "--dagster-port", str(dagster_port), "--mlflow-port", str(mlflow_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    found = Servers(data, process, dagster_port, mlflow_port)
    found.demo_output, found.demo_summary = small_demo.stderr, small_demo.stdout
    found.first = Calendar.load(data).first_day
    found.days = small_demo.days
    found.last = found.first + dt.timedelta(days=found.days - 1)
    try:
        deadline = time.monotonic() + 180
        while not (answers(f"{found.dagster}/server_info") and answers(f"{found.mlflow}/health")):
            assert process.poll() is None, process.stdout.read()
            assert time.monotonic() < deadline, "the UIs did not answer within 180 s"
            time.sleep(1)
        yield found
    finally:
        _stop(process)


def test_the_demo_reports_the_published_model_beside_its_rivals(servers):
    *lines, last = servers.demo_summary.strip().splitlines()
    result = json.loads(last)
    assert set(result["w20"]) == {"published", "cascade", "single_gbdt", "lookup"}
    chosen = result["selection"]
    assert result["published_model"] == chosen["published"] in chosen["scores"]
    # the published model is one of those it was chosen from, scored on the same attempts
    rival = {"single_gbdt": "single_gbdt", "cascade_mean": "cascade"}.get(chosen["published"])
    if rival is not None:  # cascade_mean: the cascade's default gating
        assert result["w20"]["published"] == result["w20"][rival]
    published = result["table1"]["published_w20"]
    assert published is None or 0 <= published <= 1
    assert any(line.startswith("published: ") for line in lines)
    assert result["model_uri"] == "models:/leap-throughput@production"


def test_dagster_lists_the_assets_with_the_landed_days_as_partitions(servers):
    nodes = servers.graphql(
        "{ assetNodes { assetKey { path } partitionStats { numMaterialized numPartitions } } }"
    )["assetNodes"]
    stats = {"/".join(n["assetKey"]["path"]): n["partitionStats"] for n in nodes}
    assert {"job_attempts", "history_snapshot", "feature_table", "cascade_model"} <= set(stats)
    # the partitions are the demo's days and yesterday, open for a person or tonight's tick:
    # neither closed at the demo's last day nor a wall of missing days
    days = servers.days
    assert stats["feature_table"] == {"numMaterialized": days, "numPartitions": days + 1}
    assert stats["cascade_model"] == {"numMaterialized": 1, "numPartitions": days + 1}


def test_a_person_materializes_the_day_after_the_demo_from_the_ui(servers):
    """The run a person launches from the UI (the same GraphQL mutation the button sends) for
    the day after the demo's last lands it; the daemon dequeues it."""
    day = (servers.last + dt.timedelta(days=1)).isoformat()
    launched = servers.graphql(
        "mutation { launchRun(executionParams: { selector: { repositoryLocationName: "
        '"leap_pipeline.orchestration.definitions", repositoryName: "__repository__", jobName: '
        f'"daily_pipeline" }}, executionMetadata: {{ tags: [{{ key: "dagster/partition", '
        f'value: "{day}" }}] }} }}) {{ __typename ... on LaunchRunSuccess {{ run {{ runId }} }} '
        "... on PythonError { message } } }"
    )["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + 240
    while True:
        status = servers.graphql(
            f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ status }} }} }}'
        )["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED") or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert status == "SUCCESS"
    nodes = servers.graphql(
        "{ assetNodes { assetKey { path } partitionStats { numMaterialized numPartitions } } }"
    )["assetNodes"]
    stats = {"/".join(n["assetKey"]["path"]): n["partitionStats"] for n in nodes}
    assert stats["feature_table"]["numMaterialized"] == servers.days + 1


def test_dagster_shows_the_asset_checks_with_their_results(servers):
    node = servers.graphql(
        '{ assetNodeOrError(assetKey: {path: ["feature_table"]}) { ... on AssetNode {'
        " assetChecksOrError { ... on AssetChecks { checks { name"
        " executionForLatestMaterialization { status evaluation { success } } } } } } } }"
    )["assetNodeOrError"]
    checks = {c["name"]: c["executionForLatestMaterialization"] for c in
              node["assetChecksOrError"]["checks"]}  # fmt: skip
    assert "columns_are_the_feature_list" in checks and "one_row_per_kept_attempt" in checks
    for execution in checks.values():
        assert execution["status"] == "SUCCEEDED" and execution["evaluation"]["success"]


def test_dagster_runs_the_nightly_schedule(servers):
    repositories = servers.graphql(
        "{ repositoriesOrError { ... on RepositoryConnection { nodes {"
        " schedules { name cronSchedule scheduleState { status } } } } } }"
    )["repositoriesOrError"]["nodes"]
    schedules = {s["name"]: s for r in repositories for s in r["schedules"]}
    assert schedules["nightly_schedule"]["scheduleState"]["status"] == "RUNNING"
    assert schedules["nightly_schedule"]["cronSchedule"] == "0 2 * * *"


def test_training_progress_reaches_the_cli_and_the_dagster_run_log(servers):
    night = f"night {servers.last} | "
    # stderr is not a terminal here: one plain line per step
    lines = [line for line in servers.demo_output.splitlines() if line.startswith(night)]
    assert any("cascade: EM iteration 1/" in line for line in lines)
    assert "left (" in lines[0] and lines[-1].endswith("(100%)")
    query = "{ runsOrError { ... on Runs { results { runId jobName status startTime } } } }"
    runs = servers.graphql(query)["runsOrError"]["results"]
    # the demo's own night: the first training run (the nightly tests re-run the shared demo)
    training = min(
        (r for r in runs if r.get("jobName") == "training"), key=lambda r: r["startTime"]
    )
    events = servers.graphql(
        f'{{ logsForRun(runId: "{training["runId"]}") {{ ... on EventConnection {{'
        " events { ... on MessageEvent { message } } } } }"
    )["logsForRun"]["events"]
    messages = [e.get("message") or "" for e in events]
    assert any(m.startswith(night) and "expert" in m for m in messages)


def test_mlflow_serves_the_model_its_alias_signature_and_the_run(servers):
    model = servers.rest("api/2.0/mlflow/registered-models/get", name=MODEL)["registered_model"]
    version = servers.rest(
        "api/2.0/mlflow/registered-models/alias", name=MODEL, alias="production"
    )["model_version"]
    assert version["version"] in {v["version"] for v in model["latest_versions"]}
    tags = {t["key"]: t["value"] for t in version["tags"]}
    assert {"evaluation_day", "training_window", "run_kind", "published_w20", "gate"} <= set(tags)
    assert len(tags) <= 14  # what a person scans, three sha256 records; the metrics: on the run
    # the signature: the launch contract in, the prediction out
    logged = version["source"].removeprefix("models:/")
    url = (f"{servers.mlflow}/ajax-api/2.0/mlflow/logged-models/{logged}/artifacts/files?"
           "artifact_file_path=MLmodel")  # fmt: skip
    with urllib.request.urlopen(url, timeout=30) as response:
        mlmodel = response.read().decode()
    assert "signature:" in mlmodel and "predicted_throughput" in mlmodel
    assert "hardware_type" in mlmodel
    run = servers.rest("api/2.0/mlflow/runs/get", run_id=version["run_id"])["run"]
    metrics = {m["key"] for m in run["data"]["metrics"]}
    assert {"published_w20", "single_gbdt_w20", "cascade_w20", "oracle_w20"} <= metrics
    files = servers.rest("api/2.0/mlflow/artifacts/list", run_id=version["run_id"])["files"]
    assert {"predicted_vs_measured.png", "nightly_w20.png"} <= {f["path"] for f in files}


def test_ctrl_c_stops_both_servers(servers):
    servers.process.send_signal(signal.SIGINT)
    assert servers.process.wait(timeout=60) == 0
    output = servers.process.stdout.read()
    assert servers.dagster in output and servers.mlflow in output
    assert f"partitions: every day from {servers.first}" in output
    time.sleep(1)
    assert not answers(f"{servers.dagster}/server_info")  # both stopped, children included
    assert not answers(f"{servers.mlflow}/health")
    assert (servers.data / "mlflow" / "mlflow.db").exists()
