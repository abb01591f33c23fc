"""Kubernetes objects carrying a ranking: a Job (batch/v1) built from a base one, and the mutating
admission webhook ``admission_response`` that patches a Pod or Job as it is created.

The affinity both carry is ``affinity.node_affinity``: required ``In`` the best ``top_k`` types
on the GPU Feature Discovery label, preferred in rank order.

The webhook sits in the path of every object it is configured for, so it never denies and never
raises: an object without a launch, a launch that cannot be ranked, or anything unexpected is
allowed unchanged with a warning (``kubectl`` prints it), and the job is scheduled as it would
have been without LEAP. An ``admission.k8s.io/v1`` AdmissionReview of a Pod or Job is answered
with a JSONPatch; the annotations it reads (on the object; for a Job whose own metadata has no
launch, on its pod template, where ``kubectl create job`` templates and most Job generators put
them):

- ``leap.dev/launch``: the launch config as JSON, as ``leap rank --job`` reads it;
- ``leap.dev/candidates`` (optional): ``A,B,C``; else the launch's ``candidates``, else every
  type the config's ``gpu_products`` map names;
- written back: ``leap.dev/ranking`` (the preference list) and ``leap.dev/model-version``. An
  object that already carries ``leap.dev/ranking`` (a Job's pod, or a re-invocation) is left
  alone.

Opting in is a label, ``leap.dev/rank: "true"`` (``OPT_IN_LABEL``), not the annotation: the
MutatingWebhookConfiguration's ``objectSelector`` matches labels only, so with the label the
kube-apiserver sends the webhook only the objects that asked, and every other Pod CREATE in the
namespace never waits on it (examples/mutating-webhook.yaml).
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from ..decide.results import Ranking
from .affinity import admitted_types, merged_affinity, node_affinity, ranking_annotations
from .config import KUEUE_QUEUE_LABEL, HandoffConfig
from .devices import LaunchDevices
from .ranked import HandoffError

log = logging.getLogger("leap_serving")

LAUNCH = "leap.dev/launch"
CANDIDATES = "leap.dev/candidates"
RANKED = "leap.dev/ranking"
OPT_IN_LABEL = "leap.dev/rank"  # value "true": the objectSelector sends the object to the webhook
# kind -> (where its pod spec is, where its pod template's metadata is)
POD_SPECS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "Pod": (("spec",), None),
    "Job": (("spec", "template", "spec"), ("spec", "template", "metadata")),
}
WARNING_CHARS = 240
# the Job a config without ``kubernetes.job`` gets: a placeholder to edit
DEFAULT_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "leap-job"},
    "spec": {
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "train", "image": "python:3.11", "command": ["python", "train.py"]}
                ],
            }
        },
    },
}


def kubernetes_job(
    ranking: Ranking, config: HandoffConfig | None = None, devices: LaunchDevices | None = None
) -> dict[str, Any]:
    """The base Job (``config.kubernetes_job``, else a placeholder) with the affinity on its pod
    template, the ranking's annotations, the Kueue queue label when the config names a queue,
    and the launch's devices: one pod per node (``num_trainers``; more than one as an Indexed
    Job, so each pod knows its rank) and the devices per node as the first container's
    ``config.gpu_resource`` limit. One pod template asks one count, so the admitted types must
    agree on it (``LaunchDevices.shared_per_node``). A base Job whose parallelism or
    completions disagree with the launch is refused rather than overridden."""
    config = config or HandoffConfig()
    devices = devices or LaunchDevices()
    job = copy.deepcopy(dict(config.kubernetes_job or DEFAULT_JOB))
    if job.get("kind") != "Job":
        raise HandoffError(f"kubernetes: kind={job.get('kind')!r}: the base object is a Job")
    try:
        spec = job["spec"]
        pod = spec["template"]["spec"]
        containers = pod["containers"]
    except (KeyError, TypeError):
        raise HandoffError("kubernetes: the Job has no spec.template.spec.containers") from None
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        raise HandoffError(
            f"kubernetes: spec.template.spec.containers={containers!r} is not a list of containers"
        )
    pod["affinity"] = merged_affinity(pod.get("affinity"), node_affinity(ranking, config))
    metadata = job.setdefault("metadata", {})
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        **ranking_annotations(ranking),
    }
    if config.kueue_queue is not None:
        metadata["labels"] = {
            **(metadata.get("labels") or {}),
            KUEUE_QUEUE_LABEL: config.kueue_queue,
        }
    if devices.nodes is not None:
        for key in ("parallelism", "completions"):
            if spec.get(key, devices.nodes) != devices.nodes:
                raise HandoffError(
                    f"kubernetes: the Job's spec.{key}={spec[key]!r} but the "
                    f"launch's num_trainers={devices.nodes}: one pod per trainer "
                    "host; make them agree (or leave it out)"
                )
        if devices.nodes > 1:
            spec["parallelism"] = spec["completions"] = devices.nodes
            spec.setdefault("completionMode", "Indexed")
    gpus = devices.shared_per_node(admitted_types(ranking, config), "kubernetes")
    if gpus is not None:  # the trainer: a sidecar asking too would double the pod's request
        resources = containers[0].setdefault("resources", {})
        resources["limits"] = {**(resources.get("limits") or {}), config.gpu_resource: gpus}
        if config.gpu_resource in (resources.get("requests") or {}):  # must equal the limit
            resources["requests"] = {**resources["requests"], config.gpu_resource: gpus}
    return job


class RanksLaunches(Protocol):
    def rank(self, job: Any, candidates: Any) -> Ranking: ...


def pointer(*parts: str) -> str:
    """A JSON pointer (RFC 6901): ``~`` and ``/`` inside a part escaped."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def _annotate(obj: Mapping[str, Any], metadata: tuple[str, ...], values: Mapping[str, str]):
    """The ops that set ``values`` as annotations under ``metadata``, creating what is missing."""
    if not isinstance(_at(obj, metadata), Mapping):
        return [{"op": "add", "path": pointer(*metadata), "value": {"annotations": dict(values)}}]
    if not isinstance(_at(obj, (*metadata, "annotations")), Mapping):
        return [{"op": "add", "path": pointer(*metadata, "annotations"), "value": dict(values)}]
    return [
        {"op": "add", "path": pointer(*metadata, "annotations", k), "value": v}
        for k, v in values.items()
    ]


