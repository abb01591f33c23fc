"""A registered model serves on its own: its environment, its example, its integrity, its speed.

One small model, trained on a tiny simulated fleet's day and registered as the pipeline registers
it (``registry.log_candidate``), is loaded through ``models:/`` in-process and served by
``mlflow models serve`` in a subprocess; both must predict what ``LeapModel.predict`` and the
``Ranker`` predict for the same launches.
"""

import ast
import contextlib
import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.metadata import packages_distributions
from pathlib import Path
from urllib.parse import urlparse

import mlflow
import numpy as np
import polars as pl
import pytest
import yaml
from http_model import tiny_model

import leap_serving
from leap_pipeline.modeling import registry
from leap_pipeline.settings import MODEL_NAME_ENV
from leap_serving.decide.ranker import Ranker
from leap_serving.launch.features import LAUNCH_COLUMNS
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.publish import MANIFEST, sha256_file
from leap_serving.model.published import ModelArtifactError
from leap_serving.registry import pyfunc
from leap_serving.registry.registered import SHA256_TAG

NAME = "leap-throughput"


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """A quick cascade fitted on day 1 of a tiny fleet (its measured throughput, day 0's
    history), shipping the history snapshot as of day 1, registered and promoted; launches on
    day 2: five of day 1's jobs launched again, two under names no history knows, each on every
    candidate it had."""
    root = tmp_path_factory.mktemp("serving")
    model, _, day1 = tiny_model()
    night = day1["ds"].max()
    model.save(root / "model")
    jobs = (
        day1.unique("family", keep="first", maintain_order=True)
        .head(5)
        .with_columns(
            ds=pl.lit(night + dt.timedelta(days=1)),
            job_name=pl.when(pl.int_range(pl.len()) < 2)
            .then(pl.lit("unseen_") + pl.col("job_name"))
            .otherwise(pl.col("job_name")),
        )
    )
    # what a launcher sends: the launch's contract columns, not the pipeline's family
    jobs = jobs.select(*(c for c in LAUNCH_COLUMNS if c != "hardware_type"), "candidate_hardware")
    launches = (
        jobs.explode("candidate_hardware")
        .select(
            pl.col("candidate_hardware").alias("hardware_type"), pl.exclude("candidate_hardware")
        )
        .select(LAUNCH_COLUMNS)
    )
    with pytest.MonkeyPatch.context() as env:
        env.delenv(MODEL_NAME_ENV, raising=False)
        env.delenv("MLFLOW_TRACKING_URI", raising=False)
        uri = registry.configure_tracking(root / "mlflow")
        _, version = registry.log_candidate(
            artifact_folder=root / "model", day=night, window=(night, night), run_kind="test",
            params={}, metrics={"w20": 0.5}, files=[],
        )  # fmt: skip
        registry.promote(version, reason="test", actor="pytest")
        yield {"root": root, "model": model, "jobs": jobs, "launches": launches, "uri": uri,
               "version": version, "night": night}  # fmt: skip


def _stored(version: str) -> Path:
    """The folder the registry version's model lives in (a local artifact store)."""
    location = registry.MlflowClient().get_model_version_download_uri(NAME, version)
    return Path(urlparse(location).path)


def _third_party_imports() -> dict[str, list[str]]:
    """Every top-level module leap_serving's code imports (inside functions too) that is neither
    the standard library nor leap_serving: module -> the files importing it."""
    found: dict[str, list[str]] = {}
    package = Path(leap_serving.__file__).parent
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("leap_serving", "__future__"):
                    continue
                found.setdefault(top, []).append(path.relative_to(package).as_posix())
    return found


