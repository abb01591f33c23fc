"""Loading a model runs no code and accepts no file it did not write.

The cascade is one JSON file (each booster's trees as LightGBM's text model): loading reads data
only, checks every field against what this code writes and reads each tree text strictly, so a
crafted file is refused by name, and a file changed after publication fails its hash first.
"""

import datetime as dt
import json
import re
from pathlib import Path
from urllib.parse import urlparse

import mlflow
import numpy as np
import polars as pl
import pytest

from leap_pipeline.modeling import registry
from leap_pipeline.settings import MODEL_NAME_ENV
from leap_pipeline.simulation import SimulatedFleet
from leap_serving.decide.ranker import Ranker
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.launch.snapshot import SNAPSHOT_SCHEMA
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.profiles import profile_params
from leap_serving.model.publish import MANIFEST, sha256_file
from leap_serving.model.published import ARTIFACTS, LeapModel, ModelArtifactError
from leap_serving.registry.bundle import BUNDLE_DIR, BUNDLE_FILE, BUNDLE_TAG, write_bundle
from leap_serving.registry.registered import SHA256_TAG


@pytest.fixture(scope="module")
def model() -> LeapModel:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, len(FEATURE_COLUMNS)))
    X[rng.random(len(X)) < 0.2, 1] = np.nan
    y = X[:, 0] + 0.1 * rng.normal(size=len(X))
    cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": 3}).fit(X, y)
    specs = SimulatedFleet(seed=0, scale=0.01).hardware_specs()
    return LeapModel(cascade, pl.DataFrame(schema=SNAPSHOT_SCHEMA), specs)


def _rewrite_manifest(folder) -> None:
    """What an attacker who controls the folder does: make the manifest match the files."""
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"] = {name: sha256_file(folder / name) for name in manifest["files"]}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _bundle_path(version: str) -> Path:
    """Where a version's bundle lies in the local artifact store of the tests."""
    client = registry.MlflowClient()
    run_id = client.get_model_version(registry.model_name(), version).run_id
    return Path(urlparse(client.get_run(run_id).info.artifact_uri).path) / BUNDLE_DIR / BUNDLE_FILE


def _rebundle(stored: Path, version: str) -> None:
    """What an attacker who can write the artifact store does beside rewriting a version's
    files: its bundle written again from them (the registry's tags stay as registered)."""
    write_bundle(stored, _bundle_path(version))


def test_a_saved_model_predicts_bit_for_bit_as_before(model, tmp_path):
    from leap_serving.model.compiled import CompiledCascade

    model.save(tmp_path / "model")
    loaded = LeapModel.load(tmp_path / "model")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, len(FEATURE_COLUMNS)))
    X[rng.random(len(X)) < 0.3] = np.nan
    assert np.array_equal(loaded.cascade.predict(X), model.cascade.predict(X))
    assert np.array_equal(loaded.cascade.predict_proba_bins(X), model.cascade.predict_proba_bins(X))
    assert np.array_equal(CompiledCascade(loaded.cascade).predict(X)[0], model.cascade.predict(X))
    assert loaded.cascade.get_params() == model.cascade.get_params()
    assert loaded.cascade.temperature_ == model.cascade.temperature_


def test_a_file_saved_before_a_later_fitting_setting_still_loads(model, tmp_path):
    """A registered model outlives an upgrade: its file lacks ``early_stopping_tol``,
    ``min_data_in_leaf`` and ``min_data_in_bin`` (added after the format's version 1) and loads
    with their defaults, predicting as before; any other missing parameter is still refused."""
    folder = tmp_path / "model"
    model.save(folder)
    real = folder.resolve()
    path = real / "cascade.json"
    cascade = json.loads(path.read_text())
    for record in [cascade, *cascade["experts"], cascade["classifier"]]:
        for key in ("early_stopping_tol", "min_data_in_leaf", "min_data_in_bin"):
            del record["params"][key]
    path.write_text(json.dumps(cascade))
    _rewrite_manifest(real)
    loaded = LeapModel.load(folder)
    X = np.random.default_rng(2).normal(size=(500, len(FEATURE_COLUMNS)))
    assert np.array_equal(loaded.cascade.predict(X), model.cascade.predict(X))
    assert loaded.cascade.get_params() == model.cascade.get_params()

    del cascade["params"]["n_bins"]
    path.write_text(json.dumps(cascade))
    _rewrite_manifest(real)
    with pytest.raises(ModelArtifactError, match="n_bins"):
        LeapModel.load(folder)


