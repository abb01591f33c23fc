"""One hand-off format by name, as the text ``leap rank --format`` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from ..decide.results import Ranking
from .config import HandoffConfig
from .kubernetes import kubernetes_job
from .ranked import HandoffError
from .skypilot import skypilot_task, skypilot_yaml
from .slurm import sbatch_flags, sbatch_line

FORMATS = ("skypilot", "k8s", "slurm")


def devices_per_host(job: Any) -> int | None:
    """The launch's ``requested_devices_per_host`` as a count, or None when it does not say."""
    value = job.get("requested_devices_per_host") if isinstance(job, Mapping) else None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value == int(value) and value >= 1:
        return int(value)
    raise HandoffError(f"requested_devices_per_host={value!r} is not a positive count")


def render(fmt: str, ranking: Ranking, config: HandoffConfig, job: Any = None) -> str:
    """The ranking in ``fmt`` (one of ``FORMATS``); ``HandoffError`` when there is none."""
    if fmt == "skypilot":
        return skypilot_yaml(skypilot_task(ranking, config, devices_per_host(job)))
    if fmt == "k8s":
        return yaml.safe_dump(kubernetes_job(ranking, config, devices_per_host(job)),
                              sort_keys=False)  # fmt: skip
    if fmt == "slurm":
        return sbatch_line(sbatch_flags(ranking, config))
    raise ValueError(f"format={fmt!r} is not one of {', '.join(FORMATS)}")
