"""A night's evaluation on day D, logged and registered in MLflow, and its gate decided.

Each night is gated on its own, against the production model only when that model never saw the
night's day; a night computed again from the same inputs (its fingerprint) reuses its registered
version, and a night whose version retention deleted is not registered again.
"""

import dataclasses
import datetime as dt
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import numpy as np
import polars as pl

from leap_pipeline.modeling.evaluation import headline
from leap_pipeline.modeling.evaluation_files import (
    EVALUATION_FILES,
    plot_nightly_w20,
    plot_routing_capture,
)
from leap_pipeline.orchestration.data_assets import partition_days
from leap_pipeline.orchestration.locks import held
from leap_pipeline.orchestration.metadata import image_metadata, table_metadata
from leap_pipeline.orchestration.night_checks import (
    drift_check,
    interval_check,
    no_night_checks,
    slice_check,
)
from leap_pipeline.orchestration.nightly_retry import SENSOR_NAME as RETRY_SENSOR
from leap_pipeline.orchestration.promotion import evaluation_day
from leap_pipeline.orchestration.resources import (
    MlflowResource,
    TrainingResource,
    WarehouseResource,
)
from leap_pipeline.settings import RegistrySettings
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.publish import PublicationError, verify_folder

# imported where a night registers: MLflow takes about a second to import, which every step of a
# landing, forked with the definitions, paid for nothing
if TYPE_CHECKING:
    from leap_pipeline.modeling import registry

EVALUATION_COLUMNS = ("w5", "w10", "w15", "w20", "mdape", "median_ratio", "coverage")


