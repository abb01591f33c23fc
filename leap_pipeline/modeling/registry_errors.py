"""What an MLflow error says of the registry: only "does not exist" means absent.

The registry is read before every decision on the production alias (the nightly promotion, a
person's pin, carrying the demo's model into the service's registry) and to plan the nights. A
timeout, a 5xx, a 401 or a 403 says nothing of what the registry holds: read as "absent", one
blip could undo a pinned rollback, move the alias backwards or carry the demo's model over real
production. Those errors raise ``RegistryUnavailable`` instead, so the decision fails closed.
"""

from __future__ import annotations

from mlflow.exceptions import MlflowException

from leap_serving.registry.rest import says_absent


class RegistryUnavailable(RuntimeError):
    """The registry answered with an error that is not "does not exist" (a timeout, a 5xx, a
    401 or 403): what it holds is unknown, so a decision that needs it must not be taken."""


def is_absent(exc: MlflowException) -> bool:
    """Whether MLflow's error says the thing asked for does not exist: a registered model or
    version (``RESOURCE_DOES_NOT_EXIST``), or an alias (which MLflow answers as an invalid
    parameter "alias ... not found"). Any other error says nothing of what exists."""
    return says_absent(getattr(exc, "error_code", ""), str(exc))


def absent_or_raise(exc: MlflowException, what: str) -> None:
    """Return when ``exc`` says ``what`` does not exist; else raise ``RegistryUnavailable``
    naming it: only "does not exist" means absent, so a blip never reads as "no production
    model", "no pin" or "no night trained"."""
    if not is_absent(exc):
        raise RegistryUnavailable(
            f"the registry could not say {what} ({getattr(exc, 'error_code', '')}: {exc}); "
            "nothing was decided on it"
        ) from exc
