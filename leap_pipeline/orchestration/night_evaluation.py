"""A night's evaluation on day D, logged and registered in MLflow, and its gate decided.

Each night is gated on its own, against the production model only when that model never saw the
night's day; a night computed again from the same inputs (its fingerprint) reuses its registered
version, and a night whose version retention deleted is not registered again.
"""

import dataclasses
import datetime as dt
import tempfile
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from leap_pipeline.modeling import registry
from leap_pipeline.modeling.drift import PSI_WARN
from leap_pipeline.modeling.evaluation import headline
from leap_pipeline.modeling.evaluation_files import (
    EVALUATION_FILES,
    plot_nightly_w20,
    plot_routing_capture,
)
from leap_pipeline.orchestration.data_assets import partition_days
from leap_pipeline.orchestration.locks import held
from leap_pipeline.orchestration.metadata import image_metadata, table_metadata
from leap_pipeline.orchestration.promotion import evaluation_day
from leap_pipeline.orchestration.resources import (
    MlflowResource,
    TrainingResource,
    WarehouseResource,
)
from leap_pipeline.settings import RegistrySettings
from leap_serving.features import FEATURE_COLUMNS
from leap_serving.intervals import COVERAGE_BAND
from leap_serving.model import ModelArtifactError, load_registered
from leap_serving.publish import PublicationError, verify_folder

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
    tracking_uri = mlflow_tracking.configure()
    run_kind = _run_kind(context, training.registry_settings())
    gate_settings = training.gate_settings()
    decisions, per_day, records = [], [], {}
    last = None
    production, production_day = _production_model(context)
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
                # production is the comparison only when it never saw day D: one trained on a later
                # window (a backfill, a re-run of an older night) or this very night is not
                comparable = production is not None and production_day < day
                gate = registry.evaluation_gate(
                    evaluation["overall"]["published"]["w20"],
                    _production_w20(production, rows) if comparable else None,
                    gate_settings.floor,
                    gate_settings.margin,
                )
                if production is not None and not comparable:
                    gate = dataclasses.replace(
                        gate,
                        reason=f"{gate.reason} (production, evaluated on {production_day}, may "
                        f"have trained on {day}: not compared)",
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
        yield dg.AssetCheckResult(
            check_name="interval_coverage", passed=True, metadata={"coverage": "no night"}
        )
        yield dg.AssetCheckResult(
            check_name="feature_drift", passed=True, metadata={"drift": "no night"}
        )
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


def drift_check(day: dt.date, drift: list[dict] | None) -> dg.AssetCheckResult:
    """Each feature's population stability index on day D against the training window
    (``drift.feature_drift``) as a table, largest first: a warning when any passes
    ``PSI_WARN``, naming them."""
    if not drift:
        return dg.AssetCheckResult(
            check_name="feature_drift", passed=True,
            metadata={"drift": f"{day}: not computed for this night"},
        )  # fmt: skip
    drifted = [entry["feature"] for entry in drift if entry["drifted"]]
    return dg.AssetCheckResult(
        check_name="feature_drift",
        passed=not drifted,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "day": str(day),
            "threshold": f"PSI > {PSI_WARN}",
            "drifted": str(drifted),
            "psi_by_feature": table_metadata(drift),
        },
    )


def interval_check(day: dt.date, intervals: dict | None) -> dg.AssetCheckResult:
    """Day D's coverage of the published model's intervals against ``COVERAGE_BAND``: a warning
    when it leaves it (the intervals are miscalibrated for the day: too narrow below the band,
    wider than they need be above it), with each hardware type's and history class's coverage
    as tables."""
    if intervals is None:
        return dg.AssetCheckResult(
            check_name="interval_coverage", passed=True,
            metadata={"coverage": f"{day}: the published model has no intervals"},
        )  # fmt: skip
    low, high = COVERAGE_BAND
    share = intervals["coverage"]

    def table(groups: dict) -> dg.MetadataValue:
        return table_metadata([{"group": g, **v} for g, v in groups.items()])

    return dg.AssetCheckResult(
        check_name="interval_coverage",
        passed=bool(low <= share <= high),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "day": str(day),
            "level": intervals["level"],
            "coverage": share,
            "band": f"{low:.2f}-{high:.2f}",
            "interval_width_median": intervals["width_median"],
            "by_hardware_type": table(intervals["by_hardware_type"]),
            "by_history": table(intervals["by_history"]),
        },
    )


def _run_kind(context: dg.AssetExecutionContext, settings: RegistrySettings) -> str:
    if settings.run_kind:
        return settings.run_kind
    return "nightly" if context.run.tags.get("dagster/schedule_name") else "adhoc"


def _production_model(context: dg.AssetExecutionContext) -> tuple[object | None, dt.date | None]:
    """The model the alias names when the run starts (promotion happens after evaluation, so it
    stays the same for every day of the run) and the day it was evaluated on, or (None, None)
    when there is none or it cannot load."""
    current = registry.production_version()
    if current is None:
        return None, None
    try:
        production, _ = load_registered(registry.model_uri())
    except ModelArtifactError as exc:
        context.log.warning(f"production model not comparable: {exc}")
        return None, None
    return production, evaluation_day(current) or dt.date.max


def _production_w20(production, rows: pl.DataFrame) -> float | None:
    """The production model's w20 on the same rows, or None when there is none."""
    from leap_serving import metrics

    if production is None:
        return None
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