def test_the_model_ships_leap_serving_and_pins_every_package_it_imports(registered):
    stored = _stored(registered["version"])
    mlmodel = yaml.safe_load((stored / "MLmodel").read_text())
    flavor = mlmodel["flavors"]["python_function"]
    code = stored / flavor["code"] / "leap_serving"
    package = Path(leap_serving.__file__).parent
    shipped = sorted(p.relative_to(code).as_posix() for p in code.rglob("*.py"))
    assert shipped == sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py"))
    assert all((code / n).read_bytes() == (package / n).read_bytes() for n in shipped)
    pins = dict(line.split("==", 1) for line in (stored / "requirements.txt").read_text().split())
    python_env = yaml.safe_load((stored / "python_env.yaml").read_text())
    assert set(python_env["dependencies"]) >= {"-r requirements.txt"}
    distributions = packages_distributions()
    imports = _third_party_imports()
    assert {"numba", "numpy", "polars", "sklearn", "lightgbm", "mlflow"} <= set(imports)

    def normal(name: str) -> str:  # PEP 503: PyYAML is pyyaml, prometheus_client -client
        return re.sub(r"[-_.]+", "-", name).lower()

    missing = {
        module: files
        for module, files in imports.items()
        if not {normal(d) for d in distributions.get(module, [module])} & {normal(p) for p in pins}
    }
    assert not missing, f"imported by leap_serving, not in requirements.txt: {missing}"
    # what converting MLflow's pandas frame to polars needs, which no module imports by name
    assert {"pandas", "pyarrow"} <= set(pins)
    assert all(pins[name] for name in pins), pins


def test_an_input_example_in_the_contract_columns_is_logged(registered):
    stored = _stored(registered["version"])
    mlmodel = yaml.safe_load((stored / "MLmodel").read_text())
    example = json.loads(
        (stored / mlmodel["saved_input_example_info"]["artifact_path"]).read_text()
    )
    records = (
        [dict(zip(example["columns"], row, strict=True)) for row in example["data"]]
        if "columns" in example
        else example
    )
    assert len(records) >= 2 and set(records[0]) == set(LAUNCH_COLUMNS)
    signature = {c["name"] for c in json.loads(mlmodel["signature"]["inputs"])}
    assert set(records[0]) == signature
    assert {r["hardware_type"] for r in records} <= set(registered["model"].hardware_specs[
        "hardware_type"])  # fmt: skip
    example = mlflow.models.Model.load(str(stored)).load_input_example(str(stored))
    predicted = mlflow.pyfunc.load_model(str(stored)).predict(example)
    assert len(predicted) == len(records) and np.isfinite(predicted["predicted_throughput"]).all()


def _expected(registered) -> pl.DataFrame:
    """LeapModel.predict through scikit-learn: what the pyfunc must give, row for row."""
    return registered["model"].predict(registered["launches"])


def _ranker_throughput(registered) -> dict[tuple[str, str], float]:
    """The Ranker's predicted throughput per (job, candidate), from the same registry alias."""
    ranker = Ranker(registry.model_uri(), check_interval_s=float("inf"), wait=True)
    out = {}
    for row in registered["jobs"].iter_rows(named=True):
        candidates = row.pop("candidate_hardware")
        ranking = ranker.rank(row, candidates)
        assert ranking.reason is None, ranking.reason
        for c in ranking.ranking + ranking.removed:
            out[row["job_name"], c.hardware_type] = c.predicted_throughput
    return out


def _assert_same_predictions(got: pl.DataFrame, registered) -> None:
    expected = _expected(registered)
    np.testing.assert_allclose(
        got["predicted_throughput"].to_numpy(), expected["predicted_throughput"].to_numpy(),
        rtol=1e-9, atol=0,
    )  # fmt: skip
    np.testing.assert_allclose(
        got["bin_probability"].to_numpy(), expected["bin_probability"].to_numpy(), rtol=1e-9
    )
    assert got["bin"].to_list() == expected["bin"].to_list()
    assert got["history_found"].to_list() == expected["history_found"].to_list()
    assert any(expected["history_found"]) and not all(expected["history_found"])
    ranker = _ranker_throughput(registered)
    launches = registered["launches"]
    keys = zip(launches["job_name"], launches["hardware_type"], strict=True)
    np.testing.assert_allclose(
        got["predicted_throughput"].to_numpy(), [ranker[k] for k in keys], rtol=1e-9, atol=0
    )


