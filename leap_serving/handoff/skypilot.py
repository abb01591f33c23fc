"""A ranking as a SkyPilot task: ``resources.ordered`` lists the candidates best first.

SkyPilot's optimizer tries ``ordered`` resources in the order given and moves to the next only
when one cannot be provisioned, so the ranking's order is the order the job lands in. The user's
base task (name, setup, run, envs and the rest) is kept; its resources' other fields (cloud, disk,
spot...) stay as the fields every ordered entry shares. The launch sets the device counts and
``num_nodes`` (``devices.LaunchDevices``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from ..decide.results import Ranking
from .config import HandoffConfig
from .devices import LaunchDevices
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
    ranking: Ranking, config: HandoffConfig | None = None, devices: LaunchDevices | None = None
) -> dict[str, Any]:
    """The task with ``resources.ordered`` in rank order, one ``accelerators: NAME:COUNT`` each,
    and ``num_nodes`` the launch's ``num_trainers``.

    COUNT is the launch's devices per node on that type (``LaunchDevices.per_node``: its
    ``requested_devices_per_host`` capped by the host, else the whole host), since that is what
    the ranking priced; each entry has its own, so types of different host sizes each get theirs.
    Without a launch, the base task's own count, else 1. A base ``num_nodes`` that disagrees
    with the launch is refused rather than overridden: one of the two is a mistake.
    """
    config = config or HandoffConfig()
    devices = devices or LaunchDevices()
    types = ranked_types(ranking)
    base = dict(config.skypilot_task or {"name": "leap-job"})
    resources = base.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise HandoffError(f"skypilot task: resources={resources!r} is not a mapping")
    if devices.nodes is not None:
        if base.get("num_nodes", devices.nodes) != devices.nodes:
            raise HandoffError(
                f"skypilot task: num_nodes={base['num_nodes']!r} but the launch's "
                f"num_trainers={devices.nodes}: make them agree (or leave "
                "num_nodes out of the task)"
            )
        base["num_nodes"] = devices.nodes
    fallback = base_count(resources) or 1
    if fallback < 1:
        raise HandoffError(
            f"skypilot task: resources.accelerators count {fallback} is not a positive count"
        )
    entries = []
    for hardware_type in types:
        count = devices.required(hardware_type, "skypilot task")
        entries.append(f"{config.skypilot_name(hardware_type)}:{count or fallback}")
    shared = {k: v for k, v in resources.items() if k not in CHOOSING}
    ordered = [{"accelerators": a} for a in dict.fromkeys(entries)]  # two types, one name
    return {**base, "resources": {**shared, "ordered": ordered}}


def skypilot_yaml(task: Mapping[str, Any]) -> str:
    """The task as the YAML ``sky launch`` reads, keys in the order built."""
    return yaml.safe_dump(dict(task), sort_keys=False, default_flow_style=False)
