"""What a launch asks of the scheduler: how many nodes, and how many devices on each node of a type.

The launch contract says it (``contract.JOB_ATTEMPTS``): ``num_trainers`` hosts, each using
``requested_devices_per_host`` devices capped by the type's host size, or the whole host when the
launch does not say. The ranker prices each candidate on exactly that count
(``contract.job_devices``), so a hand-off that asked the scheduler for another one would run a job
the ranking never priced: ``num_trainers: 2`` handed on as one device is a different job.

The rule is applied here to one host in plain Python rather than by importing ``job_devices``:
the contract module loads polars and numpy (about 0.3 s), which ``leap rank --server --format``
must not wait for; ``tests/test_rank_server.py`` holds the two equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .ranked import HandoffError

# a count a launch may give as text, as the ranker reads it (``decide.launch_fields``)
_WHOLE_TEXT = re.compile(r"[0-9]{1,19}")


def _count(job: Mapping[str, Any], name: str) -> int | None:
    """The launch field ``name`` as a positive whole count, None when the launch leaves it out;
    ``HandoffError`` naming the field and value otherwise."""
    value = job.get(name)
    if value is None:
        return None
    if isinstance(value, str) and _WHOLE_TEXT.fullmatch(value.strip()):
        value = int(value)
    whole = isinstance(value, int | float) and not isinstance(value, bool) and value == int(value)
    if not whole or value < 1:
        raise HandoffError(f"{name}={value!r} is not a positive whole count")
    return int(value)


@dataclass(frozen=True)
class LaunchDevices:
    """The nodes a launch takes and the devices it uses on each, per hardware type.

    ``nodes`` is the launch's ``num_trainers`` (None: no launch was given); ``requested`` its
    ``requested_devices_per_host`` (None: whole hosts); ``host_sizes`` the spec table's
    ``devices_per_host`` by type, which a launch asking for whole hosts needs.
    """

    nodes: int | None = None
    requested: int | None = None
    host_sizes: Mapping[str, float] = field(default_factory=dict)

    @property
    def from_launch(self) -> bool:
        """Whether a launch said anything: without one the base task or Job keeps its own."""
        return self.nodes is not None or self.requested is not None

    def per_node(self, hardware_type: str) -> int | None:
        """Devices on each node of ``hardware_type``: the contract's ``job_devices`` for one host
        (the request capped by the host, else the whole host); None when neither is known."""
        host = self.host_sizes.get(hardware_type)
        if host is None:
            return self.requested
        return int(host if self.requested is None else min(self.requested, host))

    def required(self, hardware_type: str, where: str) -> int | None:
        """``per_node``, or ``HandoffError`` when a launch was given and its count on the type is
        still unknown (whole hosts of a type without a host size): guessing one device is how
        ``num_trainers: 2`` once became ``L4:1``. None only when no launch was given."""
        count = self.per_node(hardware_type)
        if count is None and self.from_launch:
            raise HandoffError(
                f"{where}: the launch sets no requested_devices_per_host and the host size of "
                f"{hardware_type} is unknown: set requested_devices_per_host in the launch"
            )
        return count

    def shared_per_node(self, types: Iterable[str], where: str) -> int | None:
        """The one count a single pod template or sbatch line asks for, across the ``types`` it
        admits; ``HandoffError`` when they differ (a job handed a count that fits one type's
        hosts would run a job the ranking did not price on the other). None when no launch
        was given."""
        counts = {t: self.required(t, where) for t in types}
        known = set(counts.values()) - {None}
        if len(known) > 1:
            shown = ", ".join(f"{t}: {c}" for t, c in counts.items())
            raise HandoffError(
                f"{where}: the admitted types use different devices per node ({shown}) and one "
                "request cannot ask for both: set requested_devices_per_host in the launch, at "
                "most the smallest host, or lower top_k"
            )
        return known.pop() if known else None


def launch_devices(job: Any, host_sizes: Mapping[str, float] | None = None) -> LaunchDevices:
    """The launch's nodes and requested devices per node (``job``: the launch config as ``leap
    rank --job`` reads it; anything but a mapping says nothing), with the host sizes by type."""
    sizes = dict(host_sizes or {})
    for hardware_type, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int | float) or not size >= 1:
            raise HandoffError(f"devices_per_host={size!r} of {hardware_type} is not a host size")
    if not isinstance(job, Mapping):
        return LaunchDevices(host_sizes=sizes)
    return LaunchDevices(
        _count(job, "num_trainers"), _count(job, "requested_devices_per_host"), sizes
    )
