"""The production alias, moved forward: to the newest night of a run whose gate passed, never
backwards, never while a person's rollback pins it, read, compared and moved under one lock;
old versions past retention removed under the same lock."""

import datetime as dt
from contextlib import AbstractContextManager
from pathlib import Path

import dagster as dg

from leap_pipeline.orchestration.calendar import data_folder
from leap_pipeline.orchestration.locks import advisory_held, held
from leap_pipeline.orchestration.resources import (
    MlflowResource,
    TrainingResource,
)
from leap_pipeline.settings import environment


def alias_lock(data: Path | None = None) -> AbstractContextManager[None]:
    """The lock every move of the production alias holds while it reads, compares and moves,
    and retention while it deletes: the nightly promotion, a person's ``leap model promote`` and
    retention take turns. In the service topology (``$LEAP_DATABASE_URL``) it is a Postgres
    advisory lock, which every host of the service shares; on the embedded default, a file in
    the data folder."""
    from leap_pipeline.modeling import registry  # MLflow: imported where it is used

    name = f"{registry.model_name()}.production"
    url = environment().database_url
    if url:
        return advisory_held(url, f"leap-alias:{name}", "the alias")
    folder = data if data is not None else data_folder()
    return held(folder / "locks" / f"{name}.lock", "the alias")


def move_alias(
    context: dg.AssetExecutionContext,
    model_evaluation: dict[str, dict],
    training: TrainingResource,
    mlflow_tracking: MlflowResource,
) -> dg.MaterializeResult:
    """The ``production`` alias: moved to the newest night of the run whose gate passed, on a
    nightly run (or when promotion is asked for), never to a night older than the one it names;
    old versions past retention removed (never one a promotion record names)."""
    from leap_pipeline.modeling import alias_records, registry

    mlflow_tracking.configure()
    passing = [
        (dt.date.fromisoformat(day), record)
        for day, record in sorted(model_evaluation.items())
        if record.get("gate_passed")
    ]
    # read, compare and move under one lock: two runs that promote at once (in-process runs do
    # not queue) cannot move the alias backwards between another's read and its move
    with alias_lock():
        current = registry.production_version()
        current_day = evaluation_day(current)
        moved = None
        pin = alias_records.pinned()
        if not passing:
            note = "not promoted: no night of the run passed its gate"
        elif pin is not None:
            note = (
                f"not promoted: production is pinned to version {pin['version']} by {pin['by']} "
                f"at {pin['at']} ({pin['reason']}); `leap model unpin` lets nights move it again"
            )
        else:
            day, registered = passing[-1]
            allowed = registered["run_kind"] == "nightly" or training.registry_settings().promote
            if not allowed:
                kind, version = registered["run_kind"], registered["version"]
                note = (
                    f"not promoted: a {kind} run moves the pointer only when asked (launch it "
                    "with resources.training.config.promote: true, or run `leap model promote "
                    f"{version}`)"
                )
            elif current is not None and str(current.version) == str(registered["version"]):
                note = f"version {registered['version']} ({day}) is production already"
            elif current_day is not None and day < current_day:
                note = (
                    f"not promoted: night {day} is older than production's ({current_day}, version "
                    f"{current.version}); a backfill never moves the alias backwards"
                )
            else:
                why = (
                    "nightly run" if registered["run_kind"] == "nightly" else "promotion asked for"
                )
                moved = registry.promote(
                    registered["version"],
                    reason=f"{why}, evaluated on {day}: {registered['gate_reason']}",
                    actor=f"dagster run {context.run.run_id}",
                )
                note = f"promoted version {registered['version']} ({day})"
        # what this decision left production at, read under the lock (not resolved again)
        production = moved["to_version"] if moved else (current.version if current else None)
        # under the lock too: a rollback between retention's read and its delete could point
        # the alias at a version retention then deletes
        deleted = registry.enforce_retention(training.registry_settings().keep_versions)
    newest = max((dt.date.fromisoformat(day) for day in model_evaluation), default=None)
    alias_records.record_last_night(newest, "promoted" if moved else "held", note)
    context.log.info(note)
    return dg.MaterializeResult(
        metadata={
            "decision": note,
            "production_version": str(production) if production is not None else "none",
            "model_uri": registry.model_uri(),
            "moved_from": str(moved["from_version"]) if moved else "",
            "versions_deleted": ", ".join(deleted),
        }
    )


def evaluation_day(version) -> dt.date | None:
    """The day a registered version was evaluated on (its ``evaluation_day`` tag), if any."""
    day = version.tags.get("evaluation_day") if version is not None else None
    return dt.date.fromisoformat(day) if day else None
