"""The hand-off adapters: a ranking as a SkyPilot task (parsed by SkyPilot itself), a Kubernetes Job
and an admission webhook's patch (validated offline by kubernetes-validate, the patch applied by
jsonpatch, the webhook reached over HTTP), Slurm's flags, and ``leap rank --format``."""

import asyncio
import base64
import copy
import datetime as dt
import itertools
import json
import logging
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonpatch
import kubernetes_validate
import polars as pl
import pytest
import yaml
from http_model import tiny_model
from test_docs import split_page

from leap_pipeline.app.cli import main
from leap_pipeline.simulation import SimulatedFleet
from leap_serving.decide.ranker import Ranker
from leap_serving.decide.results import CandidateScore, Ranking
from leap_serving.handoff.affinity import node_affinity, weights
from leap_serving.handoff.config import (
    GPU_PRODUCTS,
    KUEUE_QUEUE_LABEL,
    SKYPILOT_ACCELERATORS,
    HandoffConfig,
    config_from_mapping,
    load_config,
)
from leap_serving.handoff.devices import LaunchDevices
from leap_serving.handoff.formats import guessed_names, render, unmapped
from leap_serving.handoff.kubernetes import DEFAULT_JOB, admission_response, kubernetes_job
from leap_serving.handoff.ranked import HandoffError
from leap_serving.handoff.skypilot import skypilot_task, skypilot_yaml
from leap_serving.handoff.slurm import sbatch_flags, sbatch_line
from leap_serving.launch.features import LAUNCH_COLUMNS

K8S_VERSION = kubernetes_validate.utils.latest_version()
FLEET_SPECS = SimulatedFleet(seed=0, scale=0.01).hardware_specs()
FLEET_TYPES = set(FLEET_SPECS["hardware_type"])
# the spec table's host sizes: 8 devices for the NVIDIA types, 16 for Trainium
HOSTS = dict(FLEET_SPECS.select("hardware_type", "devices_per_host").iter_rows())


def ranking_of(*types: str, version: str = "4") -> Ranking:
    scores = [
        CandidateScore(t, 1000.0 / (i + 1), 10.0, 100.0 / (i + 1), i + 1, 0, 0.9, True, False)
        for i, t in enumerate(types)
    ]
    return Ranking(scores, model_version=version)


EMPTY = Ranking(
    [], model_version="4", reason="job.batch_size is missing", reason_code="invalid_job"
)
RANKED = ranking_of("L40S", "A100-80GB", "H100-SXM", "A10G", "L4")


def test_the_default_maps_name_only_the_fleets_types_and_a_file_adds_to_them(tmp_path):
    assert set(SKYPILOT_ACCELERATORS) <= FLEET_TYPES and set(GPU_PRODUCTS) <= FLEET_TYPES
    path = tmp_path / "handoff.yaml"
    path.write_text("top_k: 2\nkubernetes: {products: {MI300X: AMD-Instinct-MI300X}, queue: "
                    "team-a}\nslurm: {features: {H100-SXM: h100}}\n")  # fmt: skip
    config = load_config(path)
    assert config.top_k == 2 and config.kueue_queue == "team-a"
    assert config.gpu_products["MI300X"] == "AMD-Instinct-MI300X"
    assert config.gpu_products["L40S"] == GPU_PRODUCTS["L40S"]  # the defaults stay
    assert config.slurm_feature("H100-SXM") == "h100" and config.slurm_feature("L40S") == "l40s"
    json_path = tmp_path / "handoff.json"
    json_path.write_text(json.dumps({"skypilot": {"accelerators": {"H100-SXM": "H100-MEGA"}}}))
    assert load_config(json_path).skypilot_name("H100-SXM") == "H100-MEGA"


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"top_k": 0}, "top_k=0"),
        ({"top_k": 101}, "top_k=101"),
        ({"slurm": {"feature": {}}}, "slurm.'feature'"),
        ({"kubernets": {}}, "'kubernets'"),
        ({"kubernetes": {"products": {"L4": "has space"}}}, "gpu_products['L4']"),
        ({"slurm": {"features": {"L4": "a|b"}}}, "slurm_features['L4']"),
        ({"kubernetes": {"queue": "-bad-"}}, "kueue_queue='-bad-'"),
        ({"skypilot": {"task": "run: x"}}, "skypilot_task="),
    ],
)
def test_a_bad_config_is_refused_naming_the_field(data, named):
    with pytest.raises(ValueError, match=f"^.*{named.replace('[', '.').replace('|', '.')}"):
        config_from_mapping(data)


def test_every_adapter_refuses_an_empty_ranking_with_its_reason():
    for adapter in (skypilot_task, node_affinity, kubernetes_job, sbatch_flags):
        with pytest.raises(HandoffError, match="batch_size is missing"):
            adapter(EMPTY)


# --- SkyPilot ---

BASE_TASK = {
    "name": "train-dlrm", "num_nodes": 2, "setup": "pip install -r requirements.txt",
    "run": "torchrun train.py", "envs": {"EPOCHS": "3"},
    "resources": {"accelerators": "V100:4", "disk_size": 256, "use_spot": True},
}  # fmt: skip