def unranked(review: Any, warning: str) -> dict[str, Any]:
    """The AdmissionReview allowing ``review``'s object unchanged with ``warning``: what the
    webhook's listener answers when no ranking came in time, rather than an HTTP error the
    kube-apiserver would treat as the webhook failing."""
    request = review.get("request") if isinstance(review, Mapping) else None
    uid = request.get("uid") if isinstance(request, Mapping) else None
    return _allowed(uid if isinstance(uid, str) else "", warning)


def _allowed(uid: str, warning: str | None = None, patch: list | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warning is not None:
        text = f"leap: {warning}"
        response["warnings"] = [
            text[: WARNING_CHARS - 3] + "..." if len(text) > WARNING_CHARS else text
        ]
        log.warning("leap_serving: admission %s unchanged: %s", uid, warning)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def pinned(spec: Mapping[str, Any], label: str) -> bool:
    """Whether a pod spec already selects nodes on ``label`` (a nodeSelector or a required
    node-affinity expression)."""
    if isinstance(spec.get("nodeSelector"), Mapping) and label in spec["nodeSelector"]:
        return True
    node = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    required = _at(spec, (*node, "nodeSelectorTerms"))
    terms = required if isinstance(required, list) else []
    return any(
        isinstance(e, Mapping) and e.get("key") == label
        for t in terms
        if isinstance(t, Mapping)
        for e in (t.get("matchExpressions") or [])
        if isinstance(t.get("matchExpressions"), list)
    )


def _launch(annotations: Mapping[str, Any], config: HandoffConfig) -> tuple[Any, list | None]:
    """The launch and its candidates from the annotations (None: none listed); ``ValueError``
    naming the field."""
    try:
        launch = json.loads(annotations[LAUNCH])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"annotation {LAUNCH} is not JSON: {exc}") from None
    if not isinstance(launch, dict):
        raise ValueError(f"annotation {LAUNCH} is not a JSON object")
    listed = launch.pop("candidates", None)
    if CANDIDATES in annotations:
        text = annotations[CANDIDATES]
        if not isinstance(text, str):
            raise ValueError(f"annotation {CANDIDATES}={text!r} is not text")
        listed = [c.strip() for c in text.split(",") if c.strip()]
    return launch, list(listed) if listed is not None else None


