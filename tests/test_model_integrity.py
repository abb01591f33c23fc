"""Loading a model runs no code it names and accepts no file it did not write.

Each crafted file hides a call inside a real cascade (a skops reduce node in place of one
parameter); the control proves the payload is live, since skops calls it when trusted, and the
loader must refuse it before skops constructs anything: the sentinel the call would create
stays absent and ``skops.io.load`` is never reached.
"""

import contextlib
import datetime as dt
import json
import time
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import polars as pl
import pytest
import skops.io as sio

from leap_pipeline.modeling import registry
from leap_pipeline.simulation import SimulatedFleet
from leap_serving.cascade import BinnedCascade, profile_params
from leap_serving.features import FEATURE_COLUMNS
from leap_serving.history import SNAPSHOT_SCHEMA
from leap_serving.model import SHA256_TAG, LeapModel, ModelArtifactError
from leap_serving.publish import MANIFEST, sha256_file
from leap_serving.ranking import Ranker


@pytest.fixture(scope="module")
def model() -> LeapModel:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, len(FEATURE_COLUMNS)))
    y = X[:, 0] + 0.1 * rng.normal(size=len(X))
    cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": 3}).fit(X, y)
    specs = SimulatedFleet(seed=0, scale=0.01).hardware_specs()
    return LeapModel(cascade, pl.DataFrame(schema=SNAPSHOT_SCHEMA), specs)


def _json(value) -> dict:
    return {"__class__": "str", "__module__": "builtins", "__loader__": "JsonNode",
            "content": json.dumps(value), "is_json": True, "__id__": id(value)}  # fmt: skip


def _list(values: list) -> dict:
    return {"__class__": "list", "__module__": "builtins", "__loader__": "ListNode",
            "content": [_json(v) for v in values], "__id__": id(values)}  # fmt: skip


def _call(module: str, name: str, *args) -> dict:
    """A skops node that calls ``module.name(*args)`` when constructed."""
    content = [_list(arg) if isinstance(arg, list) else _json(arg) for arg in args]
    return {"__class__": name, "__module__": module, "__loader__": "ConstructorFromReduceNode",
            "__id__": id(content), "content": {"__class__": "tuple", "__module__": "builtins",
            "__loader__": "TupleNode", "content": content, "__id__": id(args)}}  # fmt: skip


def _payloads(sentinel):
    return {
        "builtins.exec": _call("builtins", "exec", f"open({str(sentinel)!r}, 'w').close()"),
        "os.system": _call("os", "system", f"touch {sentinel}"),
        "subprocess.Popen": _call("subprocess", "Popen", ["touch", str(sentinel)]),
    }