def test_the_skypilot_task_orders_the_ranking_and_keeps_the_users_task():
    config = HandoffConfig(skypilot_task=BASE_TASK)
    task = skypilot_task(RANKED, config, LaunchDevices(requested=8))
    assert [r["accelerators"] for r in task["resources"]["ordered"]] == [
        "L40S:8", "A100-80GB:8", "H100:8", "A10G:8", "L4:8"
    ]  # fmt: skip
    assert {k: task[k] for k in ("name", "num_nodes", "setup", "run", "envs")} == {
        k: BASE_TASK[k] for k in ("name", "num_nodes", "setup", "run", "envs")
    }
    assert task["resources"]["disk_size"] == 256 and "accelerators" not in task["resources"]
    # the base task's own count when the launch does not say, and the base is not mutated
    assert skypilot_task(RANKED, config)["resources"]["ordered"][0] == {"accelerators": "L40S:4"}
    assert BASE_TASK["resources"]["accelerators"] == "V100:4"


def _catalog(home):
    catalog = home / ".sky" / "catalogs" / "v8" / "common"
    catalog.mkdir(parents=True)
    names = sorted(set(SKYPILOT_ACCELERATORS.values()) | {"V100"})
    rows = "".join(f"{name},\"['AWS', 'GCP', 'Kubernetes']\"\n" for name in names)
    (catalog / "accelerators.csv").write_text("AcceleratorName,Clouds\n" + rows)


