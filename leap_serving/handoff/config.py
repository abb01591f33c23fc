"""What each scheduler calls a hardware type: the maps the hand-off adapters read, as configuration.

A fleet names its types its own way (the spec table's ``hardware_type``); SkyPilot, the GPU Feature
Discovery label Kubernetes nodes carry and a Slurm cluster's node features each name them
differently. The defaults cover the simulated fleet's types; a YAML or JSON file overrides any
entry (``load_config``), so a real cluster states its own names once instead of patching code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

# SkyPilot's accelerator names (its catalog's ``AcceleratorName``); a type not here is handed on
# under its own name, which SkyPilot looks up in its catalogs and on Kubernetes
SKYPILOT_ACCELERATORS: dict[str, str] = {
    "T4": "T4",
    "V100-16GB": "V100",
    "V100-32GB": "V100-32GB",
    "A10G": "A10G",
    "L4": "L4",
    "A100-40GB": "A100",
    "A100-80GB": "A100-80GB",
    "L40S": "L40S",
    "RTX6000-Ada": "RTX6000-Ada",
    "H100-PCIe": "H100-PCIe",
    "H100-SXM": "H100",
    "H200": "H200",
    "B200": "B200",
    "MI300X": "MI300X",
    "Trn1": "Trainium",
    "Trn2": "Trainium2",
}

# the GPU Feature Discovery label's values (``nvidia.com/gpu.product``: the device name
# nvidia-smi reports, spaces as hyphens); AMD, Intel and AWS devices carry other labels, so they
# have no default and a Kubernetes hand-off leaves them out until the file names them
GPU_PRODUCTS: dict[str, str] = {
    "T4": "Tesla-T4",
    "V100-16GB": "Tesla-V100-SXM2-16GB",
    "V100-32GB": "Tesla-V100-SXM2-32GB",
    "A10G": "NVIDIA-A10G",
    "L4": "NVIDIA-L4",
    "A100-40GB": "NVIDIA-A100-SXM4-40GB",
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
    "L40S": "NVIDIA-L40S",
    "RTX6000-Ada": "NVIDIA-RTX-6000-Ada-Generation",
    "H100-PCIe": "NVIDIA-H100-PCIe",
    "H100-SXM": "NVIDIA-H100-80GB-HBM3",
    "H200": "NVIDIA-H200",
    "B200": "NVIDIA-B200",
}

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# the extended resource a pod asks devices by (NVIDIA's device plugin; AMD's is amd.com/gpu)
GPU_RESOURCE = "nvidia.com/gpu"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# a label value: at most 63 characters, alphanumeric at both ends, - _ . inside
LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?")
# a Slurm feature as the flags print it: no character a shell or a constraint expression reads
FEATURE = re.compile(r"[A-Za-z0-9_.:+-]+")
# an extended resource name: a DNS subdomain prefix, a slash, a name
RESOURCE = re.compile(
    r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}"
    r"[A-Za-z0-9])?"
)
# a Slurm GRES name (gres.conf ``Name=``): ``--gres=NAME:COUNT`` reads a colon as a separator
GRES = re.compile(r"[A-Za-z0-9_.+-]+")


@dataclass(frozen=True)
class HandoffConfig:
    """The three maps, how many ranked types a hard constraint admits, and the base objects.

    ``top_k`` bounds the Kubernetes required affinity and the Slurm ``--constraint``: the job may
    run on any of the best ``top_k`` types and on nothing ranked lower. SkyPilot lists every
    ranked candidate, in order, since it only falls back to the next when one is unavailable.
    """

    skypilot_accelerators: Mapping[str, str] = field(
        default_factory=lambda: dict(SKYPILOT_ACCELERATORS)
    )
    gpu_products: Mapping[str, str] = field(default_factory=lambda: dict(GPU_PRODUCTS))
    gpu_label: str = GPU_PRODUCT_LABEL
    gpu_resource: str = GPU_RESOURCE  # the resource each pod's limit names (devices per node)
    # type -> Slurm node feature; a type not here is its name in lower case
    slurm_features: Mapping[str, str] = field(default_factory=dict)
    slurm_gres: str = "gpu"  # the GRES ``--gres=NAME:COUNT`` asks devices per node by
    top_k: int = 3
    kueue_queue: str | None = None  # the LocalQueue a Kubernetes Job is submitted to
    skypilot_task: Mapping[str, Any] | None = None  # the user's base task (name, run, setup...)
    kubernetes_job: Mapping[str, Any] | None = None  # the user's base Job

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"top_k={self.top_k!r}: a whole number of types, at least 1")
        if self.top_k > 100:  # the preferred terms' weights are 1..100, strictly decreasing
            raise ValueError(f"top_k={self.top_k!r}: at most 100")
        for name, values in (
            ("skypilot_accelerators", self.skypilot_accelerators),
            ("gpu_products", self.gpu_products),
            ("slurm_features", self.slurm_features),
        ):
            if not isinstance(values, Mapping):
                raise ValueError(f"{name}={values!r}: a map of hardware type -> name")
            for key, value in values.items():
                if not isinstance(key, str) or not isinstance(value, str) or not value:
                    raise ValueError(f"{name}[{key!r}]={value!r}: names are non-empty text")
        for key, value in self.gpu_products.items():
            if not LABEL_VALUE.fullmatch(value):
                raise ValueError(f"gpu_products[{key!r}]={value!r}: not a Kubernetes label value")
        for key, value in self.slurm_features.items():
            if not FEATURE.fullmatch(value):
                raise ValueError(f"slurm_features[{key!r}]={value!r}: letters, digits, _.:+- only")
        if not (isinstance(self.gpu_resource, str) and RESOURCE.fullmatch(self.gpu_resource)):
            raise ValueError(
                f"gpu_resource={self.gpu_resource!r}: not a resource name "
                "(domain/name, e.g. nvidia.com/gpu)"
            )
        if not (isinstance(self.slurm_gres, str) and GRES.fullmatch(self.slurm_gres)):
            raise ValueError(
                f"slurm_gres={self.slurm_gres!r}: a GRES name, letters, digits, _.+- only"
            )
        if self.kueue_queue is not None and not (
            isinstance(self.kueue_queue, str) and LABEL_VALUE.fullmatch(self.kueue_queue)
        ):
            raise ValueError(f"kueue_queue={self.kueue_queue!r}: not a Kubernetes label value")
        for name in ("skypilot_task", "kubernetes_job"):
            base = getattr(self, name)
            if base is not None and not isinstance(base, Mapping):
                raise ValueError(f"{name}={base!r}: a mapping (the YAML of a task or Job)")

    def skypilot_name(self, hardware_type: str) -> str:
        return self.skypilot_accelerators.get(hardware_type, hardware_type)

    def slurm_feature(self, hardware_type: str) -> str:
        return self.slurm_features.get(hardware_type, hardware_type.lower())


# the file's keys -> the config's fields; the maps add to the defaults, entry by entry
FILE_KEYS: dict[str, dict[str, str]] = {
    "skypilot": {"accelerators": "skypilot_accelerators", "task": "skypilot_task"},
    "kubernetes": {
        "products": "gpu_products",
        "label": "gpu_label",
        "resource": "gpu_resource",
        "queue": "kueue_queue",
        "job": "kubernetes_job",
    },
    "slurm": {"features": "slurm_features", "gres": "slurm_gres"},
}
MAPS = ("skypilot_accelerators", "gpu_products", "slurm_features")


def config_from_mapping(data: Mapping[str, Any]) -> HandoffConfig:
    """A config from the file's structure: ``top_k``, and ``skypilot`` / ``kubernetes`` /
    ``slurm`` sections; an unknown key is an error naming it, since a misspelt map would
    otherwise hand off the defaults without a word."""
    if not isinstance(data, Mapping):
        raise ValueError(f"hand-off config: a mapping at the top, not {type(data).__name__}")
    base = HandoffConfig()
    fields_: dict[str, Any] = {}
    for key, value in data.items():
        if key == "top_k":
            fields_["top_k"] = value
            continue
        if key not in FILE_KEYS:
            raise ValueError(
                f"hand-off config: unknown key {key!r} (known: top_k, {', '.join(FILE_KEYS)})"
            )
        if not isinstance(value, Mapping):
            raise ValueError(f"hand-off config: {key}={value!r} is not a mapping")
        for sub, sub_value in value.items():
            if sub not in FILE_KEYS[key]:
                raise ValueError(
                    f"hand-off config: unknown key {key}.{sub!r} (known: "
                    f"{', '.join(FILE_KEYS[key])})"
                )
            name = FILE_KEYS[key][sub]
            if name in MAPS and isinstance(sub_value, Mapping):
                sub_value = {**getattr(base, name), **sub_value}
            fields_[name] = sub_value
    return replace(base, **fields_)


def load_config(path: str | Path) -> HandoffConfig:
    """The hand-off config in a YAML or JSON file (JSON is YAML too)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"hand-off config {path}: cannot read it: {exc}") from None
    try:
        return config_from_mapping({} if data is None else data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
