import os
import tempfile

import pytest

# the tests never read the data folder of the checkout (a user's, or the one `leap demo` left):
# its calendar file would set their partitions and default source
os.environ["LEAP_DATA"] = tempfile.mkdtemp(prefix="leap-tests-data-")


from leap_pipeline.simulation import SimulatedFleet

SMALL_SCALE = 0.05


@pytest.fixture(scope="session")
def small_fleet() -> SimulatedFleet:
    return SimulatedFleet(seed=3, scale=SMALL_SCALE)


@pytest.fixture(autouse=True)
def _no_leaked_definitions_state_storage():
    """Each test starts with no Dagster definitions-state storage in the context. Dagster 1.13
    keeps the storage of the last instance entered in a context variable; an instance a test
    enters and never exits (a schedule context, ``instance_for_test`` in a thread) leaves it set,
    and once that instance is garbage-collected every later definitions load in the process fails
    with "Attempted to resolve undefined DagsterInstance weakref" (seen in CI, in whichever test
    the collector happened to reach first). The private Dagster API behind it is wrapped in
    ``leap_pipeline/orchestration/dagster_private.py``."""
    from leap_pipeline.orchestration.dagster_private import own_definitions_state

    with own_definitions_state():
        yield
