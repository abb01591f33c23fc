"""A ranking as a SkyPilot task: ``resources.ordered`` lists the candidates best first.

SkyPilot's optimizer tries ``ordered`` resources in the order given and moves to the next only
when one cannot be provisioned, so the ranking's order is the order the job lands in. The user's
base task (name, setup, run, num_nodes, envs and the rest) is kept; its resources' other fields
(cloud, disk, spot...) stay as the fields every ordered entry shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from ..decide.results import Ranking
from .config import HandoffConfig
from .ranked import HandoffError, ranked_types

# the resource fields that choose accelerators: the ranking replaces them
CHOOSING = ("accelerators", "ordered", "any_of")


def base_count(resources: Mapping[str, Any]) -> int | None:
    """The accelerator count a base task already asks for (``NAME:COUNT`` or ``{NAME: COUNT}``)."""
    accelerators = resources.get("accelerators")
    if isinstance(accelerators, Mapping) and len(accelerators) == 1:
        (count,) = accelerators.values()
    elif isinstance(accelerators, str) and ":" in accelerators:
        count = accelerators.rsplit(":", 1)[1]
    else:
        return None
    try:
        return int(count)
    except (TypeError, ValueError):
        return None


def skypilot_task(
    ranking: Ranking, config: HandoffConfig | None = None, devices_per_node: int | None = None
) -> dict[str, Any]:
    """The task with ``resources.ordered`` in rank order, one ``accelerators: NAME:COUNT`` each.

    The count is ``devices_per_node`` (the launch's ``requested_devices_per_host``), else the
    base task's own count, else 1.
    """
    config = config or HandoffConfig()
    types = ranked_types(ranking)
    base = dict(config.skypilot_task or {"name": "leap-job"})
    resources = base.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise HandoffError(f"skypilot task: resources={resources!r} is not a mapping")
    count = devices_per_node if devices_per_node is not None else base_count(resources) or 1
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise HandoffError(f"skypilot task: devices per node {count!r} is not a positive count")
    shared = {k: v for k, v in resources.items() if k not in CHOOSING}
    names = list(dict.fromkeys(config.skypilot_name(t) for t in types))  # two types, one name
    ordered = [{"accelerators": f"{name}:{count}"} for name in names]
    return {**base, "resources": {**shared, "ordered": ordered}}


def skypilot_yaml(task: Mapping[str, Any]) -> str:
    """The task as the YAML ``sky launch`` reads, keys in the order built."""
    return yaml.safe_dump(dict(task), sort_keys=False, default_flow_style=False)