def evaluate_nights(
    context: dg.AssetExecutionContext,
    cascade_model: dict[str, dict],
    warehouse: WarehouseResource,
    training: TrainingResource,
    mlflow_tracking: MlflowResource,
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Night D's evaluation logged to MLflow with its files, the published model registered as a
    new version (or the version already registered for the same inputs reused), and the gate
    decided on its own: against the production model on the same rows when production never saw
    day D, else against the floor alone."""
    from leap_pipeline.modeling import registry

    tracking_uri = mlflow_tracking.configure()
    run_kind = _run_kind(context, training.registry_settings())
    gate_settings = training.gate_settings()
    decisions, per_day, records = [], [], {}
    last = None
    incumbent = production_incumbent(context.log)  # the alias resolved once for the whole run
    with warehouse.open() as wh:
        for day in partition_days(context):
            night = cascade_model[day.isoformat()]
            if "skipped" in night:
                records[day.isoformat()] = night
                continue
            folder, evaluation = Path(night["folder"]), night["evaluation"]
            try:  # what is registered is what cascade_model published, byte for byte
                verify_folder(folder)
            except PublicationError as exc:
                raise dg.Failure(f"{exc}: materialize cascade_model for {day} again") from exc
            fingerprint = night.get("fingerprint", "")
            # one registration per night and inputs, even when two runs reach it at once
            with held(folder.with_name(f"{day.isoformat()}.register.lock"), f"night {day}"):
                existing = registry.registered_night(day, fingerprint) if fingerprint else None
                rows = wh.read("feature_table", day, day)
                gate = night_gate(
                    evaluation["overall"]["published"]["w20"],
                    incumbent,
                    day,
                    rows,
                    gate_settings.floor,
                    gate_settings.margin,
                    context.log,
                )
                retired = (
                    registry.registered_before(day, fingerprint)
                    if existing is None and fingerprint
                    else None
                )
                if existing is not None:
                    version, run_id = existing["version"], existing["run"].removeprefix("runs:/")
                    registry.record_gate(version, gate.passed, gate.reason)
                    context.log.info(f"{day}: version {version} already holds this night: reused")
                elif retired is not None:  # registered once, then retired: not registered again
                    version, run_id = None, retired
                    gate = dataclasses.replace(
                        gate,
                        passed=False,
                        reason=f"registered before by run {retired}, whose version retention "
                        "deleted: not registered again, not promoted",
                    )
                    context.log.info(f"{day}: {gate.reason}")
                else:
                    run_id, version = registry.log_candidate(
                        artifact_folder=folder / "cascade",
                        day=day,
                        window=tuple(dt.date.fromisoformat(d) for d in night["window"]),
                        run_kind=run_kind,
                        params={
                            "profile": training.profile,
                            "window_days": training.window_days,
                            "training_rows": night["training_rows"],
                            "lookup.min_support": training.lookup_min_support,
                            **night.get("hyperparameters", {}),
                        },
                        metrics={**headline(evaluation), "gate_passed": float(gate.passed)},
                        files=[folder / name for name in EVALUATION_FILES],
                        selection=night["selection"],
                        fingerprint=fingerprint,
                        gate_reason=gate.reason,
                        training_source=str(wh.path),
                        training_rows=night["training_rows"],
                    )
            breakdown = pl.read_csv(folder / "breakdown.csv")
            records[day.isoformat()] = {
                "folder": str(folder),
                "version": version,
                "run_id": run_id,
                "reused_version": existing is not None or retired is not None,
                "gate_passed": gate.passed,
                "gate_reason": gate.reason,
                "run_kind": run_kind,
                "evaluation": evaluation,
            }
            decisions.append((day, gate))
            overall = evaluation["overall"]
            per_day.append(
                {
                    "ds": day.isoformat(),
                    "version": version,
                    "reused": existing is not None or retired is not None,
                    **{f"{m}_w20": round(overall[m]["w20"], 3) for m in overall},
                    "gate": "pass" if gate.passed else "FAIL",
                }
            )
            context.log.info(f"evaluated {day}: {per_day[-1]} ({gate.reason})")
            last = (evaluation, breakdown, folder / "predicted_vs_measured.png")
    if last is None:  # every night of the run was skipped
        yield dg.Output(records, metadata={"nights": "none to evaluate"})
        yield dg.AssetCheckResult(
            check_name="evaluation_gate", passed=True, metadata={"decisions": "no night"}
        )
        yield from no_night_checks()
        return
    evaluation, breakdown, scatter = last
    overall = pl.DataFrame([{"model": m} | v for m, v in evaluation["overall"].items()])
    yield dg.Output(
        records,
        metadata={
            **{k: v for k, v in headline(evaluation).items() if v is not None},
            "tracking_uri": tracking_uri,
            "run_kind": run_kind,
            "registered_versions": table_metadata(per_day),
            "overall": table_metadata(overall),
            "breakdown": table_metadata(breakdown),
            "table1": dg.MetadataValue.json(evaluation["table1"]),
            **(
                {"routing": table_metadata(_routing_rows(evaluation))}
                if _routing_rows(evaluation) is not None
                else {"routing": str((evaluation.get("routing") or {}).get("error", "none"))}
            ),
            "predicted_vs_measured": image_metadata(scatter),
        },
    )
    # each night on its own: the check reports every night and fails when the newest one did;
    # the alias moves (in production_model) to the newest night that passed, whatever older
    # nights of the run decided
    newest_day, newest = decisions[-1]
    yield dg.AssetCheckResult(
        check_name="evaluation_gate",
        passed=newest.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "newest_night": f"{newest_day}: {newest.reason}",
            "nights_failed": str([str(d) for d, g in decisions if not g.passed]),
            "decisions": "; ".join(f"{d}: {g.reason}" for d, g in decisions),
        },
    )
    yield interval_check(newest_day, evaluation.get("intervals"))
    yield drift_check(newest_day, evaluation.get("drift"))
    yield slice_check(newest_day, breakdown, evaluation["overall"]["published"]["w20"])


def _run_kind(context: dg.AssetExecutionContext, settings: RegistrySettings) -> str:
    """``nightly`` for a run the nightly plan asked for (the schedule's, or its retry
    sensor's for a tick the warehouse refused), else ``adhoc``, unless the settings say."""
    if settings.run_kind:
        return settings.run_kind
    tags = context.run.tags
    planned = tags.get("dagster/schedule_name") or tags.get("dagster/sensor_name") == RETRY_SENSOR
    return "nightly" if planned else "adhoc"


@dataclass(frozen=True)
class Incumbent:
    """The production version a run's nights are gated against, read once as the run starts
    (promotion happens after evaluation): its registry version, the day it was evaluated on, and
    its model, or why it cannot be compared. No version: there is no production model yet."""

    version: str | None = None
    day: dt.date | None = None
    model: object | None = None
    unusable: str = ""


def production_incumbent(log) -> Incumbent:
    """The version the alias names now, loaded by that version number (never by the alias
    again, so a promotion meanwhile cannot mix two versions). A production model that does not
    load, whatever the error (a refused file, a bug, a missing artifact), is no usable incumbent:
    it is logged, and each night is gated on the floor alone."""
    from leap_pipeline.modeling import registry
    from leap_serving.registry.registered import load_registered

    current = registry.production_version()
    if current is None:
        return Incumbent()
    version = str(current.version)
    try:
        day = evaluation_day(current) or dt.date.max
        model, _ = load_registered(registry.model_uri(), version=version)
    except Exception as exc:  # any failure: the night must still be registered
        why = f"production version {version} cannot be loaded ({type(exc).__name__}: {exc})"
        log.warning(f"{why}: each night is gated on the floor alone")
        return Incumbent(version=version, unusable=why)
    return Incumbent(version=version, day=day, model=model)


def night_gate(
    candidate_w20: float,
    incumbent: Incumbent,
    day: dt.date,
    rows: pl.DataFrame,
    floor: float,
    margin: float,
    log,
) -> "registry.GateDecision":
    """Night ``day``'s gate: against the incumbent on the same rows when it never saw day D (one
    trained on a later window, a backfill or a re-run of an older night, or this very night, is
    not compared); against the floor alone, saying why, when there is none, it saw the day, or it
    cannot load or predict. A broken production model must not hold a good night back: the
    night that passes the floor is what replaces it."""
    from leap_pipeline.modeling import registry

    note, production_w20 = "", None
    if incumbent.unusable:
        note = f"({incumbent.unusable}: not compared)"
    elif incumbent.model is not None and incumbent.day < day:
        try:
            production_w20 = _production_w20(incumbent.model, rows)
        except Exception as exc:  # a model that loads, then cannot predict
            note = (
                f"(production version {incumbent.version} cannot predict {day} "
                f"({type(exc).__name__}: {exc}): not compared)"
            )
            log.warning(f"{day}: {note}")
    elif incumbent.model is not None:
        seen = f"evaluated on {incumbent.day}, may have trained on {day}"
        note = f"(production, {seen}: not compared)"
    gate = registry.evaluation_gate(candidate_w20, production_w20, floor, margin)
    if production_w20 is not None:
        note = f"(production is version {incumbent.version})"
    return dataclasses.replace(gate, reason=f"{gate.reason} {note}") if note else gate


def _production_w20(production, rows: pl.DataFrame) -> float:
    """The production model's w20 on the same rows."""
    from leap_serving.decide import metrics

    predicted = np.exp(production.cascade.predict(rows.select(FEATURE_COLUMNS).to_numpy()))
    return metrics.within(predicted, rows["throughput"].to_numpy(), 20)


def _evaluation_rows(evaluation: dict) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"model": m, **{k: v[k] for k in EVALUATION_COLUMNS}}
            for m, v in evaluation["overall"].items()
        ]
    )