def test_the_pyfunc_predicts_what_the_model_and_the_ranker_predict_through_compiled_trees(
    registered, monkeypatch
):
    loaded = mlflow.pyfunc.load_model(f"models:/{NAME}@production")
    expected = _expected(registered)  # scikit-learn's predict, before it is switched off below

    def refuse(*args, **kwargs):
        raise AssertionError("the pyfunc predicted through scikit-learn")

    monkeypatch.setattr(BinnedCascade, "predict", refuse)
    monkeypatch.setattr(BinnedCascade, "predict_bins", refuse)
    got = pl.from_pandas(loaded.predict(registered["launches"].to_pandas()))
    monkeypatch.undo()
    assert got.equals(expected)  # the compiled walk is exact
    _assert_same_predictions(got, registered)


def test_the_pyfunc_refuses_files_that_differ_from_the_registration(registered, tmp_path):
    """The files and the manifest rewritten to match each other: only the hashes recorded at
    registration (the version's tag, and the model's config) still know the original."""
    _, version = registry.log_candidate(
        artifact_folder=registered["root"] / "model", day=registered["night"],
        window=(registered["night"],) * 2, run_kind="test", params={}, metrics={}, files=[],
    )  # fmt: skip
    tag = json.loads(registry.MlflowClient().get_model_version(NAME, version).tags[SHA256_TAG])
    stored = _stored(version)
    config = yaml.safe_load((stored / "MLmodel").read_text())["flavors"]["python_function"]
    assert config["config"][pyfunc.SHA256_CONFIG] == tag
    artifacts = stored / "artifacts"
    metadata = json.loads((artifacts / "metadata.json").read_text())
    (artifacts / "metadata.json").write_text(json.dumps({**metadata, "profile": "altered"}))
    manifest = json.loads((artifacts / MANIFEST).read_text())
    manifest["files"] = {n: sha256_file(artifacts / n) for n in manifest["files"]}
    (artifacts / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ModelArtifactError, match=r"recorded in the model's config.*metadata\.json"):
        mlflow.pyfunc.load_model(f"models:/{NAME}/{version}")


def test_a_model_logged_without_integrity_records_is_refused(registered, tmp_path):
    from leap_serving.model.published import ARTIFACTS
    from leap_serving.registry import mlflow_model

    folder = (registered["root"] / "model").resolve()
    mlflow.pyfunc.save_model(  # pip_requirements: MLflow would start a process to infer them
        tmp_path / "bare", python_model=mlflow_model.__file__,
        artifacts={k: str(folder / f) for k, f in ARTIFACTS.items()},
        pip_requirements=pyfunc.pip_requirements(),
    )  # fmt: skip
    with pytest.raises(ModelArtifactError, match="artifact_sha256"):
        mlflow.pyfunc.load_model(str(tmp_path / "bare"))


def test_a_version_logged_before_the_subpackages_still_loads_in_this_process(registered, tmp_path):
    """A version registered before leap_serving had subpackages ships a model-code file that
    imports ``leap_serving.pyfunc``. In a process that imported the installed leap_serving first
    (``pyfunc.load_checked``), that import reads the installed package, so the name stays
    (``leap_serving/pyfunc.py``) and the version serves its checked artifacts."""
    from leap_serving.model.published import ARTIFACTS
    from leap_serving.registry.shipped import package_files

    old = tmp_path / "old" / "mlflow_model.py"
    old.parent.mkdir()
    old.write_text(
        "import mlflow.models\n\nfrom leap_serving.pyfunc import LeapPyfunc\n\n"
        "mlflow.models.set_model(LeapPyfunc())\n"
    )
    folder = (registered["root"] / "model").resolve()
    config = {
        pyfunc.SHA256_CONFIG: json.loads((folder / MANIFEST).read_text())["files"],
        pyfunc.CODE_CONFIG: package_files(pyfunc.code_paths()[0], old),
    }
    mlflow.pyfunc.save_model(
        tmp_path / "saved", python_model=str(old), code_paths=pyfunc.code_paths(),
        artifacts={k: str(folder / f) for k, f in ARTIFACTS.items()}, model_config=config,
        pip_requirements=pyfunc.pip_requirements(),
    )  # fmt: skip
    loaded = mlflow.pyfunc.load_model(str(tmp_path / "saved"))
    got = pl.from_pandas(loaded.predict(registered["launches"].to_pandas()))
    expected = _expected(registered)
    assert got["bin"].to_list() == expected["bin"].to_list()
    np.testing.assert_allclose(
        got["predicted_throughput"].to_numpy(), expected["predicted_throughput"].to_numpy(),
        rtol=1e-9, atol=0,
    )  # fmt: skip


