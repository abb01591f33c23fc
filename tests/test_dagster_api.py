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
import pytest

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


def test_a_leaked_instance_collected_mid_load_never_puts_a_dead_storage_back(tmp_path):
    """Two instances entered and never exited, collected while definitions load: the collector
    closes each one's suspended storage setter, which resets the context to the storage current
    when it was entered (the older, dead one). Inside the bare guard that reset lands and a
    later resolve fails (as CI did); in ``without_definitions_state``'s copy of the context it
    is refused, and ``build_definitions`` returns definitions already resolved."""
    import gc

    from leap_pipeline.orchestration.calendar import Calendar
    from leap_pipeline.orchestration.dagster_private import without_definitions_state
    from leap_pipeline.orchestration.definitions import build_definitions

    def leak(name: str) -> list[dg.DagsterInstance]:
        """An instance entered and never exited, entered while an older instance's storage was
        current; that older instance is exited and gone, so its storage's weakref is dead."""
        (tmp_path / f"{name}-older").mkdir()
        (tmp_path / f"{name}-leaked").mkdir()
        older = dg.DagsterInstance.local_temp(str(tmp_path / f"{name}-older"))
        leaked = dg.DagsterInstance.local_temp(str(tmp_path / f"{name}-leaked"))
        older.__enter__()
        leaked.__enter__()
        older.__exit__(None, None, None)
        del older
        gc.collect()
        return [leaked]

    collecting = gc.isenabled()
    gc.disable()
    try:
        leaked = leak("copied")

        def load() -> dg.Definitions:
            leaked.clear()
            gc.collect()
            assert current_definitions_state() is None
            return build_definitions(Calendar(first_day=dt.date(2026, 1, 1)))

        definitions = without_definitions_state(load)

        leaked = leak("guarded")
        with own_definitions_state():
            assert current_definitions_state() is None
            leaked.clear()
            gc.collect()
            dead = current_definitions_state()
            assert dead is not None  # the bare guard let the older storage back in
            with pytest.raises(dg.DagsterInvariantViolationError, match="weakref"):
                dead.get_latest_defs_state_info()
            graph = definitions.resolve_asset_graph()  # resolved already: the storage is not read
            upstream = graph.get_parent_partition_keys_for_child(
                "2026-02-10", dg.AssetKey("feature_table"), dg.AssetKey("cascade_model")
            )
            assert len(upstream.partitions_subset.get_partition_keys()) == 31
    finally:
        if collecting:
            gc.enable()
