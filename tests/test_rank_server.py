"""``leap rank --server URL``: a running ``leap serve`` asked instead of a model loaded in process
(``leap_serving.http.client``). Given a served model, the command prints the ranking, its JSON
and its hand-offs exactly as ``leap rank`` on the same model in process; a server that cannot
answer is a clear error and a non-zero exit; and the call imports nothing heavy on the way."""

import contextlib
import datetime as dt
import io
import itertools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from http_model import TOKEN, _free_port, serving, tiny_model
from test_http_security import make_tls, serving_tls

from leap_pipeline.app.cli import main
from leap_pipeline.app.ranking import show
from leap_serving.decide.ranker import Ranker
from leap_serving.decide.results import Ranking
from leap_serving.handoff.devices import launch_devices
from leap_serving.handoff.ranked import HandoffError
from leap_serving.launch.contract import job_devices
from leap_serving.launch.features import LAUNCH_COLUMNS

LEAP = str(Path(sys.executable).with_name("leap"))
CANDIDATES = ["A100-80GB", "H100-SXM", "L40S", "A10G", "L4", "T4"]
HEAVY = {"polars", "numpy", "mlflow", "dagster", "lightgbm", "sklearn", "pydantic", "scipy"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny model (``http_model.tiny_model``) saved to a folder, and a launch of two
    trainers taking whole hosts (no requested_devices_per_host), the day after its night."""
    fitted, _, day1 = tiny_model()
    folder = tmp_path_factory.mktemp("rank-server")
    fitted.save(folder / "model")
    row = day1.filter(pl.col("status") == "succeeded").row(0, named=True)
    skip = ("hardware_type", "ds", "requested_devices_per_host")
    launch = {c: row[c] for c in LAUNCH_COLUMNS if c not in skip and row[c] is not None}
    launch.update(num_trainers=2, ds=(day1["ds"].max() + dt.timedelta(days=1)).isoformat())
    job = folder / "job.json"
    job.write_text(json.dumps({**launch, "candidates": CANDIDATES}))
    ranking = Ranker(model=fitted, check_interval_s=float("inf"), wait=True).rank(
        launch, CANDIDATES
    )
    assert len(ranking.preference_list) >= 3, ranking.reason
    return {"folder": folder / "model", "job": job, "launch": launch, "ranking": ranking,
            "uri": str(folder / "model"), "tracking": (folder / "mlruns").as_uri()}  # fmt: skip


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    """``leap serve`` on the model folder, asking for ``TOKEN``: its URL."""
    with serving(model, tmp_path_factory.mktemp("serve"), token=TOKEN) as (base, _):
        yield base


def remote(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``leap rank ARGS`` as a subprocess, with the server's token in the environment."""
    environment = {**_clean_environment(), "LEAP_SERVE_TOKEN": TOKEN, **(env or {})}
    return subprocess.run([LEAP, "rank", *args], capture_output=True, text=True, timeout=120,
                          env=environment)  # fmt: skip


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LEAP_SERVE_")}


@pytest.fixture
def local(model, tmp_path, monkeypatch, capsys):
    """``leap rank ARGS --model FOLDER`` in this process: (exit code, stdout, stderr)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    served_log = logging.getLogger("leap_serving")
    level = served_log.level  # the command quiets it for its process; other tests go on

    def run(*args: str) -> tuple[int, str, str]:
        try:
            code = main(["rank", "--job", str(model["job"]), "--model", str(model["folder"]),
                         *args])  # fmt: skip
        except SystemExit as stop:
            code = stop.code
        out = capsys.readouterr()
        return code, out.out, out.err

    yield run
    served_log.setLevel(level)


@pytest.mark.parametrize(
    "extra",
    [["--json"], [], ["--format", "slurm"], ["--format", "skypilot"], ["--format", "k8s"]],
    ids=["json", "text", "slurm", "skypilot", "k8s"],
)
def test_a_server_ranks_and_hands_on_as_the_model_in_process_does(model, server, local, extra):
    asked = remote("--server", server, "--job", str(model["job"]), *extra)
    assert asked.returncode == 0, asked.stderr
    code, out, _ = local(*extra)
    assert code == 0 and asked.stdout == out
    if extra == ["--json"]:
        answer = json.loads(asked.stdout)
        assert [c["hardware_type"] for c in answer["ranking"]] == model["ranking"].preference_list
        assert {c["devices_per_host"] for c in answer["ranking"]} == {8.0}
    if extra == ["--format", "slurm"]:  # whole 8-device hosts: known from the answer alone
        assert asked.stdout.rstrip().endswith("--nodes=2 --gres=gpu:8"), asked.stdout


def test_the_server_path_imports_nothing_heavy(model, server):
    """Polars, numpy, MLflow and the rest take seconds to import: ``leap rank --server`` with a
    hand-off never loads them (the point of asking a server)."""
    code = (
        "import sys; from leap_pipeline.app.cli import main; "
        f"code = main(['rank', '--server', {server!r}, '--job', {str(model['job'])!r}, "
        "'--format', 'slurm']); "
        f"print(code, sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**_clean_environment(), "LEAP_SERVE_TOKEN": TOKEN},
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout


def test_an_unreachable_server_exits_1_naming_it_and_hands_nothing_on(model, tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    for extra in ([], ["--format", "slurm"]):
        done = remote("--server", url, "--job", str(model["job"]), *extra)
        assert done.returncode == 1 and done.stdout == ""
        assert f"--server {url}: cannot reach it" in done.stderr and "Traceback" not in done.stderr
    # the documented sbatch idiom does not submit
    (tmp_path / "sbatch").write_text(f"#!/bin/bash\ntouch {tmp_path}/submitted\n")
    (tmp_path / "sbatch").chmod(0o755)
    line = f"args=$({LEAP} rank --server {url} --format slurm) && {tmp_path}/sbatch $args x.sh"
    assert subprocess.run(["bash", "-c", line], capture_output=True, timeout=120).returncode == 1
    assert not (tmp_path / "submitted").exists()


def test_the_token_comes_from_the_environment_or_a_file_and_a_wrong_one_is_a_401(
    model, server, tmp_path
):
    job = ["--job", str(model["job"]), "--json"]
    wrong = remote("--server", server, *job, env={"LEAP_SERVE_TOKEN": "not-the-token"})
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert "answered 401" in wrong.stderr and "LEAP_SERVE_TOKEN" in wrong.stderr
    assert "not-the-token" not in wrong.stderr
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# the first token is sent\n\n{TOKEN}\nan-older-token\n")
    tokens.chmod(0o600)
    from_file = {"LEAP_SERVE_TOKEN": "", "LEAP_SERVE_TOKEN_FILE": str(tokens)}
    assert remote("--server", server, *job, env=from_file).returncode == 0
    flag = remote("--server", server, *job, "--token-file", str(tokens),
                  env={"LEAP_SERVE_TOKEN": "not-the-token"})  # fmt: skip
    assert flag.returncode == 0, flag.stderr
    missing = remote("--server", server, *job, "--token-file", str(tmp_path / "nope"))
    assert missing.returncode == 2 and str(tmp_path / "nope") in missing.stderr


def test_an_empty_ranking_from_the_server_fails_the_handoff(model, server):
    done = remote("--server", server, "--job", str(model["job"]), "--candidates", "NoSuchType",
                  "--format", "slurm")  # fmt: skip
    assert done.returncode == 2 and done.stdout == "" and "no ranking to hand on" in done.stderr
    # without --format it is a ranking like any other: empty, with the reason, exit 0
    text = remote("--server", server, "--job", str(model["job"]), "--candidates", "NoSuchType")
    assert text.returncode == 0 and "no ranking: " in text.stdout and "NoSuchType" in text.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--server", "ftp://127.0.0.1:1"], "--server"),
        (["--server", "http://127.0.0.1:notaport"], "--server"),
        (["--server", "http://127.0.0.1:0"], "--server"),
        (["--server", "127.0.0.1:8765"], "--server"),
        (["--server", "http://user:secret@127.0.0.1:1"], "credentials"),
        (["--server", "http://127.0.0.1:1", "--cacert", "ca.pem"], "--cacert"),
        (["--server", "http://127.0.0.1:1", "--model", "models:/x@production"], "--model"),
        (["--server", "http://127.0.0.1:1", "--job", "no-such-file.json"], "--job"),
        (["--token-file", "tokens"], "--token-file"),  # no --server: nothing to send it to
    ],
)
def test_a_bad_flag_exits_2_naming_it(args, named, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    with pytest.raises(SystemExit) as stop:
        main(["rank", *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and named in err and "secret" not in err


def test_https_is_verified_against_cacert_or_the_trust_store(model, tmp_path):
    tls = make_tls(tmp_path / "tls")
    job = ["--job", str(model["job"]), "--json"]
    with serving_tls(model, tmp_path, tls) as (base, _, _, _):
        trusted = remote("--server", base, *job, "--cacert", str(tls["ca"]))
        assert trusted.returncode == 0, trusted.stderr
        assert [c["hardware_type"] for c in json.loads(trusted.stdout)["ranking"]] == model[
            "ranking"].preference_list  # fmt: skip
        untrusted = remote("--server", base, *job)  # the test CA is in no trust store
        assert untrusted.returncode == 1 and "--cacert" in untrusted.stderr
        assert "certificate" in untrusted.stderr


def test_a_ranking_reads_back_as_it_was_written(model):
    ranking = model["ranking"]
    assert Ranking.from_dict(json.loads(json.dumps(ranking.to_dict()))) == ranking
    newer = {**ranking.to_dict(), "a_later_field": 1}
    newer["ranking"] = [{**c, "another": 2} for c in newer["ranking"]]
    assert Ranking.from_dict(newer) == ranking  # a newer server's fields are left out
    broken = {**ranking.to_dict(), "ranking": [{"hardware_type": "L4"}]}
    with pytest.raises(ValueError, match=r"ranking\[0\]: the field predicted_throughput"):
        Ranking.from_dict(broken)


def test_an_answer_without_host_sizes_cannot_hand_on_a_whole_host_launch(model):
    """A server older than ``devices_per_host``: a launch taking whole hosts is refused
    naming the field to set, never handed on as one device."""
    old = Ranking.from_dict({**model["ranking"].to_dict(), "ranking": [
        {k: v for k, v in c.to_dict().items() if k != "devices_per_host"}
        for c in model["ranking"].ranking]})  # fmt: skip
    args = type("Args", (), {"format": "slurm", "fail_empty": True, "json": False})()
    with pytest.raises(HandoffError, match="set requested_devices_per_host"):
        show(old, args, model["launch"], handoff=_default_handoff())
    asked = {**model["launch"], "requested_devices_per_host": 4}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert show(old, args, asked, handoff=_default_handoff()) == 0
    assert printed.getvalue().rstrip().endswith("--nodes=2 --gres=gpu:4")


def _default_handoff():
    from leap_serving.handoff.config import HandoffConfig

    return HandoffConfig()


def test_the_handoffs_devices_per_node_are_the_contracts_job_devices_on_one_host():
    """``handoff.devices`` applies ``contract.job_devices`` to one host in plain Python (the
    contract module loads polars): the two agree on every request and host size."""
    for requested, host in itertools.product([None, 1, 2, 3, 4, 8, 12, 16, 64], [1, 2, 4, 8, 16]):
        job = {"num_trainers": 3} | ({} if requested is None else {
            "requested_devices_per_host": requested})  # fmt: skip
        devices = launch_devices(job, {"X": host})
        assert devices.per_node("X") == int(job_devices(1, requested, host)), (requested, host)