def test_skypilot_itself_reads_the_tasks_resources_in_rank_order(tmp_path, monkeypatch):
    """SkyPilot's own parser on the YAML text: with a fixture catalog under a fresh HOME it
    never reaches the network; the parsed task's resources are a list in the ranking's order."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SKY_RUNTIME_DIR", raising=False)
    _catalog(tmp_path)
    if os.environ.get("LEAP_CI_SKYPILOT"):  # .ci/run's SkyPilot step: missing is a failure
        import sky
    else:
        sky = pytest.importorskip("sky", reason="the skypilot extra is not installed")
    text = skypilot_yaml(skypilot_task(RANKED, HandoffConfig(skypilot_task=BASE_TASK),
                                       LaunchDevices(requested=8)))  # fmt: skip
    task = sky.Task.from_yaml_config(yaml.safe_load(text))
    assert isinstance(task.resources, list)  # ordered: tried in this order
    expected = [SKYPILOT_ACCELERATORS[t] for t in RANKED.preference_list]
    assert [next(iter(r.accelerators)) for r in task.resources] == expected
    assert all(
        r.accelerators == {name: 8} for r, name in zip(task.resources, expected, strict=True)
    )
    assert task.name == "train-dlrm" and task.num_nodes == 2 and task.run == BASE_TASK["run"]
    assert all(r.use_spot and r.disk_size == 256 for r in task.resources)


# --- Kubernetes ---


def test_the_affinity_requires_the_top_k_and_prefers_them_by_rank():
    config = HandoffConfig(top_k=3)
    affinity = node_affinity(ranking_of("MI300X", *RANKED.preference_list), config)
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (expression,) = term["matchExpressions"]
    top = [GPU_PRODUCTS[t] for t in ("L40S", "A100-80GB", "H100-SXM")]  # MI300X has no label
    assert expression == {"key": "nvidia.com/gpu.product", "operator": "In", "values": top}
    preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [p["preference"]["matchExpressions"][0]["values"] for p in preferred] == [
        [v] for v in top
    ]
    got = [p["weight"] for p in preferred]
    assert got == sorted(got, reverse=True) and len(set(got)) == len(got) and got[0] == 100
    for k in range(1, 101):
        w = weights(k)
        assert all(1 <= x <= 100 for x in w) and all(a > b for a, b in itertools.pairwise(w))
    with pytest.raises(HandoffError, match=r"no ranked type has a nvidia\.com/gpu\.product"):
        node_affinity(ranking_of("MI300X", "Gaudi3"))


def test_the_job_is_valid_kubernetes_and_carries_the_queue_and_the_ranking():
    base = copy.deepcopy(kubernetes_job(RANKED))  # the placeholder Job, as a user's base
    base["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "from-the-user", "team": "ads"}
    base["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    del base["metadata"]["annotations"]  # fmt: skip
    job = kubernetes_job(RANKED, HandoffConfig(kubernetes_job=base), LaunchDevices(requested=8))
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    assert job["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "from-the-user", "team": "ads"}
    assert job["metadata"]["annotations"]["leap.dev/ranking"] == ",".join(RANKED.preference_list)
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]  # the user's term ANDed with ours, not ORed beside it
    assert [e["key"] for e in term["matchExpressions"]] == ["zone", "nvidia.com/gpu.product"]
    queued = kubernetes_job(RANKED, HandoffConfig(kueue_queue="team-a"))
    kubernetes_validate.validate(queued, K8S_VERSION, strict=True)
    assert queued["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "team-a"}


# --- the admission webhook ---


class StubRanker:
    """Ranks by a fixed order; records what it is asked."""

    model_version, model_uri = "4", "models:/stub@production"

    def __init__(self, order=RANKED.preference_list, fail=False):
        self.order, self.fail, self.calls = list(order), fail, []

    def wait_ready(self, timeout=None):
        return True

    def rank(self, job, candidates, **kwargs):
        self.calls.append((job, list(candidates)))
        if self.fail:
            raise RuntimeError("boom")
        return ranking_of(*[t for t in self.order if t in candidates])


def pod(annotations=None, affinity=None) -> dict:
    spec = {"containers": [{"name": "train", "image": "python:3.11"}]}
    if affinity is not None:
        spec["affinity"] = affinity
    meta = {"name": "train-0", "namespace": "ml"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def review(obj, uid="705ab4f5-6393-11e8-b7cc-42010a800002", operation="CREATE") -> dict:
    kind = {"group": "batch" if obj["kind"] == "Job" else "", "version": "v1", "kind": obj["kind"]}
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": kind, "operation": operation, "object": obj,
                    "namespace": "ml", "userInfo": {"username": "alice"}, "dryRun": False},
    }  # fmt: skip


def patched(obj, answer) -> dict:
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(obj, ops)


LAUNCH = {"model_type": "dlrm", "batch_size": 1024, "candidates": ["A10G", "H100-SXM", "L40S"]}


def test_the_webhook_patches_a_pod_and_a_job_with_the_ranking():
    ranker = StubRanker()
    obj = pod({"leap.dev/launch": json.dumps(LAUNCH)})
    answer = admission_response(review(obj), ranker, HandoffConfig(top_k=2))
    assert answer["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert ranker.calls == [({"model_type": "dlrm", "batch_size": 1024},
                             ["A10G", "H100-SXM", "L40S"])]  # fmt: skip
    result = patched(obj, answer)
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    required = result["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert required[0]["matchExpressions"][0]["values"] == [GPU_PRODUCTS["L40S"],
                                                           GPU_PRODUCTS["H100-SXM"]]  # fmt: skip
    assert result["metadata"]["annotations"]["leap.dev/ranking"] == "L40S,H100-SXM,A10G"
    assert result["metadata"]["annotations"]["leap.dev/model-version"] == "4"
    # a Job: the affinity on its template, whose pods then carry the ranking and pass untouched
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "labels": {KUEUE_QUEUE_LABEL: "team-a"},
                        "annotations": {"leap.dev/launch": json.dumps(LAUNCH),
                                        "leap.dev/candidates": "L4, A10G"}},
           "spec": {"template": {"spec": {**pod()["spec"], "restartPolicy": "Never"}}}}  # fmt: skip
    result = patched(job, admission_response(review(job), ranker))
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    assert ranker.calls[-1][1] == ["L4", "A10G"]  # the annotation's candidates
    assert result["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "team-a"}
    template = result["spec"]["template"]
    assert template["metadata"]["annotations"]["leap.dev/ranking"] == "A10G,L4"
    assert "affinity" in template["spec"]
    child = pod(template["metadata"]["annotations"])
    assert "patch" not in admission_response(review(child), ranker)["response"]


def test_an_existing_affinity_is_narrowed_never_widened():
    zone = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}]}
            for z in "ab"]  # fmt: skip
    spread = {"weight": 5, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
    mine = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": zone}
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [spread]},
    }
    obj = pod({"leap.dev/launch": json.dumps(LAUNCH)}, affinity=mine)
    result = patched(obj, admission_response(review(obj), StubRanker()))
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    affinity = result["spec"]["affinity"]
    assert affinity["podAntiAffinity"] == mine["podAntiAffinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]  # fmt: skip
    assert [[e["key"] for e in t["matchExpressions"]] for t in terms] == [
        ["zone", "nvidia.com/gpu.product"], ["zone", "nvidia.com/gpu.product"]]  # fmt: skip


@pytest.mark.parametrize(
    ("obj_or_review", "ranker", "warning"),
    [
        (pod(), StubRanker(), "no leap.dev/launch annotation"),
        (pod({"leap.dev/launch": "{not json"}), StubRanker(), "leap.dev/launch is not JSON"),
        (pod({"leap.dev/launch": "[1]"}), StubRanker(), "not a JSON object"),
        (pod({"leap.dev/launch": "{}"}), StubRanker(order=[]), "not ranked"),
        (pod({"leap.dev/launch": "{}", "leap.dev/candidates": "MI300X"}),
         StubRanker(order=["MI300X"]), "no ranked type has a nvidia.com/gpu.product"),
        (pod({"leap.dev/launch": "{}"}), StubRanker(fail=True), "internal error: RuntimeError"),
        ({**pod({"leap.dev/launch": "{}"}), "kind": "Deployment"}, StubRanker(), "'Deployment'"),
        ({"kind": "AdmissionReview"}, StubRanker(), "no request"),
        ([1, 2], StubRanker(), "no request"),
        ({**pod({"leap.dev/launch": "{}"}), "spec": None}, StubRanker(), "Pod has no spec"),
    ],
)  # fmt: skip
def test_the_webhook_allows_unchanged_with_a_warning_and_never_raises(
    obj_or_review, ranker, warning
):
    is_object = isinstance(obj_or_review, dict) and "metadata" in obj_or_review
    answer = admission_response(review(obj_or_review) if is_object else obj_or_review, ranker)
    response = answer["response"]
    assert response["allowed"] is True and "patch" not in response
    assert warning in response["warnings"][0], response["warnings"]
    assert response["uid"] == ("705ab4f5-6393-11e8-b7cc-42010a800002" if is_object else "")


def test_an_update_is_let_through_without_a_ranking():
    obj = pod({"leap.dev/launch": json.dumps(LAUNCH)})
    ranker = StubRanker()
    response = admission_response(review(obj, operation="UPDATE"), ranker)["response"]
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert ranker.calls == []


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A quick cascade on day 1 of a tiny fleet (``http_model.tiny_model``, unregistered),
    saved to a folder and held by a Ranker, and one of day 1's launches, launched the day after,
    with candidates the default Kubernetes map names."""
    model, _, day1 = tiny_model()
    night = day1["ds"].max()
    train = day1.filter(pl.col("status") == "succeeded")
    folder = tmp_path_factory.mktemp("handoff") / "model"
    model.save(folder)
    row = train.row(0, named=True)
    launch = {c: row[c] for c in LAUNCH_COLUMNS if c not in ("hardware_type", "ds")}
    launch["ds"] = (night + dt.timedelta(days=1)).isoformat()
    ranker = Ranker(model=model, check_interval_s=float("inf"), wait=True, canary_launches=0)
    launch = {k: v for k, v in launch.items() if v is not None}
    candidates = ["A100-80GB", "H100-SXM", "L40S", "A10G", "L4", "T4"]
    ranking = ranker.rank(launch, candidates)
    assert len(ranking.preference_list) >= 3, ranking.reason
    return {"ranker": ranker, "folder": folder, "launch": launch, "candidates": candidates,
            "ranking": ranking}  # fmt: skip


