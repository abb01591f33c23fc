"""A night's training, stored between the Dagster assets that train, evaluate and publish it.

``data/models/<day>/`` holds the published model (the selection's winner as a ``LeapModel``
folder, history snapshot as of the day included), the cascade and the single GBDT that competed
for it, and the lookup table, so evaluation and registration read exactly what training wrote.
The folder is published atomically with a manifest of hashes: a crash mid-save leaves the
previous night's folder as it was.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import joblib
import polars as pl
from sklearn.ensemble import HistGradientBoostingRegressor

from leap_pipeline.data.sources import Oracle
from leap_pipeline.data.warehouse import Warehouse
from leap_pipeline.modeling.evaluation import evaluate, evaluation_summary
from leap_pipeline.modeling.evaluation_files import write_evaluation_files
from leap_pipeline.modeling.lookup_table import LookupTable
from leap_pipeline.modeling.selection import TrainedModels, fit_models, training_window
from leap_pipeline.settings import TrainingSettings
from leap_serving.cascade import BinnedCascade
from leap_serving.model import LeapModel, dump_skops, load_skops
from leap_serving.publish import PublicationError, publish_folder, verify_folder


def models_folder(warehouse_path: Path, day: dt.date) -> Path:
    return Path(warehouse_path).parent / "models" / day.isoformat()


@dataclass(frozen=True)
class Night:
    """Night D computed: the models fitted on the window before D, and their evaluation on D."""

    day: dt.date
    window: pl.DataFrame  # the feature rows of the training window
    rows: pl.DataFrame  # day D's feature rows
    models: TrainedModels
    evaluation: dict  # ``evaluation.evaluate``'s result

    def record(self) -> dict:
        """What a registry needs of the night, as JSON: the window, its row count, the selection
        and the evaluation's summary."""
        return {
            "day": self.day.isoformat(),
            "window": [d.isoformat() for d in self.models.window],
            "training_rows": self.models.training_rows,
            "selection": self.models.selection,
            "evaluation": evaluation_summary(self.evaluation),
        }


@dataclass(frozen=True)
class NightInputs:
    """What night D reads: the window's feature rows and day D's, with a digest of both and of
    the settings, so a night computed again from the same inputs can be recognised."""

    day: dt.date
    window: pl.DataFrame
    rows: pl.DataFrame
    fingerprint: str


def night_inputs(wh: Warehouse, day: dt.date, settings: TrainingSettings) -> NightInputs:
    """Read night ``day``'s rows. A night needs its day's features: an error names the day."""
    first, last = training_window(day, settings.window_days)
    if wh.count("source_log", day) == 0:
        raise ValueError(f"day={day}: its sources have not landed, so it has no feature rows")
    window = wh.read("feature_table", first, last)
    rows = wh.read("feature_table", day, day)
    digest = hashlib.sha256(repr((sorted(vars(settings).items()), version("leap"))).encode())
    for frame in (window, rows):
        digest.update(frame.hash_rows(seed=0).to_numpy().tobytes())
    return NightInputs(day, window, rows, digest.hexdigest())


def run_night(
    wh: Warehouse,
    day: dt.date,
    settings: TrainingSettings | None = None,
    oracle: Oracle | None = None,
    inputs: NightInputs | None = None,
) -> Night:
    """The one computation of a night, for the assets and the report alike: fit on the
    ``settings.window_days`` before ``day`` (experts where ``settings`` says), score on ``day``,
    against the source's ``oracle`` when it has one. No Dagster, no MLflow."""
    settings = settings or TrainingSettings()
    inputs = inputs or night_inputs(wh, day, settings)
    window, rows = inputs.window, inputs.rows
    with expert_backend(settings.dask_scheduler):
        models = fit_models(
            window,
            day,
            profile=settings.profile,
            lookup_min_support=settings.lookup_min_support,
            cascade_params={"n_jobs": settings.n_jobs},
        )
    medians = oracle.true_medians(rows["attempt_id"].to_list()) if oracle is not None else None
    return Night(day, window, rows, models, evaluate(models, rows, medians))


@contextmanager
def expert_backend(dask_scheduler: str = "") -> Iterator[None]:
    """Where the experts' fits run: joblib's processes on this machine, or, with
    ``dask_scheduler`` (an address such as ``tcp://scheduler:8786``, or ``local`` for a cluster
    on this machine), a Dask cluster through joblib's ``dask`` backend."""
    if not dask_scheduler:
        yield
        return
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ValueError(
            f"dask_scheduler={dask_scheduler!r} needs Dask: pip install -e '.[dask]'"
        ) from None
    cluster = (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
        if dask_scheduler == "local"
        else None
    )
    try:
        with Client(cluster or dask_scheduler), joblib.parallel_config(backend="dask"):
            yield
    finally:
        if cluster is not None:
            cluster.close()


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
        LeapModel(
            cascade=models.published,
            history_snapshot=snapshot,
            hardware_specs=specs,
            metadata={
                "training_window": [d.isoformat() for d in models.window],
                "training_rows": models.training_rows,
                "profile": profile,
                "selection": models.selection,
                "novelty": models.novelty.to_dict() if models.novelty else None,
            },
        ).save(version / "cascade")
        types = dump_skops(models.single_gbdt, version / "single_gbdt.skops")
        cascade_types = dump_skops(models.cascade, version / "cascade_candidate.skops")
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
        return {
            "skops_types": {
                "single_gbdt.skops": types,
                "cascade_candidate.skops": cascade_types,
            }
        }

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
        manifest = verify_folder(folder)
    except PublicationError as exc:
        raise FileNotFoundError(f"{exc}: materialize cascade_model again") from exc
    meta = json.loads((folder / "trained.json").read_text())
    published = LeapModel.load(folder / "cascade")
    gbdt = load_skops(
        folder / "single_gbdt.skops",
        HistGradientBoostingRegressor,
        manifest.get("skops_types", {}).get("single_gbdt.skops"),
    )
    cascade = load_skops(
        folder / "cascade_candidate.skops",
        BinnedCascade,
        manifest.get("skops_types", {}).get("cascade_candidate.skops"),
    )
    models = TrainedModels(
        cascade=cascade,
        single_gbdt=gbdt,
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
    )
    return models, published