def _crafted(cascade: dict, case: str) -> str:
    """The field a crafted cascade file changes, after changing it in ``cascade``."""
    expert = cascade["experts"][0]
    if case == "a call as a parameter":
        cascade["params"]["n_bins"] = {"__class__": "system", "__module__": "os",
                                       "content": ["touch /tmp/leap-called"]}  # fmt: skip
        return "params.n_bins"
    if case == "a foreign kind":
        expert["kind"] = "builtins.exec"
        return "kind='builtins.exec'"
    if case == "an extra parameter":
        cascade["params"]["__reduce__"] = "os.system"
        return "params"
    if case == "a categorical split":
        expert["model_text"] = expert["model_text"].replace("num_cat=0", "num_cat=1", 1)
        return "num_cat=1"
    if case == "a tree cut short":
        expert["model_text"] = expert["model_text"].split("end of trees")[0]
        return "truncated"
    if case == "a fitted figure that is not a number":
        cascade["fitted"]["temperature_"] = "1.0; import os"
        return "temperature_"
    if case == "an expert missing":
        cascade["experts"].pop()
        return "experts"
    raise AssertionError(case)


CRAFTED = [
    "a call as a parameter", "a foreign kind", "an extra parameter", "a categorical split",
    "a tree cut short", "a fitted figure that is not a number", "an expert missing",
]  # fmt: skip


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_cascade_file_is_refused_by_name_even_with_a_matching_manifest(
    model, tmp_path, case
):
    folder = tmp_path / "model"
    model.save(folder)
    real = folder.resolve()
    path = real / "cascade.json"
    cascade = json.loads(path.read_text())
    field = _crafted(cascade, case)
    path.write_text(json.dumps(cascade))
    _rewrite_manifest(real)
    with pytest.raises(ModelArtifactError) as refused:
        LeapModel.load(folder)
    assert "cascade.json" in str(refused.value) and field in str(refused.value)
    assert not Path("/tmp/leap-called").exists()


