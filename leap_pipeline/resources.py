"""Dagster resources: where the sources come from and where the warehouse lives.

Both are set in one place: run config (``resources: {source: {config: {uri: ...}}}``) or, when
left empty, the environment (``LEAP_SOURCE``, ``LEAP_WAREHOUSE``), read when a run starts.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from .sources import Source, source_from_uri
from .warehouse import Warehouse, open_warehouse


class SourceResource(dg.ConfigurableResource):
    """``simulator[:seed=S,scale=X]`` or ``files:/folder``; empty: ``$LEAP_SOURCE`` or the
    default simulated fleet."""

    uri: str = ""

    def source(self) -> Source:
        return source_from_uri(self.uri)


class WarehouseResource(dg.ConfigurableResource):
    """Path of the DuckDB file; empty: ``$LEAP_WAREHOUSE`` or ``data/leap.duckdb``."""

    path: str = ""

    @contextmanager
    def open(self) -> Iterator[Warehouse]:
        with open_warehouse(self.path or None) as warehouse:
            yield warehouse