def _post(app, body: bytes) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://leap") as client:
            return await client.post("/v1/k8s/mutate", content=body,
                                     headers={"content-type": "application/json"})  # fmt: skip

    return asyncio.run(go())


def test_leap_serves_the_webhook_over_http_with_a_real_ranking(tiny):
    """A real AdmissionReview POSTed to ``leap serve``'s app: the patch applies, the result is a
    valid Pod, and its required affinity is the model's own top three."""
    from leap_serving.http.webhook import create_webhook_app

    expected = tiny["ranking"].preference_list
    obj = pod({"leap.dev/launch": json.dumps(tiny["launch"]),
               "leap.dev/candidates": ",".join(tiny["candidates"])})  # fmt: skip
    answer = _post(create_webhook_app(tiny["ranker"]), json.dumps(review(obj)).encode())
    assert answer.status_code == 200, answer.text
    result = patched(obj, answer.json())
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    (term,) = result["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert term["matchExpressions"][0]["values"] == [GPU_PRODUCTS[t] for t in expected[:3]]
    assert result["metadata"]["annotations"]["leap.dev/ranking"] == ",".join(expected)


def test_the_webhook_leaves_a_pod_pinned_to_a_gpu_as_it_is_and_asks_only_known_types(tiny):
    """A pod that already selects on the GPU label is allowed unchanged (ANDing our top k with its
    own choice could leave no node); without listed candidates the map's types the model knows
    stand in, so a map naming types the model never saw still ranks."""
    annotations = {"leap.dev/launch": json.dumps(tiny["launch"])}
    obj = pod(annotations)
    obj["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    answer = admission_response(review(obj), tiny["ranker"])["response"]
    assert "patch" not in answer and "already selects" in answer["warnings"][0]
    config = HandoffConfig(gpu_products={**HandoffConfig().gpu_products, "NO-SUCH-GPU": "x"})
    answer = admission_response(review(pod(annotations)), tiny["ranker"], config)["response"]
    assert "patch" in answer, answer


def test_leap_serve_reads_the_webhooks_maps_from_its_setting(tiny, tmp_path):
    """``LEAP_SERVE_HANDOFF_CONFIG``'s file reaches the webhook: top_k 2 narrows the affinity
    to the best two; a file it cannot read stops the app at start, naming it."""
    from leap_serving.http.config import config_from_environment
    from leap_serving.http.webhook import create_webhook_app

    path = tmp_path / "handoff.yaml"
    path.write_text("top_k: 2\n")
    config = config_from_environment({"LEAP_SERVE_HANDOFF_CONFIG": str(path)})
    obj = pod({"leap.dev/launch": json.dumps(tiny["launch"]),
               "leap.dev/candidates": ",".join(tiny["candidates"])})  # fmt: skip
    answer = _post(create_webhook_app(tiny["ranker"], config), json.dumps(review(obj)).encode())
    result = patched(obj, answer.json())
    (term,) = result["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    expected = tiny["ranking"].preference_list[:2]
    assert term["matchExpressions"][0]["values"] == [GPU_PRODUCTS[t] for t in expected]
    path.write_text("top_k: many\n")
    with pytest.raises(ValueError, match="top_k"):
        create_webhook_app(tiny["ranker"], config)


# --- Slurm ---


def test_slurm_flags_constrain_to_the_top_k_and_prefer_the_best():
    assert sbatch_flags(RANKED) == ["--constraint", "l40s|a100-80gb|h100-sxm", "--prefer", "l40s"]
    config = HandoffConfig(top_k=2, slurm_features={"A100-80GB": "a100", "L40S": "l40s"})
    flags = sbatch_flags(RANKED, config)
    assert flags == ["--constraint", "l40s|a100", "--prefer", "l40s"]
    assert sbatch_line(flags) == "--constraint=l40s|a100 --prefer=l40s"
    assert sbatch_flags(ranking_of("H100-SXM"), config) == ["--constraint", "h100-sxm",
                                                            "--prefer", "h100-sxm"]  # fmt: skip
    with pytest.raises(HandoffError, match="name it in slurm_features"):
        sbatch_flags(ranking_of("Odd Type"))


# --- leap rank --format ---


def test_render_gives_each_format_as_text():
    job = {"requested_devices_per_host": 4}
    sky_task = yaml.safe_load(render("skypilot", RANKED, HandoffConfig(), job))
    assert sky_task["resources"]["ordered"][0] == {"accelerators": "L40S:4"}
    k8s = yaml.safe_load(render("k8s", RANKED, HandoffConfig(), job))
    kubernetes_validate.validate(k8s, K8S_VERSION, strict=True)
    assert render("slurm", RANKED, HandoffConfig()) == (
        "--constraint=l40s|a100-80gb|h100-sxm --prefer=l40s"
    )
    with pytest.raises(HandoffError, match=r"requested_devices_per_host=0\.5"):
        render("k8s", RANKED, HandoffConfig(), {"requested_devices_per_host": 0.5})
    with pytest.raises(ValueError, match="format='nomad'"):
        render("nomad", RANKED, HandoffConfig())


def test_every_format_asks_for_the_launchs_nodes_and_devices_per_node():
    """``num_trainers: 2`` without a request is two whole hosts of each type (the issue's case:
    it rendered ``L4:1`` and a Job asking no GPU); a request is capped by the host."""
    assert HOSTS["L4"] == HOSTS["L40S"] == 8 and HOSTS["Trn1"] == 16
    whole = {"num_trainers": 2}
    task = yaml.safe_load(render("skypilot", ranking_of("L4", "Trn1"), HandoffConfig(), whole,
                                 HOSTS))  # fmt: skip
    assert task["num_nodes"] == 2
    assert [o["accelerators"] for o in task["resources"]["ordered"]] == ["L4:8", "Trainium:16"]
    job = yaml.safe_load(render("k8s", RANKED, HandoffConfig(), whole, HOSTS))
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    assert {k: job["spec"][k] for k in ("parallelism", "completions", "completionMode")} == {
        "parallelism": 2, "completions": 2, "completionMode": "Indexed"}  # fmt: skip
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert render("slurm", RANKED, HandoffConfig(), whole, HOSTS).endswith(
        " --nodes=2 --gres=gpu:8"
    )
    # a request of 12: all 12 of Trainium's 16, capped at 8 on an L4 host
    capped = {"num_trainers": "3", "requested_devices_per_host": 12}  # text, as the ranker reads
    task = skypilot_task(ranking_of("L4", "Trn1"), HandoffConfig(),
                         LaunchDevices(3, 12, HOSTS))  # fmt: skip
    assert yaml.safe_load(render("skypilot", ranking_of("L4", "Trn1"), HandoffConfig(), capped,
                                 HOSTS)) == task  # fmt: skip
    assert [o["accelerators"] for o in task["resources"]["ordered"]] == ["L4:8", "Trainium:12"]
    # one node: a plain Job, the resource the config names
    config = HandoffConfig(gpu_resource="example.com/gpu", slurm_gres="tesla")
    one = yaml.safe_load(render("k8s", RANKED, config, {"num_trainers": 1}, HOSTS))
    assert "parallelism" not in one["spec"] and "completionMode" not in one["spec"]
    limits = one["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"example.com/gpu": 8}
    assert render("slurm", RANKED, config, {"num_trainers": 1, "requested_devices_per_host": 2},
                  HOSTS).endswith(" --nodes=1 --gres=tesla:2")  # fmt: skip


def test_a_count_the_launch_cannot_give_is_refused_naming_why():
    hosts_differ = ranking_of("L4", "Trn1")
    with pytest.raises(HandoffError, match=r"slurm: .*different devices per node \(L4: 8, Trn1: "
                       r"16\).*requested_devices_per_host"):  # fmt: skip
        sbatch_flags(hosts_differ, HandoffConfig(), LaunchDevices(2, None, HOSTS))
    # a request both hosts hold is one count
    assert sbatch_flags(hosts_differ, HandoffConfig(), LaunchDevices(2, 4, HOSTS))[-1] == "gpu:4"
    # whole hosts of a type whose host size is not known: no guess of one device
    for fmt in ("skypilot", "k8s", "slurm"):
        with pytest.raises(HandoffError, match="host size of L40S is unknown"):
            render(fmt, RANKED, HandoffConfig(), {"num_trainers": 2})
    for bad in ({"num_trainers": 0}, {"num_trainers": True}, {"num_trainers": "two"}):
        with pytest.raises(HandoffError, match=r"num_trainers=.* is not a positive whole count"):
            render("slurm", RANKED, HandoffConfig(), bad, HOSTS)


def test_a_base_that_disagrees_with_the_launchs_nodes_is_refused_not_overridden():
    with pytest.raises(HandoffError, match=r"num_nodes=2 but the launch's num_trainers=4"):
        skypilot_task(RANKED, HandoffConfig(skypilot_task=BASE_TASK), LaunchDevices(4, 8))
    task = skypilot_task(RANKED, HandoffConfig(skypilot_task=BASE_TASK), LaunchDevices(2, 8))
    assert task["num_nodes"] == 2
    base = copy.deepcopy(DEFAULT_JOB)
    base["spec"]["parallelism"] = 3
    with pytest.raises(HandoffError, match=r"spec\.parallelism=3 but the launch's num_trainers=2"):
        kubernetes_job(RANKED, HandoffConfig(kubernetes_job=base), LaunchDevices(2, 8))
    # the base's own GPU request follows the launch too (an extended resource's request must
    # equal its limit), and a sidecar asks for none
    base = copy.deepcopy(DEFAULT_JOB)
    trainer, sidecar = (
        base["spec"]["template"]["spec"]["containers"][0],
        {"name": "log", "image": "busybox"},
    )
    trainer["resources"] = {"requests": {"nvidia.com/gpu": 1, "cpu": "4"}}
    base["spec"]["template"]["spec"]["containers"].append(sidecar)
    job = kubernetes_job(RANKED, HandoffConfig(kubernetes_job=base), LaunchDevices(1, 4))
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    trainer, sidecar = job["spec"]["template"]["spec"]["containers"]
    assert trainer["resources"] == {"requests": {"nvidia.com/gpu": 4, "cpu": "4"},
                                    "limits": {"nvidia.com/gpu": 4}}  # fmt: skip
    assert "resources" not in sidecar


def test_only_kubernetes_leaves_unmapped_types_out_and_says_which():
    ranking = ranking_of("MI300X", "L40S", "Gaudi3", "H100-SXM")
    assert unmapped("k8s", ranking, HandoffConfig()) == ["MI300X", "Gaudi3"]
    mapped = HandoffConfig(gpu_products={**GPU_PRODUCTS, "MI300X": "AMD-Instinct-MI300X"})
    assert unmapped("k8s", ranking, mapped) == ["Gaudi3"]
    assert unmapped("skypilot", ranking, HandoffConfig()) == []  # handed on under its own name
    assert unmapped("slurm", ranking, HandoffConfig()) == []


@pytest.fixture
def leap_rank(tiny, tmp_path, monkeypatch, capsys, request):
    """``leap rank --format F`` on the tiny model's folder: (exit code, stdout, stderr)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    job = tmp_path / "job.json"
    job.write_text(json.dumps({**tiny["launch"], "candidates": tiny["candidates"]}))
    # the command quiets leap_serving's log for its process; this one goes on to other tests
    served_log = logging.getLogger("leap_serving")
    level = served_log.level
    request.addfinalizer(lambda: served_log.setLevel(level))

    def run(*extra: str) -> tuple[int, str, str]:
        try:
            code = main(["rank", "--job", str(job), "--model", str(tiny["folder"]), *extra])
        except SystemExit as stop:
            code = stop.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_leap_rank_prints_each_format_of_the_models_ranking(tiny, tmp_path, leap_rank):
    expected = tiny["ranking"].preference_list
    nodes, per_node = tiny["launch"]["num_trainers"], tiny["launch"]["requested_devices_per_host"]
    assert nodes > 1 and per_node <= 8  # several nodes, a request every 8-device host holds
    code, out, _ = leap_rank("--format", "slurm")
    assert code == 0
    features = [t.lower() for t in expected[:3]]
    assert out == (f"--constraint={'|'.join(features)} --prefer={features[0]} "
                   f"--nodes={nodes} --gres=gpu:{per_node}\n")  # fmt: skip
    code, out, _ = leap_rank("--format", "skypilot")
    task = yaml.safe_load(out)
    assert code == 0 and [o["accelerators"] for o in task["resources"]["ordered"]] == [
        f"{SKYPILOT_ACCELERATORS[t]}:{per_node}" for t in expected
    ]
    assert task["num_nodes"] == nodes
    config = tmp_path / "handoff.yaml"
    config.write_text("top_k: 2\nkubernetes: {queue: team-a}\n")
    code, out, _ = leap_rank("--format", "k8s", "--handoff-config", str(config))
    job = yaml.safe_load(out)
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    assert job["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "team-a"}
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == nodes
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": per_node}
    required = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]  # fmt: skip
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        GPU_PRODUCTS[t] for t in expected[:2]
    ]


def test_leap_rank_names_the_reason_when_there_is_nothing_to_hand_on(tmp_path, leap_rank):
    code, out, err = leap_rank("--format", "slurm", "--candidates", "NoSuchType")
    assert code == 2 and out == "" and "no ranking to hand on" in err
    assert leap_rank("--format", "slurm", "--candidates", "NoSuchType", "--fail-empty")[:2] == (
        2, "")  # fmt: skip
    # opted out: still nothing on stdout, the reason on stderr, and a status that lets it through
    code, out, err = leap_rank("--format", "slurm", "--candidates", "NoSuchType",
                               "--no-fail-empty")  # fmt: skip
    assert code == 0 and out == "" and "NoSuchType" in err and "--no-fail-empty" in err
    config = tmp_path / "bad.yaml"
    config.write_text("slurm: {featurs: {}}\n")
    code, out, err = leap_rank("--format", "slurm", "--handoff-config", str(config))
    assert code == 2 and "featurs" in err


def test_leap_rank_names_on_stderr_the_ranked_types_kubernetes_leaves_out(tiny, leap_rank):
    candidates = [*tiny["candidates"], "MI300X", "Gaudi3"]
    code, out, err = leap_rank("--format", "k8s", "--candidates", ",".join(candidates))
    ranked = tiny["ranker"].rank(tiny["launch"], candidates).preference_list
    left_out = [t for t in ranked if t not in GPU_PRODUCTS]
    assert code == 0 and left_out, ranked  # the model ranks at least one of them
    assert f"kubernetes.products: {', '.join(left_out)}" in err
    values = yaml.safe_load(out)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]["values"]  # fmt: skip
    assert values == [GPU_PRODUCTS[t] for t in ranked if t in GPU_PRODUCTS][:3]
    _, _, err = leap_rank("--format", "k8s")  # every candidate mapped: nothing said
    assert "left out" not in err


@pytest.mark.parametrize(("fmt", "key"), [("slurm", "slurm.features"),
                                          ("skypilot", "skypilot.accelerators")])  # fmt: skip
def test_leap_rank_names_on_stderr_the_types_handed_on_under_a_guessed_name(
    tiny, leap_rank, tmp_path, fmt, key
):
    """Slurm and SkyPilot hand an unmapped type on under a name of their own guessing
    (``rtx6000-ada``, ``MI250X:4``), which the scheduler may not know: said on stderr."""
    candidates = [*tiny["candidates"], "MI300X", "Gaudi3"]
    code, _, err = leap_rank("--format", fmt, "--candidates", ",".join(candidates))
    ranked = tiny["ranker"].rank(tiny["launch"], candidates).preference_list
    config = HandoffConfig()
    maps = config.slurm_features if fmt == "slurm" else config.skypilot_accelerators
    features = ranked_features = [config.slurm_feature(t) for t in ranked]
    admitted = set(list(dict.fromkeys(ranked_features))[: config.top_k])
    shown = [t for t, f in zip(ranked, features, strict=True) if f in admitted]
    shown = shown if fmt == "slurm" else ranked
    guessed = [t for t in shown if t not in maps]
    assert code == 0
    if guessed:
        assert f"no entry in the hand-off config's {key}" in err
        assert all(t in err for t in guessed)
    else:
        assert "guessed name" not in err
    assert guessed_names(fmt, tiny["ranker"].rank(tiny["launch"], candidates), config) == {
        t: (config.slurm_feature(t) if fmt == "slurm" else config.skypilot_name(t)) for t in guessed
    }
    mapped = tmp_path / "mapped.yaml"
    names = {t: t.lower() for t in candidates}
    section = {"slurm": {"features": names}} if fmt == "slurm" else {
        "skypilot": {"accelerators": names}}  # fmt: skip
    mapped.write_text(yaml.safe_dump(section))
    _, _, err = leap_rank("--format", fmt, "--candidates", ",".join(candidates),
                          "--handoff-config", str(mapped))  # fmt: skip
    assert "guessed name" not in err  # every type mapped: nothing said


# --- the docs' hand-off section, run as written ---

SERVING_DOCS = Path(__file__).resolve().parents[1] / "docs" / "serving.md"


def handoff_docs() -> tuple[str, list[str]]:
    """The hand-off section's config (its YAML block) and command lines (its shell block)."""
    text = SERVING_DOCS.read_text()
    section = text.split("## Handing the ranking to the scheduler", 1)[1].split("\n## ", 1)[0]
    blocks, _ = split_page(section)
    (config,) = [body for info, body in blocks if info == "yaml"]
    (commands,) = [body for info, body in blocks if info == "bash"]
    return config, [line for line in commands.splitlines() if line.strip()]


def scheduler_stand_ins(folder: Path, job: Path, model: Path) -> dict[str, str]:
    """A PATH whose ``sky``, ``kubectl`` and ``sbatch`` record what they are given under
    ``folder/calls``, and whose ``leap`` is this checkout's (first on PYTHONPATH, whatever the
    venv installed), on the test's launch and model."""
    bin_, calls = folder / "bin", folder / "calls"
    bin_.mkdir()
    calls.mkdir()
    scripts = {
        "leap": f'exec {sys.executable} -m leap_pipeline.app.cli "$@" --job {job} --model {model}',
        "sky": f'printf "%s\\n" "$@" > {calls}/sky.args && cp "$2" {calls}/sky.task.yaml',
        "kubectl": f'printf "%s\\n" "$@" > {calls}/kubectl.args && cat > {calls}/kubectl.stdin',
        "sbatch": f'printf "%s\\n" "$@" > {calls}/sbatch.args',
    }
    for name, body in scripts.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    paths = [str(SERVING_DOCS.parents[1]), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(p for p in paths if p),
            "MLFLOW_TRACKING_URI": (folder / "mlruns").as_uri(),
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}  # fmt: skip


def run_lines(lines: list[str], folder: Path, env: dict[str, str]) -> list:
    """Each line in its own bash, side by side (each loads the model: about 2 s)."""

    def run(line: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", line], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip

    with ThreadPoolExecutor(max_workers=len(lines)) as pool:
        return list(pool.map(run, lines))


def test_the_docs_handoff_config_and_commands_run_as_written(tiny, tmp_path):
    """The section's YAML saved as handoff.yaml and its three lines run in bash, on a launch of
    two trainers taking whole hosts: SkyPilot, kubectl and sbatch each receive the ranking and
    the launch's two nodes of 8 devices (the docs' Job once failed: "the Job has no
    spec.template.spec.containers")."""
    config, lines = handoff_docs()
    assert len(lines) == 3 and all("leap rank" in line for line in lines), lines
    (tmp_path / "handoff.yaml").write_text(config)
    launch = {k: v for k, v in tiny["launch"].items() if k != "requested_devices_per_host"}
    launch["num_trainers"] = 2
    job = tmp_path / "job.json"
    job.write_text(json.dumps({**launch, "candidates": tiny["candidates"]}))
    env = scheduler_stand_ins(tmp_path, job, tiny["folder"])
    results = run_lines(lines, tmp_path, env)
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr[-2000:] for r in results]
    ranked = tiny["ranker"].rank(launch, tiny["candidates"]).preference_list
    assert {HOSTS[t] for t in ranked} == {8}
    calls = tmp_path / "calls"
    handoff = load_config(tmp_path / "handoff.yaml")
    # SkyPilot: sky launch task.yaml, the task in rank order on two whole 8-device hosts
    assert (calls / "sky.args").read_text().split() == ["launch", "task.yaml"]
    task = yaml.safe_load((calls / "sky.task.yaml").read_text())
    assert task["name"] == "train" and task["num_nodes"] == 2
    assert [o["accelerators"] for o in task["resources"]["ordered"]] == [
        f"{handoff.skypilot_name(t)}:8" for t in ranked]  # fmt: skip
    # Kubernetes: kubectl apply -f - reads the docs' Job, ranked, one pod per trainer host
    assert (calls / "kubectl.args").read_text().split() == ["apply", "-f", "-"]
    k8s = yaml.safe_load((calls / "kubectl.stdin").read_text())
    kubernetes_validate.validate(k8s, K8S_VERSION, strict=True)
    assert k8s["metadata"]["name"] == "train"
    assert k8s["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "team-a"}
    assert k8s["spec"]["parallelism"] == k8s["spec"]["completions"] == 2
    (trainer,) = k8s["spec"]["template"]["spec"]["containers"]
    assert trainer["command"] == ["python", "train.py"]
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": 8}
    # Slurm: the flags, then the script
    features = [handoff.slurm_feature(t) for t in ranked[: handoff.top_k]]
    assert (calls / "sbatch.args").read_text().split("\n")[:-1] == [
        f"--constraint={'|'.join(features)}", f"--prefer={features[0]}", "--nodes=2",
        "--gres=gpu:8", "train.sh"]  # fmt: skip


def test_the_documented_sbatch_idiom_does_not_submit_an_empty_ranking(tiny, tmp_path):
    """The docs' sbatch line with a ranking that comes back empty: leap exits non-zero and
    sbatch is never called. Beside it, the plain ``sbatch $(leap rank ...)`` the docs warn
    against: the substitution's status is lost and sbatch runs unconstrained."""
    _, lines = handoff_docs()
    (idiom,) = [line for line in lines if "sbatch" in line]
    (tmp_path / "handoff.yaml").write_text(handoff_docs()[0])
    job = tmp_path / "job.json"
    job.write_text(json.dumps({**tiny["launch"], "candidates": ["NoSuchType"]}))
    env = scheduler_stand_ins(tmp_path, job, tiny["folder"])
    (result,) = run_lines([idiom], tmp_path, env)
    assert result.returncode != 0 and "no ranking to hand on" in result.stderr, result.stderr
    assert not (tmp_path / "calls" / "sbatch.args").exists()  # never submitted
    # the plain form, with a leap that fails as the real one just did: sbatch still runs
    (tmp_path / "bin" / "leap").write_text("#!/bin/bash\nexit 2\n")
    plain = subprocess.run(
        ["bash", "-c", "sbatch $(leap rank --format slurm) train.sh"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 0
    assert (tmp_path / "calls" / "sbatch.args").read_text() == "train.sh\n"
