"""leap_serving: the runtime a job launcher calls (``leap_serving.Ranker``) and the pure core the
pipeline shares with it. Importing the package loads nothing heavy; ``Ranker`` and its result
types load on first use."""

__all__ = ["CandidateScore", "Ranker", "Ranking"]


def __getattr__(name: str):
    if name in __all__:
        from . import ranking

        return getattr(ranking, name)
    raise AttributeError(f"module 'leap_serving' has no attribute {name!r}")