def admission_response(
    review: Mapping[str, Any], ranker: RanksLaunches, config: HandoffConfig | None = None
) -> dict[str, Any]:
    """The AdmissionReview answering ``review``: allowed, with the patch when a launch ranked."""
    uid = ""
    try:
        request = review.get("request") if isinstance(review, Mapping) else None
        if not isinstance(request, Mapping):
            return _allowed(uid, "the AdmissionReview has no request")
        uid = request.get("uid") if isinstance(request.get("uid"), str) else ""
        obj = request.get("object")
        if request.get("operation", "CREATE") != "CREATE" or not isinstance(obj, Mapping):
            return _allowed(uid)  # placement is decided once, at creation
        kind = obj.get("kind")
        if kind not in POD_SPECS:
            return _allowed(uid, f"kind {kind!r} is not ranked (only Pod and Job)")
        spec_path, template_metadata = POD_SPECS[kind]
        places = [("metadata",)] + ([template_metadata] if template_metadata else [])
        found = [_at(obj, (*place, "annotations")) for place in places]
        found = [a if isinstance(a, Mapping) else {} for a in found]
        if any(RANKED in a for a in found):
            return _allowed(uid)  # ranked already: a Job's pod, or a re-invocation
        # the object's own launch, else its pod template's: each place read whole, never mixed
        annotations = next((a for a in found if LAUNCH in a), None)
        if annotations is None:
            where = " (nor on its pod template)" if template_metadata else ""
            return _allowed(uid, f"no {LAUNCH} annotation{where}: not ranked")
        config = config or HandoffConfig()
        job, candidates = _launch(annotations, config)
        if candidates is None:  # none listed: the map's types the model knows stand in
            candidates = list(config.gpu_products)
            known = set(getattr(ranker, "hardware_types", ()) or candidates)
            candidates = [c for c in candidates if c in known]
        ranking = ranker.rank(job, candidates)
        if not ranking.ranking:
            return _allowed(uid, f"not ranked: {ranking.reason} ({ranking.reason_code})")
        if not isinstance(_at(obj, spec_path), Mapping):
            return _allowed(uid, f"{kind} has no {'.'.join(spec_path)}")
        if pinned(_at(obj, spec_path), config.gpu_label):
            # ANDing our types with its own could leave no node: it stays as its author set it
            return _allowed(uid, f"{kind} already selects on {config.gpu_label}: left as it is")
        affinity = merged_affinity(
            _at(obj, (*spec_path, "affinity")), node_affinity(ranking, config)
        )
        recorded = ranking_annotations(ranking)
        patch = [{"op": "add", "path": pointer(*spec_path, "affinity"), "value": affinity}]
        patch += _annotate(obj, ("metadata",), recorded)
        if template_metadata is not None:  # its pods carry the ranking, so they pass untouched
            patch += _annotate(obj, template_metadata, recorded)
        return _allowed(uid, patch=patch)
    except (HandoffError, ValueError) as exc:
        return _allowed(uid, str(exc))
    except Exception as exc:  # never in the way of a Pod: allowed, logged with the traceback
        log.error("leap_serving: admission %s failed", uid, exc_info=exc)
        return _allowed(uid, f"internal error: {type(exc).__name__}: {exc}")