def test_the_shipped_code_run_alone_compares_its_files_with_the_registry_version(
    registered, tmp_path
):
    """The copy of leap_serving the model ships, run without the installed one (as by
    ``mlflow models serve``), refuses a version whose shipped code changed after registration,
    naming the file: the folder MLflow downloads names its version, and the registry answers.
    (A rewrite of the check itself would pass: tests/test_model_integrity.py shows the installed
    loaders refusing it before it runs.)"""
    _, version = registry.log_candidate(
        artifact_folder=registered["root"] / "model", day=registered["night"],
        window=(registered["night"],) * 2, run_kind="test", params={}, metrics={}, files=[],
    )  # fmt: skip
    target = _stored(version) / "code" / "leap_serving" / "launch" / "history.py"
    target.write_text(target.read_text() + "# altered after registration\n")
    hidden = tmp_path / "hidden" / "leap_serving"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('the installed leap_serving ran')")
    env = {**os.environ, "MLFLOW_TRACKING_URI": registered["uri"],
           "MLFLOW_REGISTRY_URI": registered["uri"], "PYTHONPATH": str(hidden.parent)}  # fmt: skip
    script = f"import mlflow; mlflow.pyfunc.load_model('models:/{NAME}/{version}')"
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode != 0
    assert "the installed leap_serving ran" not in run.stderr, run.stderr[-3000:]
    assert f"recorded on {NAME} version {version} (registry" in run.stderr, run.stderr[-3000:]
    assert "changed ['code/leap_serving/launch/history.py']" in run.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _records(launches: pl.DataFrame) -> list[dict]:
    """Launch rows as a caller sends them in JSON: contract columns, dates as ISO strings."""
    return [
        {k: v.isoformat() if isinstance(v, dt.date) else v for k, v in row.items()}
        for row in launches.select(LAUNCH_COLUMNS).iter_rows(named=True)
    ]


def test_mlflow_models_serve_answers_what_the_ranker_predicts(registered, tmp_path):
    """``mlflow models serve`` on the registry alias, as a real server: /ping, then
    /invocations with the launches, against LeapModel.predict and the Ranker.

    The installed project is hidden from the server (a ``leap_serving`` that refuses to import
    comes first on ``PYTHONPATH``), as in an environment built from the model alone: only the
    copy the model ships, which MLflow puts before it, can serve."""
    port = _free_port()
    hidden = tmp_path / "hidden" / "leap_serving"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        "raise ImportError('the installed leap_serving was imported: the model must ship its own')"
    )
    bin_dir = Path(sys.executable).parent  # the server execs uvicorn from PATH, as when active
    env = {**os.environ, "MLFLOW_TRACKING_URI": registered["uri"],
           "MLFLOW_REGISTRY_URI": registered["uri"], "MLFLOW_DISABLE_TELEMETRY": "true",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(hidden.parent)}  # fmt: skip
    mlflow_cli = bin_dir / "mlflow"
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [str(mlflow_cli), "models", "serve", "-m", f"models:/{NAME}@production",
         "--env-manager", "local", "-p", str(port), "-w", "1"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 50
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{base}/ping", timeout=2) as ping,
            ):
                if ping.status == 200:
                    break
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.5)
        body = json.dumps({"dataframe_records": _records(registered["launches"])}).encode()
        request = urllib.request.Request(
            f"{base}/invocations", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(exc.read().decode()[-3000:]) from exc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait(10)
        log.close()
    got = pl.DataFrame(answer["predictions"])
    assert len(got) == len(registered["launches"])
    _assert_same_predictions(got, registered)
