"""The one private Dagster API the project uses, and why: nothing else imports ``dagster._``.

Dagster 1.13 keeps the definitions-state storage of the last ``DagsterInstance`` entered in a
context variable (``DagsterInstance.__enter__`` sets it; ``DefsStateStorage.get()`` reads it when
definitions load). An instance entered and never exited (a schedule's context, a test's
``instance_for_test`` in a thread) leaves it set, and once that instance is garbage-collected
every later definitions load in the process fails with "Attempted to resolve undefined
DagsterInstance weakref": seen between two runs of ``materialize_days`` in one test, and in CI in
whichever test the collector reached first.

Dagster has no public way to clear that variable: ``set_defs_state_storage`` lives in
``dagster._core.storage.defs_state.base``, and the only public path to it, entering a fresh
``DagsterInstance.ephemeral()``, builds a whole instance for a side effect Dagster does not
document. So it is wrapped here, and ``tests/test_dagster_api.py`` pins what we rely on:
the import, its one ``storage`` parameter, that it is a context manager that sets the storage
``DefsStateStorage.get()`` returns and restores the previous one on exit, and that entering an
instance still sets it (the leak this guards against). If Dagster renames or moves it, that test
fails at once (and so does importing this module); if Dagster stops leaking the storage, the
test says so and ``own_definitions_state`` and ``without_definitions_state`` can go. dagster is
pinned (pyproject.toml), so the test runs before any upgrade lands.

Clearing the variable for a block is not enough on its own. A leaked instance keeps, in its
exit stack, the suspended context manager that set its storage; when the collector reaches it,
that manager's ``finally`` resets the variable to the value current when the instance was
entered, in whatever context is running then: possibly an older instance's storage whose
instance is already gone, in the middle of a block that had cleared it (CI failed so in a test
that only built and resolved the definitions). ``without_definitions_state`` therefore runs its
load in a copy of the context: a reset of a token made outside the copy is refused there, and
Dagster then writes None, so nothing collected from before can put a storage back inside.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from dagster._core.storage.defs_state.base import DefsStateStorage, set_defs_state_storage

T = TypeVar("T")


@contextmanager
def own_definitions_state() -> Iterator[None]:
    """Load definitions and run with no definitions-state storage inherited, and leave none:
    the block sees no storage in the context, and whatever was there is put back on the way
    out."""
    with set_defs_state_storage(None):
        yield


def without_definitions_state(load: Callable[[], T]) -> T:
    """``load()``, run in a copy of the current context with no definitions-state storage: what
    it builds, resolves or executes never reads a storage inherited from an instance, nor one a
    collected leak restores while it runs (the module's docstring says how that happens)."""
    return contextvars.copy_context().run(_with_no_storage, load)


def _with_no_storage(load: Callable[[], T]) -> T:
    with own_definitions_state():
        return load()


def current_definitions_state() -> DefsStateStorage | None:
    """The definitions-state storage a definitions load would see now (None when none is set)."""
    return DefsStateStorage.get()
