"""What the project relies on of Dagster beyond its stable API, pinned: these fail when it changes.

``leap_pipeline/orchestration/dagster_private.py`` says why the one private API is used and what
breaks without it; it is the only module that imports ``dagster._``. ``dagster_beta.py`` accepts
the two beta parameters the assets use, only while they are built.
"""

import datetime as dt
import inspect
import re
import warnings
from pathlib import Path

import dagster as dg

from leap_pipeline.orchestration import dagster_private
from leap_pipeline.orchestration.dagster_private import (
    current_definitions_state,
    own_definitions_state,
)

PROJECT = Path(__file__).resolve().parents[1]
PRIVATE_IMPORT = re.compile(r"^\s*(from|import)\s+dagster\._", re.M)


def test_the_private_api_keeps_its_name_and_signature():
    from dagster._core.storage.defs_state.base import DefsStateStorage, set_defs_state_storage

    assert list(inspect.signature(set_defs_state_storage).parameters) == ["storage"]
    assert inspect.ismethod(DefsStateStorage.get)  # a classmethod, read when definitions load
    assert list(inspect.signature(DefsStateStorage.get).parameters) == []


def test_entering_an_instance_still_sets_the_storage_and_the_wrapper_clears_it():
    """The leak the wrapper guards against (an entered instance leaves its storage in the
    context), and the wrapper's behaviour: none inside, the previous one back on exit. When
    Dagster stops setting it, the first assertion fails: the wrapper may then go."""
    assert current_definitions_state() is None  # conftest's fixture: each test starts clean
    with dg.instance_for_test() as instance:
        storage = instance.defs_state_storage
        assert storage is not None
        assert current_definitions_state() is storage
        with own_definitions_state():
            assert current_definitions_state() is None
        assert current_definitions_state() is storage
    assert current_definitions_state() is None


def test_only_the_wrapper_imports_dagster_private_modules():
    importers = sorted(
        str(path.relative_to(PROJECT))
        for folder in ("leap_pipeline", "leap_serving", "tests", "benchmarks", "scripts")
        for path in (PROJECT / folder).rglob("*.py")
        if path != Path(__file__).resolve() and PRIVATE_IMPORT.search(path.read_text())
    )
    assert importers == [str(Path(dagster_private.__file__).relative_to(PROJECT))]


def test_building_the_assets_warns_of_no_beta_parameter_and_leaves_no_filter():
    """The beta parameters still warn (else ``dagster_beta`` can go), the builders silence them,
    and the process's warning filters are the same after as before."""
    from leap_pipeline.orchestration.calendar import Calendar
    from leap_pipeline.orchestration.definitions import build_definitions

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dg.TimeWindowPartitionMapping(allow_nonexistent_upstream_partitions=True)
    assert [w.category for w in caught] == [dg.BetaWarning]

    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_definitions(Calendar(first_day=dt.date(2026, 1, 1)))
    assert [str(w.message) for w in caught if issubclass(w.category, dg.BetaWarning)] == []
    assert list(warnings.filters) == before
