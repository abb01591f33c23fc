"""A ranking as sbatch flags: ``--constraint`` admits the best ``top_k`` types' node features, ORed,
and ``--prefer`` asks for the best one; ``--nodes`` and ``--gres`` ask for the launch's nodes and
devices per node.

Slurm (22.05 and later) places a job on nodes having the ``--prefer`` features when it can and
falls back to any node that satisfies ``--constraint`` otherwise; ``a|b|c`` lets each node match
any one of the features. The features are the node ``Feature=`` names of slurm.conf
(``HandoffConfig.slurm_features``; by default the type in lower case).
``examples/job_submit.lua`` sets the same two fields at submission, asking ``leap serve``.
"""

from __future__ import annotations

from ..decide.results import Ranking
from .config import FEATURE, HandoffConfig
from .devices import LaunchDevices
from .ranked import HandoffError, ranked_types


def slurm_features(ranking: Ranking, config: HandoffConfig | None = None) -> list[str]:
    """The node features of the best ``top_k`` ranked types, best first."""
    config = config or HandoffConfig()
    features = list(dict.fromkeys(config.slurm_feature(t) for t in ranked_types(ranking)))
    for feature in features:
        if not FEATURE.fullmatch(feature):  # a type's default name, outside the map
            raise HandoffError(
                f"slurm: feature {feature!r} holds a character a constraint "
                "reads; name it in slurm_features"
            )
    return features[: config.top_k]


def sbatch_flags(
    ranking: Ranking, config: HandoffConfig | None = None, devices: LaunchDevices | None = None
) -> list[str]:
    """``["--constraint", "a|b|c", "--prefer", "a", "--nodes", "2", "--gres", "gpu:8"]``: the
    argv words for sbatch. ``--nodes`` is the launch's ``num_trainers`` and ``--gres`` (per
    node) its devices per node, the count the ranking priced; one line asks one count, so the
    admitted types must agree on it (``LaunchDevices.shared_per_node``). Without a launch, only
    the features."""
    config = config or HandoffConfig()
    devices = devices or LaunchDevices()
    features = slurm_features(ranking, config)
    flags = ["--constraint", "|".join(features), "--prefer", features[0]]
    if devices.nodes is not None:
        flags += ["--nodes", str(devices.nodes)]
    admitted = [t for t in ranked_types(ranking) if config.slurm_feature(t) in features]
    count = devices.shared_per_node(admitted, "slurm")
    if count is not None:
        flags += ["--gres", f"{config.slurm_gres}:{count}"]
    return flags


def sbatch_line(flags: list[str]) -> str:
    """The flags as one line for ``args=$(leap rank --format slurm) && sbatch $args job.sh``:
    ``--constraint=a|b|c --prefer=a``. A command substitution splits words but reads no quotes,
    so nothing is quoted; the features and the GRES name hold no space or glob character
    (``FEATURE``, ``GRES``)."""
    return " ".join(f"{flag}={value}" for flag, value in zip(flags[::2], flags[1::2], strict=True))
