"""One hand-off format by name, as the text ``leap rank --format`` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from ..decide.results import Ranking
from .affinity import unmapped_types
from .config import HandoffConfig
from .devices import launch_devices
from .kubernetes import kubernetes_job
from .ranked import ranked_types
from .skypilot import skypilot_task, skypilot_yaml
from .slurm import sbatch_flags, sbatch_line, slurm_features

FORMATS = ("skypilot", "k8s", "slurm")


def render(
    fmt: str,
    ranking: Ranking,
    config: HandoffConfig,
    job: Any = None,
    host_sizes: Mapping[str, float] | None = None,
) -> str:
    """The ranking in ``fmt`` (one of ``FORMATS``) asking for the launch's nodes and devices
    (``job``: the launch; ``host_sizes``: the spec table's ``devices_per_host`` by type, for a
    launch that takes whole hosts); ``HandoffError`` when there is nothing to hand on."""
    devices = launch_devices(job, host_sizes)
    if fmt == "skypilot":
        return skypilot_yaml(skypilot_task(ranking, config, devices))
    if fmt == "k8s":
        return yaml.safe_dump(kubernetes_job(ranking, config, devices), sort_keys=False)
    if fmt == "slurm":
        return sbatch_line(sbatch_flags(ranking, config, devices))
    raise ValueError(f"format={fmt!r} is not one of {', '.join(FORMATS)}")


def unmapped(fmt: str, ranking: Ranking, config: HandoffConfig) -> list[str]:
    """The ranked types ``fmt`` leaves out for want of a map entry, best first: Kubernetes
    drops a type without a label value from its affinity (SkyPilot and Slurm hand every type on,
    under its own name when the map has none). Returned so ``leap rank`` can say so on stderr
    instead of dropping them without a word."""
    return unmapped_types(ranking, config) if fmt == "k8s" else []


def guessed_names(fmt: str, ranking: Ranking, config: HandoffConfig) -> dict[str, str]:
    """The ranked types ``fmt`` hands on under a name of its own guessing, for want of a map
    entry (SkyPilot: the type as named; Slurm: the type in lower case), best first, with the
    name used: ``rtx6000-ada`` or ``MI250X:4`` may be no feature or accelerator the scheduler
    knows, and the user must hear of it (Kubernetes leaves such a type out: ``unmapped``)."""
    if fmt == "skypilot":
        names, name_of = config.skypilot_accelerators, config.skypilot_name
    elif fmt == "slurm":
        names, name_of = config.slurm_features, config.slurm_feature
    else:
        return {}
    types = ranked_types(ranking) if ranking.ranking else []
    if fmt == "slurm":  # the types the constraint admits: the top_k features may cover more
        features = set(slurm_features(ranking, config))
        types = [t for t in types if config.slurm_feature(t) in features]
    return {t: name_of(t) for t in types if t not in names}
