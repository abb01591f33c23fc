"""The ranked types an adapter hands on, or the reason there are none.

An adapter turns a preference list into a hard or soft constraint; an empty ranking has nothing
to constrain to, and handing the job on unconstrained would read as "any hardware is fine", so
each adapter refuses it with the ranking's own reason.
"""

from __future__ import annotations

from ..decide.results import Ranking


class HandoffError(ValueError):
    """Nothing to hand on: the ranking is empty, or the map names none of its types."""


def ranked_types(ranking: Ranking) -> list[str]:
    """The ranking's types best first; ``HandoffError`` with the reason when there are none."""
    types = ranking.preference_list
    if not types:
        reason = ranking.reason or "no candidate was ranked"
        raise HandoffError(f"no ranking to hand on: {reason}")
    return types
