import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

# an xdist worker has a core of its own: OpenMP pools as wide as the machine (LightGBM's, the
# BLAS's) in every worker would run two threads on each core, and their spin-waits burn time the
# other worker needs. Set before anything imports them (CI sets it for every run already)
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# the tests never read the data folder of the checkout (a user's, or the one `leap demo` left):
# its calendar file would set their partitions and default source
os.environ["LEAP_DATA"] = tempfile.mkdtemp(prefix="leap-tests-data-")


from leap_pipeline.simulation import SimulatedFleet

SMALL_SCALE = 0.05


@pytest.fixture(scope="session")
def small_fleet() -> SimulatedFleet:
    return SimulatedFleet(seed=3, scale=SMALL_SCALE)


# the smallest demo that promotes a model, as `leap demo` runs it for a user
SMALL_DEMO_DAYS = 10
SMALL_DEMO = ("demo", "--scale", "0.02", "--days", str(SMALL_DEMO_DAYS), "--nights", "1")


# the modules whose tests take the ``small_demo`` fixture: under the README's
# ``pytest -n auto --dist loadscope`` they run on one worker (``pytest_xdist_make_scheduler``),
# so the session's demo is run once, not once per worker that draws one of them (about 30 s
# each). tests/test_layout.py checks the list against the tests that take the fixture
SHARE_THE_SMALL_DEMO = (
    "tests/test_backup.py",
    "tests/test_nightly.py",
    "tests/test_plan.py",
    "tests/test_ui.py",
)


# the modules that cross-validate on NeuSight's rows holding GPUs out: each fold's kernel model
# (``studies.kernel_prior.kernel_model``, about 4 s a fit) is kept by the process that fitted it,
# so on one worker they fit 13 kernel models between them, not 23 (three modules alone took
# 114 s in all on one core, 83 s in one process)
SHARE_THE_KERNEL_MODELS = (
    "tests/test_crossval.py",
    "tests/test_selection.py",
    "tests/test_small_data.py",
)

# the modules each group of which one worker runs, by the group's scope name
SHARED_SCOPES = {
    **dict.fromkeys(SHARE_THE_SMALL_DEMO, "the small demo's modules"),
    **dict.fromkeys(SHARE_THE_KERNEL_MODELS, "the kernel models' modules"),
}


@pytest.hookimpl(optionalhook=True)  # CI's SkyPilot environment has no pytest-xdist
def pytest_xdist_make_scheduler(config, log):
    """loadscope's scheduling, with each group of ``SHARED_SCOPES`` one scope."""
    if config.getoption("dist", None) != "loadscope":
        return None
    return small_demo_scheduling()(config, log)


def small_demo_scheduling() -> type:
    """xdist's loadscope scheduling with each group of ``SHARED_SCOPES`` (the small demo's
    modules, the kernel models') one scope. It overrides ``LoadScopeScheduling._split_scope``,
    xdist's own method rather than its public API: pytest-xdist is pinned (constraints.txt),
    and tests/test_layout.py fails if the override stops grouping the modules."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            shared = SHARED_SCOPES.get(nodeid.split("::", 1)[0])
            return shared if shared is not None else super()._split_scope(nodeid)

    return SharedScopes


@dataclass(frozen=True)
class SmallDemo:
    """A folder ``leap demo`` (``SMALL_DEMO``) made, the command (without ``--json``) and what
    it printed."""

    data: Path
    command: tuple[str, ...]
    stdout: str
    stderr: str
    days: int = SMALL_DEMO_DAYS  # the days it landed


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory) -> SmallDemo:
    """``leap demo`` at the smallest scale, run once in a process of its own and shared by the
    tests of the backup, the nightly schedule and the UI: a warehouse, records, an MLflow store
    with a production alias (version 1), a Dagster home, a calendar and the nights' folders
    behind their symlinks. Each of those tests ran its own (about 25 s apiece alone). A test may add
    to the folder what leaves version 1 in production and the demo's days landed (a day landed
    after them, a re-run of the same demo); one that moves the folder puts it back."""
    data = tmp_path_factory.mktemp("small-demo") / "data"
    drop = ("DAGSTER_HOME", "LEAP_DATA", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(DAGSTER_DISABLE_TELEMETRY="1", MLFLOW_DISABLE_TELEMETRY="true")
    command = (sys.executable, "-m", "leap_pipeline.app.cli", *SMALL_DEMO, "--data", str(data))
    done = subprocess.run(
        [*command, "--json"], capture_output=True, text=True, env=env, cwd=data.parent
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return SmallDemo(data, command, done.stdout, done.stderr)


@pytest.fixture(autouse=True)
def _no_leaked_definitions_state_storage():
    """Each test starts with no Dagster definitions-state storage in the context. Dagster 1.13
    keeps the storage of the last instance entered in a context variable; an instance a test
    enters and never exits (a schedule context, ``instance_for_test`` in a thread) leaves it set,
    and once that instance is garbage-collected every later definitions load in the process fails
    with "Attempted to resolve undefined DagsterInstance weakref" (seen in CI, in whichever test
    the collector happened to reach first). The guard is not proof against the collector
    itself: a leaked instance collected during the test puts back the storage it found, so
    ``build_definitions``, ``run_days`` and ``land_days`` resolve and run in a context of their
    own (``without_definitions_state``), as must a test that resolves definitions itself. The
    private Dagster API behind it is wrapped in ``leap_pipeline/orchestration/dagster_private.py``.
    """
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


@pytest.fixture(scope="session", autouse=True)
def _mlflow_stores_from_a_migrated_template(tmp_path_factory):
    """Each fresh SQLite MLflow store a test process makes is a copy of one store migrated
    once per process, not migrated again: MLflow builds a new store by running every one of its
    schema migrations, about 1 s a store, and the README's test command made 29 stores. The
    copy is made with SQLite's backup API into the file MLflow has just created, where MLflow
    would migrate it, and only into a SQLite file with no table yet; a store with tables, every
    other backend, and every process a test starts, migrate as MLflow does.
    tests/test_mlflow_template.py checks the copy is the store MLflow's own migration makes.
    The patched function is MLflow's private ``_initialize_tables`` (mlflow is pinned in
    constraints.txt). Yields the unpatched one. A run none of whose test modules imports MLflow
    (as collected) imports none of it here either; a store one of its tests makes migrates."""
    if "mlflow" not in sys.modules:  # no test module of this run imports MLflow: nor does this
        yield None
        return
    from mlflow.store.db import utils as db_utils
    from mlflow.store.model_registry import sqlalchemy_store as registry_store
    from mlflow_template import copy_a_migrated_template

    migrate = db_utils._initialize_tables
    copying = copy_a_migrated_template(migrate, tmp_path_factory.mktemp("mlflow-template"))
    db_utils._initialize_tables = registry_store._initialize_tables = copying
    yield migrate
    db_utils._initialize_tables = registry_store._initialize_tables = migrate