def _plant(skops_file, node) -> None:
    """Rewrite the cascade file with ``node`` in place of its ``n_bins`` parameter."""
    with zipfile.ZipFile(skops_file) as z:
        members = {n: z.read(n) for n in z.namelist()}
    schema = json.loads(members["schema.json"])
    schema["content"]["content"]["n_bins"] = node
    members["schema.json"] = json.dumps(schema).encode()
    with zipfile.ZipFile(skops_file, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


def _rewrite_manifest(folder, types=None) -> None:
    """What an attacker who controls the folder does: make the manifest match the files."""
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"] = {name: sha256_file(folder / name) for name in manifest["files"]}
    if types is not None:
        manifest["skops_types"]["cascade.skops"] = types
    (folder / MANIFEST).write_text(json.dumps(manifest))


@pytest.fixture
def spy_load(monkeypatch):
    calls = []
    real = sio.load

    def load(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(sio, "load", load)
    return calls


def _settle(sentinel) -> bool:
    time.sleep(0.3)  # Popen runs its child asynchronously
    return sentinel.exists()


@pytest.mark.parametrize("payload", ["builtins.exec", "os.system", "subprocess.Popen"])
def test_the_payload_is_live_when_skops_trusts_it(model, tmp_path, payload):
    folder = tmp_path / "model"
    model.save(folder)
    sentinel = tmp_path / "called"
    skops_file = folder.resolve() / "cascade.skops"
    _plant(skops_file, _payloads(sentinel)[payload])
    assert payload in sio.get_untrusted_types(file=str(skops_file))
    assert not sentinel.exists()  # inspecting the file calls nothing
    # the call runs; building the cascade from its result may fail afterwards
    with contextlib.suppress(Exception):
        sio.load(str(skops_file), trusted=sio.get_untrusted_types(file=str(skops_file)))
    assert _settle(sentinel)


@pytest.mark.parametrize("payload", ["builtins.exec", "os.system", "subprocess.Popen"])
@pytest.mark.parametrize("manifest_lists_it", [False, True])
def test_a_file_naming_a_call_is_refused_before_it_runs(
    model, tmp_path, spy_load, payload, manifest_lists_it
):
    folder = tmp_path / "model"
    model.save(folder)
    sentinel = tmp_path / "called"
    real = folder.resolve()
    _plant(real / "cascade.skops", _payloads(sentinel)[payload])
    recorded = json.loads((real / MANIFEST).read_text())["skops_types"]["cascade.skops"]
    _rewrite_manifest(real, types=[*recorded, payload] if manifest_lists_it else None)
    with pytest.raises(ModelArtifactError, match="not allowed") as refused:
        LeapModel.load(folder)
    assert payload in str(refused.value)
    assert spy_load == [] and not _settle(sentinel)


def test_a_file_altered_after_publication_is_refused(model, tmp_path, spy_load):
    folder = tmp_path / "model"
    model.save(folder)
    for name in ("cascade.skops", "history_snapshot.parquet", "metadata.json"):
        path = folder.resolve() / name
        original = path.read_bytes()
        data = bytearray(original)
        data[len(data) // 2] ^= 0x01  # one flipped bit
        path.write_bytes(bytes(data))
        with pytest.raises(ModelArtifactError, match=f"{name} has sha256"):
            LeapModel.load(folder)
        path.write_bytes(original)
    assert spy_load == []
    assert LeapModel.load(folder).cascade.n_bins_ == model.cascade.n_bins_


def test_a_folder_without_its_manifest_or_with_a_foreign_type_list_is_refused(model, tmp_path):
    folder = tmp_path / "model"
    model.save(folder)
    real = folder.resolve()
    _rewrite_manifest(real, types=[])  # hashes right, but the types recorded are not the file's
    with pytest.raises(ModelArtifactError, match="its manifest recorded"):
        LeapModel.load(folder)
    (real / MANIFEST).unlink()
    with pytest.raises(ModelArtifactError, match="lacks"):
        LeapModel.load(folder)


def test_saving_records_the_exact_types_and_every_hash(model, tmp_path):
    paths = model.save(tmp_path / "model")
    manifest = json.loads((tmp_path / "model" / MANIFEST).read_text())
    assert manifest["skops_types"]["cascade.skops"] == [
        "leap_serving.cascade.BinnedCascade",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    ]
    files = {name: sha256_file(path) for name, path in paths.items() if name != "manifest"}
    assert manifest["files"] == {p.rsplit("/", 1)[1]: h for p, h in
                                 ((paths[n], h) for n, h in files.items())}  # fmt: skip


def test_a_registry_version_whose_files_changed_is_refused_and_the_ranker_keeps_its_model(
    model, tmp_path, monkeypatch
):
    monkeypatch.setenv(registry.MODEL_NAME_ENV, "leap-integrity-test")
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
    registry.promote(versions[1], reason="test", actor="pytest")
    assert ranker.reload() is False
    assert ranker.model_version == versions[0]
    stats = ranker.stats()
    assert stats["models_refused"] == 1 and "sha256 recorded on the registry" in stats["load_error"]
    assert "still serving version" in stats["load_error"]


def test_republishing_replaces_the_version_and_leaves_no_other_behind(model, tmp_path):
    folder = tmp_path / "model"
    first = model.save(folder)["cascade"]
    second = model.save(folder)["cascade"]
    assert first != second and folder.resolve() == Path(second).parent
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", Path(second).parent.name])
    assert LeapModel.load(folder).cascade.n_bins_ == model.cascade.n_bins_


def test_a_version_carries_a_few_tags_and_its_run_every_metric(model, tmp_path, monkeypatch):
    monkeypatch.setenv(registry.MODEL_NAME_ENV, "leap-tags-test")
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