def test_a_file_altered_after_publication_is_refused(model, tmp_path):
    folder = tmp_path / "model"
    model.save(folder)
    for name in ("cascade.json", "history_snapshot.parquet", "metadata.json"):
        path = folder.resolve() / name
        original = path.read_bytes()
        data = bytearray(original)
        data[len(data) // 2] ^= 0x01  # one flipped bit
        path.write_bytes(bytes(data))
        with pytest.raises(ModelArtifactError, match=f"{name} has sha256"):
            LeapModel.load(folder)
        path.write_bytes(original)
    assert LeapModel.load(folder).cascade.n_bins_ == model.cascade.n_bins_


def test_a_folder_without_its_manifest_is_refused(model, tmp_path):
    folder = tmp_path / "model"
    model.save(folder)
    (folder.resolve() / MANIFEST).unlink()
    with pytest.raises(ModelArtifactError, match="lacks"):
        LeapModel.load(folder)


def test_a_model_of_the_earlier_skops_format_is_refused_saying_how_to_replace_it(model, tmp_path):
    folder = tmp_path / "model"
    model.save(folder)
    real = folder.resolve()
    (real / "cascade.json").rename(real / "cascade.skops")
    manifest = json.loads((real / MANIFEST).read_text())
    manifest["files"]["cascade.skops"] = manifest["files"].pop("cascade.json")
    (real / MANIFEST).write_text(json.dumps(manifest))
    artifacts = {"cascade": str(real / "cascade.skops")} | {
        k: str(real / f) for k, f in ARTIFACTS.items() if k != "cascade"
    }
    with pytest.raises(ModelArtifactError, match=r"skops format of an earlier leap.*train a night"):
        LeapModel.load(artifacts)


def test_saving_records_every_hash(model, tmp_path):
    paths = model.save(tmp_path / "model")
    manifest = json.loads((tmp_path / "model" / MANIFEST).read_text())
    files = {name: sha256_file(path) for name, path in paths.items() if name != "manifest"}
    assert manifest["files"] == {p.rsplit("/", 1)[1]: h for p, h in
                                 ((paths[n], h) for n, h in files.items())}  # fmt: skip


def test_a_registry_version_whose_files_changed_is_refused_and_the_ranker_keeps_its_model(
    model, tmp_path, monkeypatch
):
    monkeypatch.setenv(MODEL_NAME_ENV, "leap-integrity-test")
    registry.configure_tracking(tmp_path / "mlflow")
    folder = tmp_path / "model"
    model.save(folder)
    day = dt.date(2026, 1, 10)
    window = (day - dt.timedelta(days=30), day - dt.timedelta(days=1))
    versions = []
    for _ in range(2):
        _, version = registry.log_candidate(
            artifact_folder=folder, day=day, window=window, run_kind="test",
            params={}, metrics={"w20": 0.5}, files=[],
        )  # fmt: skip
        versions.append(version)
    client = registry.MlflowClient()
    recorded = json.loads(client.get_model_version(registry.model_name(), versions[0]).tags[
        SHA256_TAG])  # fmt: skip
    assert recorded == json.loads((folder / MANIFEST).read_text())["files"]
    registry.promote(versions[0], reason="test", actor="pytest")
    ranker = Ranker(registry.model_uri(), check_interval_s=float("inf"), wait=True)
    assert ranker.model_version == versions[0]

    # alter version 2's stored metadata, manifest made to match: only the registry's record
    # still knows the original
    location = client.get_model_version_download_uri(registry.model_name(), versions[1])
    stored = Path(urlparse(location).path) / "artifacts"
    metadata = json.loads((stored / "metadata.json").read_text())
    (stored / "metadata.json").write_text(json.dumps({**metadata, "profile": "altered"}))
    _rewrite_manifest(stored)
    _rebundle(stored.parent, versions[1])
    registry.promote(versions[1], reason="test", actor="pytest")
    assert ranker.reload() is False
    assert ranker.model_version == versions[0]
    stats = ranker.stats()
    assert stats["models_refused"] == 1 and "sha256 recorded on" in stats["load_error"]
    assert "replaced after registration" in stats["load_error"]
    assert "still serving version" in stats["load_error"]


def test_republishing_replaces_the_version_and_leaves_no_other_behind(model, tmp_path):
    folder = tmp_path / "model"
    first = model.save(folder)["cascade"]
    second = model.save(folder)["cascade"]
    assert first != second and folder.resolve() == Path(second).parent
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", Path(second).parent.name])
    assert LeapModel.load(folder).cascade.n_bins_ == model.cascade.n_bins_


def test_a_version_carries_a_few_tags_and_its_run_every_metric(model, tmp_path, monkeypatch):
    monkeypatch.setenv(MODEL_NAME_ENV, "leap-tags-test")
    registry.configure_tracking(tmp_path / "mlflow")
    model.save(tmp_path / "model")
    day = dt.date(2026, 1, 10)
    metrics = {"published_w20": 0.41234, "single_gbdt_w20": 0.5, "lookup_w20": None,
               "gate_passed": 0.0}  # fmt: skip
    selection = {"published": "single_gbdt", "scores": {"single_gbdt": 0.5, "cascade_argmax": 0.4},
                 "selection_day": "2026-01-09"}  # fmt: skip
    run_id, version = registry.log_candidate(
        artifact_folder=tmp_path / "model", day=day, window=(day, day), run_kind="test",
        params={}, metrics=metrics, files=[], selection=selection, fingerprint="f" * 64,
        gate_reason="w20 0.412 is below the floor 0.500",
    )  # fmt: skip
    client = registry.MlflowClient()
    tags = client.get_model_version(registry.model_name(), version).tags
    assert set(tags) == set(registry.VERSION_TAGS)
    assert tags["night_fingerprint"] == "f" * 64 and "below the floor" in tags["gate_reason"]
    # the night is found by its day and inputs, so a re-run reuses it
    assert registry.registered_night(day, "f" * 64)["version"] == version
    assert registry.registered_night(day, "e" * 64) is None
    assert tags["published_w20"] == "0.4123" and tags["gate"] == "failed"
    assert tags["published_model"] == "single_gbdt"
    assert tags["selection_w20"] == "single_gbdt 0.5000, cascade_argmax 0.4000 (on 2026-01-09)"
    assert tags["run"] == f"runs:/{run_id}"
    assert client.get_run(run_id).data.metrics["single_gbdt_w20"] == 0.5


def _register(model, tmp_path, monkeypatch, name: str) -> tuple[str, Path]:
    """One version registered as a night registers it; returns its number and where its files
    are stored (a local artifact store)."""
    monkeypatch.setenv(MODEL_NAME_ENV, name)
    registry.configure_tracking(tmp_path / "mlflow")
    model.save(tmp_path / "model")
    day = dt.date(2026, 1, 10)
    _, version = registry.log_candidate(
        artifact_folder=tmp_path / "model", day=day, window=(day, day), run_kind="test",
        params={}, metrics={}, files=[],
    )  # fmt: skip
    location = registry.MlflowClient().get_model_version_download_uri(name, version)
    return version, Path(urlparse(location).path)


# What an attacker who can write the artifact store (not the registry) does to the files a
# version ships beside its artifacts: code that runs at load, a module that shadows another, a
# package for MLflow to install, a file taken away.
SHIPPED_TAMPERING = (
    "code/leap_serving/registry/pyfunc.py", "mlflow_model.py", "code/numpy.py",
    "requirements.txt", "code/leap_serving/model/trees.py",
)  # fmt: skip


def _tamper(stored: Path, tampered: str, marker: Path) -> None:
    path = stored / tampered
    runs = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n"
    if tampered == "code/numpy.py":
        path.write_text(runs)
    elif tampered == "requirements.txt":
        path.write_text(path.read_text() + "\nevil-package==1.0\n")
    elif tampered == "code/leap_serving/model/trees.py":
        path.unlink()
    else:
        path.write_text(path.read_text() + runs)


@pytest.mark.parametrize("tampered", SHIPPED_TAMPERING)
def test_a_version_whose_shipped_files_changed_is_refused_by_name_before_any_of_them_runs(
    model, tmp_path, monkeypatch, tampered
):
    """The artifacts untouched, one file the version ships beside them changed, added or
    removed: the installed loaders refuse it naming the file, before MLflow runs anything."""
    from leap_serving.registry import pyfunc
    from leap_serving.registry.registered import load_registered

    version, stored = _register(model, tmp_path, monkeypatch, "leap-shipped-test")
    name = registry.model_name()
    shipped = json.loads(
        registry.MlflowClient().get_model_version(name, version).tags[registry.CODE_SHA256_TAG]
    )
    assert {"MLmodel", "mlflow_model.py", "requirements.txt",
            "code/leap_serving/registry/pyfunc.py",
            "code/leap_serving/registry/shipped.py"} <= set(shipped)  # fmt: skip
    assert not any(path.startswith("artifacts/") for path in shipped)
    assert load_registered(f"models:/{name}/{version}")[1] == version
    assert isinstance(pyfunc.load_checked(f"models:/{name}/{version}"), mlflow.pyfunc.PyFuncModel)

    marker = tmp_path / "ran"
    _tamper(stored, tampered, marker)
    _rebundle(stored, version)
    bundle_refused = rf"{BUNDLE_TAG}\): the version's files were replaced after registration"
    with pytest.raises(ModelArtifactError, match=bundle_refused):
        load_registered(f"models:/{name}/{version}")
    with pytest.raises(ModelArtifactError, match=bundle_refused):
        pyfunc.load_checked(f"models:/{name}/{version}")
    # fetched file by file (a version registered before bundles), each file is named
    registry.MlflowClient().delete_model_version_tag(name, version, BUNDLE_TAG)
    refused = rf"{registry.CODE_SHA256_TAG}\).*\['{re.escape(tampered)}'\].*replaced after registr"
    with pytest.raises(ModelArtifactError, match=refused):
        load_registered(f"models:/{name}/{version}")
    with pytest.raises(ModelArtifactError, match=refused):
        pyfunc.load_checked(f"models:/{name}/{version}")
    assert not marker.exists()
    registry.promote(version, reason="test", actor="pytest")
    ranker = Ranker(registry.model_uri(), check_interval_s=float("inf"), wait=True)
    assert ranker.model_version is None and tampered in ranker.stats()["load_error"]
    if tampered == "mlflow_model.py":
        # loaded by MLflow itself, the altered file runs first; the pyfunc's own check, reading
        # the registry, refuses the version only after that
        with pytest.raises(ModelArtifactError, match=refused):
            mlflow.pyfunc.load_model(f"models:/{name}/{version}")
        assert marker.read_text() == "ran"


def test_a_rewrite_that_keeps_a_folder_consistent_is_caught_only_against_the_registry(
    model, tmp_path, monkeypatch
):
    """What a folder alone can promise: a shipped code file changed is refused by the model's
    own config, but one changed with the config that records it (a full rewrite) loads from a
    folder that names no registry version; the registry's tag still refuses it."""
    import shutil

    import yaml

    from leap_serving.registry.pyfunc import CODE_CONFIG
    from leap_serving.registry.registered import load_registered

    version, stored = _register(model, tmp_path, monkeypatch, "leap-folder-test")
    name = registry.model_name()
    target = stored / "code/leap_serving/launch/history.py"
    target.write_text(target.read_text() + "# altered\n")
    folder = tmp_path / "copied"  # a copy that names no registry version
    shutil.copytree(stored, folder, ignore=shutil.ignore_patterns("registered_model_meta"))
    with pytest.raises(
        ModelArtifactError, match=r"in the model's config.*leap_serving/launch/history"
    ):
        mlflow.pyfunc.load_model(str(folder))
    # through models:/ the folder names its version, and the registry answers
    with pytest.raises(ModelArtifactError, match=r"code_sha256\).*leap_serving/launch/history"):
        mlflow.pyfunc.load_model(f"models:/{name}/{version}")

    mlmodel = yaml.safe_load((folder / "MLmodel").read_text())
    config = mlmodel["flavors"]["python_function"]["config"]
    config[CODE_CONFIG]["code/leap_serving/launch/history.py"] = sha256_file(target)
    (folder / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    (stored / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    _rebundle(stored, version)
    assert isinstance(mlflow.pyfunc.load_model(str(folder)), mlflow.pyfunc.PyFuncModel)
    with pytest.raises(ModelArtifactError, match=rf"{BUNDLE_TAG}\): the version's files were"):
        load_registered(f"models:/{name}/{version}")
    registry.MlflowClient().delete_model_version_tag(name, version, BUNDLE_TAG)
    with pytest.raises(
        ModelArtifactError, match=r"changed \['MLmodel', 'code/leap_serving/launch/hist"
    ):
        load_registered(f"models:/{name}/{version}")
    with pytest.raises(
        ModelArtifactError, match=r"changed \['MLmodel', 'code/leap_serving/launch/hist"
    ):
        mlflow.pyfunc.load_model(f"models:/{name}/{version}")


def test_a_version_registered_before_its_code_was_recorded_serves_its_checked_artifacts_only(
    model, tmp_path, monkeypatch, caplog
):
    """No code_sha256 tag: the Ranker's loader, which runs none of the version's code, loads its
    artifacts (checked against artifact_sha256) and says the code is unchecked; the loader that
    would run the code refuses it."""
    from leap_serving.registry import pyfunc
    from leap_serving.registry.registered import load_registered

    version, _ = _register(model, tmp_path, monkeypatch, "leap-legacy-test")
    name = registry.model_name()
    registry.MlflowClient().delete_model_version_tag(name, version, registry.CODE_SHA256_TAG)
    with caplog.at_level("WARNING", logger="leap_serving"):
        assert load_registered(f"models:/{name}/{version}")[1] == version
    assert f"carries no {registry.CODE_SHA256_TAG} tag" in caplog.text
    with pytest.raises(ModelArtifactError, match=f"carries no {registry.CODE_SHA256_TAG} tag"):
        pyfunc.load_checked(f"models:/{name}/{version}")


def test_a_cache_planted_in_the_store_never_runs_through_the_checked_loader(
    model, tmp_path, monkeypatch
):
    """Caches are recorded nowhere (a run in place writes them), and Python runs an unchecked
    cached module without reading its source: the checked loader drops them from its copy. The
    version's files fetched one by one (no bundle, as registered before bundles): a bundle never
    holds the store's caches."""
    import importlib.util
    import py_compile

    from leap_serving.registry import pyfunc

    version, stored = _register(model, tmp_path, monkeypatch, "leap-cache-test")
    registry.MlflowClient().delete_model_version_tag(registry.model_name(), version, BUNDLE_TAG)
    marker = tmp_path / "ran"
    planted = tmp_path / "planted.py"
    planted.write_text(f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n")
    cache = Path(importlib.util.cache_from_source(str(stored / "mlflow_model.py")))
    py_compile.compile(
        str(planted), cfile=str(cache), doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )  # fmt: skip
    loaded = pyfunc.load_checked(f"models:/{registry.model_name()}/{version}")
    assert isinstance(loaded, mlflow.pyfunc.PyFuncModel) and not marker.exists()


def test_a_version_loads_from_its_bundle_in_one_download_and_predicts_as_the_full_copy(
    model, tmp_path, monkeypatch
):
    """Registration stores the version as one tar: the loader downloads that one file (about 90
    downloads before, each checking the password on a server behind basic auth), and the model
    it loads predicts bit for bit what one loaded from the version's files one by one does."""
    from leap_serving.registry.registered import load_registered

    version, _ = _register(model, tmp_path, monkeypatch, "leap-bundle-test")
    name = registry.model_name()
    downloads: list[dict] = []
    download = mlflow.artifacts.download_artifacts

    def counted(**kwargs):
        downloads.append(kwargs)
        return download(**kwargs)

    monkeypatch.setattr(mlflow.artifacts, "download_artifacts", counted)
    bundled, _ = load_registered(f"models:/{name}/{version}")
    assert [d.get("artifact_path") for d in downloads] == [f"{BUNDLE_DIR}/{BUNDLE_FILE}"]
    registry.MlflowClient().delete_model_version_tag(name, version, BUNDLE_TAG)
    one_by_one, _ = load_registered(f"models:/{name}/{version}")
    assert downloads[-1]["artifact_uri"] == f"models:/{name}/{version}"
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, len(FEATURE_COLUMNS)))
    assert np.array_equal(bundled.cascade.predict(X), one_by_one.cascade.predict(X))


def test_a_bundle_replaced_in_the_store_is_refused_before_anything_of_it_is_written(
    model, tmp_path, monkeypatch
):
    """A tar rewritten in the store (a member named ``../``, an absolute one, a link out) fails
    the sha256 the registry recorded; one that passed it (a registry written too) is still
    extracted with the ``data`` filter, which refuses such members: nothing lands outside."""
    import io
    import tarfile

    from leap_serving.registry.bundle import bundle_record, fetch_bundle
    from leap_serving.registry.registered import load_registered

    version, _ = _register(model, tmp_path, monkeypatch, "leap-crafted-bundle-test")
    name = registry.model_name()
    outside = tmp_path / "outside"
    outside.mkdir()
    crafted = _bundle_path(version)
    with tarfile.open(crafted, "w") as tar:
        info = tarfile.TarInfo(f"../../../../../../..{outside}/planted.py")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
        link = tarfile.TarInfo("artifacts/metadata.json")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside / "secret")
        tar.addfile(link)
    with pytest.raises(ModelArtifactError, match=rf"{BUNDLE_TAG}\): the version's files were"):
        load_registered(f"models:/{name}/{version}")
    record = registry.MlflowClient().get_model_version(name, version)
    forged = {**bundle_record(record.tags, "v"), "sha256": sha256_file(crafted)}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(ModelArtifactError, match="cannot be extracted"):
        fetch_bundle(record.run_id, forged, "v", scratch)
    assert list(outside.iterdir()) == []
