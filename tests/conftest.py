import os
import signal
import tempfile
import threading

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


# MLflow exports what ``mlflow.set_tracking_uri`` / ``set_registry_uri`` are given (for its
# subprocesses); a test that points MLflow at its own store must not point later tests' servers
# and clients there (CI's long lane once registered the service test's nights in an HTTP test's
# SQLite registry)
_EXPORTED_BY_MLFLOW = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")


@pytest.fixture(autouse=True)
def _process_state_kept():
    """Each test leaves SIGINT's and SIGTERM's handlers and MLflow's exported URIs as it found
    them. Dagster's in-process runs map SIGTERM to SIGINT's handler; in a pytest started in the
    background (SIGINT ignored) that made SIGTERM ignored too, and every process a later test
    started inherited it: ``kill`` no longer stopped them (seen running CI from a script)."""
    main = threading.current_thread() is threading.main_thread()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    exported = {name: os.environ.get(name) for name in _EXPORTED_BY_MLFLOW}
    yield
    if main:
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
    for name, value in exported.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
