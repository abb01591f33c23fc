"""leap_serving: the runtime a job launcher calls (``leap_serving.Ranker``) and the pure core the
pipeline shares with it. Importing the package loads nothing heavy; ``Ranker`` and its result
types load on first use.

Four subpackages, each importing only those after it: ``decide`` (the Ranker, its policy and the
metrics), ``registry`` (MLflow: the only subpackage that imports it), ``model`` (the cascade, its
files and the published model) and ``launch`` (the data contract and a launch's features).
``leap_serving.pyfunc`` is only the name versions registered before the subpackages import.
"""

__all__ = ["CandidateScore", "Ranker", "Ranking"]


def __getattr__(name: str):
    if name == "Ranker":
        from .decide.ranker import Ranker

        return Ranker
    if name in __all__:
        from .decide import results

        return getattr(results, name)
    raise AttributeError(f"module 'leap_serving' has no attribute {name!r}")
