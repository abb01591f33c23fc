"""The two Dagster beta parameters every partitioned asset relies on, on purpose, accepted quietly.

``backfill_policy`` (``BackfillPolicy.single_run``: a backfill of many days is one run) and
``TimeWindowPartitionMapping``'s ``allow_nonexistent_upstream_partitions`` (a window that reaches
before the first partition) warn with ``dagster.BetaWarning`` each time an asset is built with
them, in every process that loads the definitions. ``beta_parameters_accepted`` silences exactly
those two warnings, and only while the assets are built: the filter is scoped with
``warnings.catch_warnings`` (process-wide while the block runs, as Python's filters are), never
installed at import. Any other warning, Dagster's included, goes through.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import dagster as dg

BETA_PARAMETERS = ("backfill_policy", "allow_nonexistent_upstream_partitions")

P = ParamSpec("P")
R = TypeVar("R")


def beta_parameters_accepted(build: Callable[P, R]) -> Callable[P, R]:
    """``build`` (a function that builds assets) with the two beta parameters' warnings
    silenced while it runs."""

    @functools.wraps(build)
    def quietly(*args: P.args, **kwargs: P.kwargs) -> R:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=rf"Parameter `({'|'.join(BETA_PARAMETERS)})`",
                category=dg.BetaWarning,
            )
            return build(*args, **kwargs)

    return quietly
