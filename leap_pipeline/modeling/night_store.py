"""A trained night on disk: its published folder under ``<data>/models/<day>/``, written atomically
with a manifest, and found again by its inputs' fingerprint so a re-run reuses it."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl

from leap_pipeline.modeling.evaluation_files import write_evaluation_files
from leap_pipeline.modeling.lookup_table import LookupTable
from leap_pipeline.modeling.selection import TrainedModels, serving_model
from leap_serving.model.boosters import GBDTRegressor
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.model_file import ModelFileError, dump_model, load_model
from leap_serving.model.publish import PublicationError, publish_folder, verify_folder
from leap_serving.model.published import LeapModel


def models_folder(warehouse_path: Path, day: dt.date) -> Path:
    return Path(warehouse_path).parent / "models" / day.isoformat()


def save_trained(
    models: TrainedModels,
    folder: Path,
    snapshot: pl.DataFrame,
    specs: pl.DataFrame,
    profile: str,
    evaluation: dict | None = None,
    night: dict | None = None,
) -> None:
    """Publish a night's models, and its evaluation's files when given; the cascade folder is
    the artifact a model version ships. ``night`` (the night's record, with its inputs'
    fingerprint) is kept beside them, so a night run again on the same inputs reuses them."""

    def write(version: Path) -> dict:
        if evaluation is not None:
            write_evaluation_files(evaluation, version)
        if night is not None:
            (version / NIGHT_RECORD).write_text(json.dumps(night, indent=1))
        serving_model(
            models,
            snapshot,
            specs,
            metadata={
                "training_window": [d.isoformat() for d in models.window],
                "training_rows": models.training_rows,
                "profile": profile,
                "selection": models.selection,
            },
        ).save(version / "cascade")
        dump_model(models.single_gbdt_booster, version / "single_gbdt.json")
        dump_model(models.cascade, version / "cascade_candidate.json")
        models.lookup.entries.write_parquet(version / "lookup_entries.parquet")
        models.model_type_ranks.write_parquet(version / "model_type_ranks.parquet")
        (version / "trained.json").write_text(
            json.dumps(
                {
                    "window": [d.isoformat() for d in models.window],
                    "training_rows": models.training_rows,
                    "lookup_model_types": list(models.lookup.model_types),
                    "seconds": models.seconds,
                    "profile": profile,
                }
            )
        )

    publish_folder(folder, write)


NIGHT_RECORD = "night.json"


def reusable_night(folder: Path, fingerprint: str) -> dict | None:
    """The record of the night published in ``folder`` when it was computed from inputs with
    ``fingerprint`` and its files are intact; None otherwise (then the night is computed)."""
    path = Path(folder) / NIGHT_RECORD
    if not path.is_file():
        return None
    try:
        verify_folder(Path(folder).resolve())
        record = json.loads(path.read_text())
    except (PublicationError, ValueError):
        return None
    return record if record.get("fingerprint") == fingerprint else None


def load_trained(folder: Path) -> tuple[TrainedModels, LeapModel]:
    if not (folder / "trained.json").is_file():
        raise FileNotFoundError(f"no trained models in {folder}: materialize cascade_model first")
    folder = folder.resolve()
    try:
        verify_folder(folder)
        gbdt = load_model(folder / "single_gbdt.json", GBDTRegressor)
        cascade = load_model(folder / "cascade_candidate.json", BinnedCascade)
    except (PublicationError, ModelFileError) as exc:
        raise FileNotFoundError(f"{exc}: materialize cascade_model again") from exc
    meta = json.loads((folder / "trained.json").read_text())
    published = LeapModel.load(folder / "cascade")
    models = TrainedModels(
        cascade=cascade,
        single_gbdt_booster=gbdt,
        published=published.cascade,
        selection=published.metadata["selection"],
        lookup=LookupTable(
            entries=pl.read_parquet(folder / "lookup_entries.parquet"),
            model_types=tuple(meta["lookup_model_types"]),
        ),
        window=tuple(dt.date.fromisoformat(d) for d in meta["window"]),
        training_rows=meta["training_rows"],
        model_type_ranks=pl.read_parquet(folder / "model_type_ranks.parquet"),
        novelty=published.novelty,
        seconds=meta["seconds"],
        intervals=published.intervals,
    )
    return models, published