def _routing_rows(evaluation: dict) -> pl.DataFrame | None:
    """Day D's routing replay as rows, one per policy; None when the source has no truth."""
    routing = evaluation.get("routing")
    if routing is None or "policies" not in routing:
        return None
    return pl.DataFrame(
        [
            {"policy": name, **outcome, "capture": routing["capture"][name]}
            for name, outcome in routing["policies"].items()
        ],
        schema_overrides={"capture": pl.Float64},
    )


def record_evaluations(
    context: dg.AssetExecutionContext,
    model_evaluation: dict[str, dict],
    warehouse: WarehouseResource,
    mlflow_tracking: MlflowResource,
) -> dg.MaterializeResult:
    """The ``evaluation`` table's partitions: each evaluated night's scores on day D, one row per
    model, replacing the day's rows (and the ``routing`` table's: each policy's replay of day D,
    when the source is simulated); then Figure 8 (w20 per nightly retrain so far) and the
    routing capture per night as tables and plots, logged to the newest night's MLflow run too."""
    from leap_pipeline.modeling import registry

    newest = None
    with warehouse.open() as wh:
        for day in partition_days(context):
            record = model_evaluation[day.isoformat()]
            if "evaluation" not in record:  # a skipped night: nothing was scored
                continue
            frames = {"evaluation": _evaluation_rows(record["evaluation"])}
            routing = _routing_rows(record["evaluation"])
            if routing is not None:
                frames["routing"] = routing
            wh.replace_partitions(day, frames)
            newest = record
        if newest is None:  # every night of the run was skipped: the table may not exist yet
            return dg.MaterializeResult(metadata={"nights": "none evaluated"})
        series = wh.read("evaluation", columns=["ds", "model", "w20"])
        captured = (
            wh.read("routing", columns=["ds", "policy", "capture"]) if wh.has("routing") else None
        )
    mlflow_tracking.configure()  # materialized alone, the run's store is still the one it names
    figure8 = series.pivot("model", index="ds", values="w20").sort("ds")
    metadata = {"nightly_w20 (Figure 8)": table_metadata(figure8)}
    with tempfile.TemporaryDirectory() as tmp:
        files = [plot_nightly_w20(series, str(Path(tmp) / "nightly_w20.png"))]
        figure8.write_csv(Path(tmp) / "nightly_w20.csv")
        files.append(str(Path(tmp) / "nightly_w20.csv"))
        metadata["nightly_w20 plot"] = image_metadata(files[0])
        if captured is not None and captured.height:
            files.append(plot_routing_capture(captured, str(Path(tmp) / "routing_capture.png")))
            per_night = captured.pivot("policy", index="ds", values="capture").sort("ds")
            metadata["routing_capture"] = table_metadata(per_night)
            metadata["routing_capture plot"] = image_metadata(files[-1])
        if newest.get("run_id"):  # the series so far, with the newest night's run
            for path in files:
                registry.MlflowClient().log_artifact(newest["run_id"], str(path))
    return dg.MaterializeResult(metadata=metadata)
