"""A ranking as Kubernetes node affinity: what both the Job and the webhook's patch carry.

The required term admits the best ``top_k`` types the map names (``In`` on the GPU Feature
Discovery label ``nvidia.com/gpu.product``); the preferred terms weigh them in rank order with
strictly decreasing weights (100 down to 100/k), so the scheduler's node-affinity score puts the
best type's nodes first among those that fit. Kueue tries a ClusterQueue's flavors in its own
order and only the required term narrows them (docs/serving.md).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from ..decide.results import Ranking
from .config import HandoffConfig
from .ranked import HandoffError, ranked_types


def weights(k: int) -> list[int]:
    """``k`` weights in 1..100, strictly decreasing: ceil(100 (k - i) / k) for rank i."""
    return [math.ceil(100 * (k - i) / k) for i in range(k)]


def products(ranking: Ranking, config: HandoffConfig) -> list[str]:
    """The label values of the best ``top_k`` ranked types the map names, in rank order."""
    types = ranked_types(ranking)
    values = list(dict.fromkeys(config.gpu_products[t] for t in types if t in config.gpu_products))
    if not values:
        raise HandoffError(
            f"kubernetes: no ranked type has a {config.gpu_label} value in the "
            f"map (ranked: {', '.join(types)})"
        )
    return values[: config.top_k]


def admitted_types(ranking: Ranking, config: HandoffConfig) -> list[str]:
    """The ranked types the required term admits (their label value among ``products``), best
    first: the types a pod may land on, so the ones its device count must fit."""
    values = set(products(ranking, config))
    return [t for t in ranked_types(ranking) if config.gpu_products.get(t) in values]


def unmapped_types(ranking: Ranking, config: HandoffConfig) -> list[str]:
    """The ranked types the affinity leaves out because the map gives them no label value, best
    first; returned, not printed, so the caller (``leap rank``) says so where a user reads it."""
    return [t for t in ranking.preference_list if t not in config.gpu_products]


def node_affinity(ranking: Ranking, config: HandoffConfig | None = None) -> dict[str, Any]:
    """The ``nodeAffinity``: required ``In`` the top-k, preferred by rank."""
    config = config or HandoffConfig()
    values = products(ranking, config)
    term = {"key": config.gpu_label, "operator": "In", "values": values}
    preferred = [
        {"weight": w, "preference": {"matchExpressions": [{**term, "values": [v]}]}}
        for w, v in zip(weights(len(values)), values, strict=True)
    ]
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [term]}]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": preferred,
    }


def merged_affinity(existing: Any, ours: Mapping[str, Any]) -> dict[str, Any]:
    """A pod's ``affinity`` with ours added: our required expression joins (AND) each of its
    required terms (terms are ORed, so adding a term would widen them), our preferred terms
    follow its own; its pod (anti-)affinity is kept."""
    affinity = copy.deepcopy(dict(existing)) if isinstance(existing, Mapping) else {}
    node = affinity.get("nodeAffinity")
    node = dict(node) if isinstance(node, Mapping) else {}
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    preferred_key = "preferredDuringSchedulingIgnoredDuringExecution"
    (our_expression,) = ours[required_key]["nodeSelectorTerms"][0]["matchExpressions"]
    terms = (node.get(required_key) or {}).get("nodeSelectorTerms") or []
    if terms:
        node[required_key] = {
            "nodeSelectorTerms": [
                {**t, "matchExpressions": [*(t.get("matchExpressions") or []), our_expression]}
                for t in terms
            ]
        }
    else:
        node[required_key] = copy.deepcopy(ours[required_key])
    node[preferred_key] = [*(node.get(preferred_key) or []), *ours[preferred_key]]
    affinity["nodeAffinity"] = node
    return affinity


def ranking_annotations(ranking: Ranking) -> dict[str, str]:
    """What the hand-off records on the object: the ranking and the model that answered."""
    return {
        "leap.dev/ranking": ",".join(ranking.preference_list),
        "leap.dev/model-version": str(ranking.model_version),
    }
