"""A ranking as sbatch flags: ``--constraint`` admits the best ``top_k`` types' node features, ORed,
and ``--prefer`` asks for the best one.

Slurm (22.05 and later) places a job on nodes having the ``--prefer`` features when it can and
falls back to any node that satisfies ``--constraint`` otherwise; ``a|b|c`` lets each node match
any one of the features. The features are the node ``Feature=`` names of slurm.conf
(``HandoffConfig.slurm_features``; by default the type in lower case).
``examples/job_submit.lua`` sets the same two fields at submission, asking ``leap serve``.
"""

from __future__ import annotations

from ..decide.results import Ranking
from .config import FEATURE, HandoffConfig
from .ranked import HandoffError, ranked_types


def slurm_features(ranking: Ranking, config: HandoffConfig | None = None) -> list[str]:
    """The node features of the best ``top_k`` ranked types, best first."""
    config = config or HandoffConfig()
    features = list(dict.fromkeys(config.slurm_feature(t) for t in ranked_types(ranking)))
    for feature in features:
        if not FEATURE.fullmatch(feature):  # a type's default name, outside the map
            raise HandoffError(f"slurm: feature {feature!r} holds a character a constraint "
                               "reads; name it in slurm_features")  # fmt: skip
    return features[: config.top_k]


def sbatch_flags(ranking: Ranking, config: HandoffConfig | None = None) -> list[str]:
    """``["--constraint", "a|b|c", "--prefer", "a"]``: the argv words for sbatch."""
    features = slurm_features(ranking, config)
    return ["--constraint", "|".join(features), "--prefer", features[0]]


def sbatch_line(flags: list[str]) -> str:
    """The flags as one line for ``sbatch $(leap rank --format slurm) job.sh``:
    ``--constraint=a|b|c --prefer=a``. A command substitution splits words but reads no quotes,
    so nothing is quoted; the features hold no space or glob character (``FEATURE``)."""
    return " ".join(f"{flag}={value}" for flag, value in zip(flags[::2], flags[1::2], strict=True))
