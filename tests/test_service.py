"""The service topology: ``leap up`` on the loopback address in a fresh data folder (Postgres under
Dagster and MLflow, a Dask scheduler), a second ``leap up`` refused, Dagster's instance on
Postgres, a model registered over HTTP by another process, a Ranker in a third process following
the alias across a ``leap model promote`` without a restart, and nothing left running after
Ctrl-C. The dagster.yaml the settings write is checked without any of it."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml

from leap_pipeline.app.postgres import EmbeddedPostgres
from leap_pipeline.app.ui import answers, free_port
from leap_pipeline.app.up import MAX_RESTARTS, holding_folder, stop_retired, supervise
from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.orchestration.instance import DAGSTER_YAML, dagster_yaml, write_dagster_home
from leap_pipeline.settings import environment

PROJECT = Path(__file__).resolve().parents[1]
CLIENT = Path(__file__).with_name("service_client.py")
MODEL = "leap-service-test"
START_TIMEOUT_S = 300
FIRST_DAY = dt.date(2026, 3, 1)
SCALE = 0.1
MAX_CONCURRENT_RUNS = 3
RUN_TIMEOUT_S = 900


# -- dagster.yaml, from the settings (fast) -------------------------------------------------------


def test_dagster_yaml_is_the_embedded_one_unless_a_database_is_set(tmp_path):
    assert dagster_yaml(environment({})) == DAGSTER_YAML
    assert dagster_yaml(environment({"LEAP_DATABASE_URL": "", "LEAP_MAX_CONCURRENT_RUNS": "1"})) \
        == DAGSTER_YAML  # fmt: skip
    settings = environment({
        "LEAP_DATABASE_URL": "postgresql://leap:secret@db.internal:5432/dagster",
        "LEAP_MAX_CONCURRENT_RUNS": "4",
    })  # fmt: skip
    config = yaml.safe_load(dagster_yaml(settings))
    # run, event-log and schedule storage in the database, through the driver the extra installs
    url = "postgresql+psycopg2://leap:secret@db.internal:5432/dagster"
    assert config.pop("storage") == {"postgres": {"postgres_url": url}}
    assert config["concurrency"] == {"runs": {"max_concurrent_runs": 4}}
    embedded = yaml.safe_load(DAGSTER_YAML)
    assert {k: v for k, v in config.items() if k != "concurrency"} == {
        k: v for k, v in embedded.items() if k != "concurrency"
    }  # the rest (telemetry off, run monitoring, the progress logger) as on the embedded default
    home = write_dagster_home(tmp_path / "home", settings)
    assert (home / "dagster.yaml").read_text() == dagster_yaml(settings)
    assert (home / "dagster.yaml").stat().st_mode & 0o077 == 0  # it may hold a password
    with pytest.raises(ValueError, match="LEAP_MAX_CONCURRENT_RUNS=2 needs LEAP_DATABASE_URL"):
        dagster_yaml(environment({"LEAP_MAX_CONCURRENT_RUNS": "2"}))


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
    assert said == [f"stopping the sleeper server a killed leap up left running (pid {server.pid})"]
    assert (tmp_path / "locks" / "up.lock").read_text() == ""  # stopped cleanly: nothing to stop


def test_a_restart_ends_only_what_it_restarts_and_a_stop_ends_the_rest(tmp_path):
    """A server (the daemon, say) that started a child (a run worker) and then exited is started
    again without touching that child, which carries on; the service's stop ends it. The server
    here exits at once every time, so supervision gives up after ``MAX_RESTARTS``."""
    children = tmp_path / "children"
    script = (
        "import subprocess, sys; "
        "child = subprocess.Popen(['sleep', '600']); "
        f"open({str(children)!r}, 'a').write(f'{{child.pid}}\\n'); sys.exit(3)"
    )
    commands = {"daemon": ([sys.executable, "-c", script], {**os.environ})}
    from leap_pipeline.app.ui import start_group

    processes = {"daemon": start_group(*commands["daemon"])}
    retired, said, recorded = [], [], []
    code = supervise(processes, commands, lambda *a: recorded.append(a), said.append, retired)
    assert code == 1 and said[-1].startswith(f"the daemon server exited {MAX_RESTARTS + 1} times")
    pids = [int(line) for line in children.read_text().split()]
    assert len(pids) == MAX_RESTARTS + 1 and len(retired) == MAX_RESTARTS
    # every restart left its predecessor's child running (the last one's group is not retired)
    assert all(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    assert recorded[-1][1] == retired
    stop_retired(retired, said.append)
    from leap_pipeline.app.ui import stop_groups

    stop_groups(processes)  # the last one's group: SIGTERM, not waited on past its leader
    alive = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in psutil.wait_procs(alive, timeout=10)[1])


def test_stopping_postgres_never_touches_a_process_a_stale_pid_file_names(tmp_path):
    folder = tmp_path / "postgres"
    assert EmbeddedPostgres(folder).stop() == "not running"  # no folder, no file
    folder.mkdir()
    # what a killed server can leave: its pid file, the pid now another program's (this one's)
    (folder / "postmaster.pid").write_text(f"{os.getpid()}\n{folder}\n")
    assert EmbeddedPostgres(folder).stop() == "not running"
    assert psutil.Process().is_running()


@pytest.mark.long
def test_the_alias_lock_is_a_postgres_advisory_lock_every_host_shares(tmp_path, monkeypatch):
    """With a database (the service topology), the alias lock is Postgres's, not a file on one
    host: another process holding it makes this one wait, then fail naming it; killed, it
    frees the lock at once (its connection closes)."""
    from leap_pipeline.orchestration.locks import LockTimeout, advisory_held
    from leap_pipeline.orchestration.promotion import alias_lock

    postgres = EmbeddedPostgres(tmp_path / "postgres")
    url = postgres.start()
    try:
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time; from leap_pipeline.orchestration.promotion import alias_lock\n"
             "with alias_lock():\n    print('held', flush=True); time.sleep(600)"],
            env={**os.environ, "LEAP_DATABASE_URL": url}, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("LEAP_DATABASE_URL", url)
        monkeypatch.setenv("LEAP_LOCK_WAIT_S", "1")
        held = pytest.raises(LockTimeout, match=r"advisory lock 'leap-alias:.*production'")
        with held, alias_lock(tmp_path):  # another folder, another host's: the same lock
            pass
        assert not (tmp_path / "locks").exists()  # no file lock was taken
        holder.kill()
        holder.wait()
        with advisory_held(url, "leap-alias:leap-throughput.production", "the alias", wait_s=30):
            pass
    finally:
        postgres.stop()


# -- leap up (long) --------------------------------------------------------------------------------


class Service:
    def __init__(self, data: Path, process: subprocess.Popen, log: Path, ports: dict[str, int]):
        self.data, self.process, self.log, self.ports = data, process, log, ports
        self.env: dict[str, str] = {}

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def client_env(self, **extra: str) -> dict[str, str]:
        """A process on this machine set up as ``leap up`` says: its exported variables."""
        return {**_clean_env(), **self.env, **extra}


def _clean_env() -> dict[str, str]:
    # MLFLOW_REGISTRY_URI too: an earlier test's mlflow.set_registry_uri exports it (CI's long
    # lane once pointed the ranker and the nights here at an HTTP test's SQLite registry)
    drop = {"DAGSTER_HOME", "LEAP_DATA", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI",
            "LEAP_DATABASE_URL", "LEAP_MODEL_URI", "LEAP_MODEL_NAME"}  # fmt: skip
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
    # a calendar of simulated days big enough for a night of a minute or more
    Calendar(first_day=FIRST_DAY, source=f"simulator:seed=0,scale={SCALE}").save(data)
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "leap_pipeline.app.cli", "up", "--data", str(data),
             "--dagster-port", str(ports["dagster"]), "--mlflow-port", str(ports["mlflow"]),
             "--dask", "--dask-port", str(ports["dask"]), "--dask-workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, cwd=root,
            env={**_clean_env(), "LEAP_MAX_CONCURRENT_RUNS": str(MAX_CONCURRENT_RUNS),
                 "LEAP_MAX_CONCURRENT_STEPS": "2"},  # each step in a process of its own
        )  # fmt: skip
    found = Service(data, process, log, ports)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "leap up: ready in" not in found.output():
            assert process.poll() is None, found.output()[-4000:]
            assert time.monotonic() < deadline, found.output()[-4000:]
            time.sleep(1)
        for line in found.output().splitlines():
            if line.startswith("  export "):
                name, _, value = shlex.split(line.removeprefix("  export "))[0].partition("=")
                found.env[name] = value
        yield found
    finally:
        if process.poll() is None:  # a test failed before Ctrl-C: stop it all the same
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
        if process.poll() == 0:  # stopped cleanly (else the folder stays, its logs with it)
            shutil.rmtree(root, ignore_errors=True)


@pytest.mark.long
def test_leap_up_prints_every_url_and_the_environment_to_use_it(service):
    output = service.output()
    took = float(output.split("leap up: ready in ")[1].split()[0])
    print(f"leap up: ready in {took} s")  # the start-up time, for pytest -s
    assert f"http://127.0.0.1:{service.ports['dagster']}" in output
    assert f"tcp://127.0.0.1:{service.ports['dask']}" in output
    # Postgres's socket is in its folder (in a runtime folder when that path is too long for one)
    env = dict(service.env)
    assert env.pop("LEAP_DATABASE_URL").startswith("postgresql://postgres:@/dagster?host=/")
    assert env == {
        "LEAP_DATA": str(service.data),
        "DAGSTER_HOME": str(service.data / "dagster-postgres"),
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{service.ports['mlflow']}",
    }
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
    request = urllib.request.Request(
        f"http://127.0.0.1:{service.ports['dagster']}/graphql",
        data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.load(response)
    assert body["data"]["instance"]["daemonHealth"]["daemonStatus"]["healthy"] is True, body


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
    with urllib.request.urlopen(url, timeout=30) as response:
        assert json.load(response)["model_version"]["version"] == old
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
        self.client = DagsterGraphQLClient("127.0.0.1", port_number=service.ports["dagster"])
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

    def step_started(self, run_id: str, step: str) -> bool:
        events = self.instance.all_logs(run_id, of_type=self.dg.DagsterEventType.STEP_START)
        return any(event.step_key == step for event in events)


def _succeeded(*records) -> None:
    for record in records:
        assert record.dagster_run.status.value == "SUCCESS", record.dagster_run.run_id


@pytest.mark.long
def test_runs_launched_by_the_daemon_share_the_warehouse_and_register_each_night_once(service):
    """Two days landed at once; a day landed while a night of a minute or more trains; a
    backfill of three nights; no run failed and each night registered once."""
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

    # a backfill of three nights, in one run, on a week's window
    _succeeded(*daemon.wait(daemon.submit("training", days[29], days[31], window_days=7)))

    failed = daemon.instance.get_run_records(
        daemon.dg.RunsFilter(statuses=[daemon.dg.DagsterRunStatus.FAILURE])
    )
    assert failed == [], [r.dagster_run.run_id for r in failed]
    from mlflow import MlflowClient

    # the registry named too: without it MLflow takes the one this process last set, if any
    server = service.env["MLFLOW_TRACKING_URI"]
    client = MlflowClient(tracking_uri=server, registry_uri=server)
    registered = [v.tags.get("evaluation_day") for v in
                  client.search_model_versions("name='leap-throughput'")]  # fmt: skip
    nights = [d.isoformat() for d in days[29:33]]
    assert sorted(d for d in registered if d in nights) == nights, registered


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
    assert not (service.data / "postgres" / "postmaster.pid").exists()
    assert not answers(f"http://127.0.0.1:{service.ports['dagster']}/server_info")
