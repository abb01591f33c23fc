"""Nightly model assets: train on the 30 days before D, evaluate on D, publish behind the alias.

``cascade_model`` fits the cascade and its two reference models and selects the one to publish
(``evaluation.fit_models``); ``model_evaluation`` scores them on day D, logs the run and registers
the published model as a new version in MLflow, and decides each night's evaluation gate;
``production_model`` moves the ``production`` alias when the run is a nightly one (or promotion was
asked for) and the gate passed. Work lives in ``evaluation``, ``training`` and ``registry``.

Each night is gated on its own, against the production model only when that model never saw the
night's day; the alias moves to the newest passing night of a run and never to a night older than
the one it names, so a backfill cannot move it backwards. A night computed again from the same
inputs (its fingerprint) reuses its published folder and its registered version.

The partitioned assets are built by ``model_assets(partitions)``, as the data assets are.
"""

import base64
import dataclasses
import datetime as dt
import tempfile
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from leap_pipeline.data.sources import Oracle, logged_source
from leap_pipeline.modeling import registry
from leap_pipeline.modeling.evaluation import headline
from leap_pipeline.modeling.evaluation_files import (
    EVALUATION_FILES,
    markdown_table,
    plot_nightly_w20,
)
from leap_pipeline.modeling.training import (
    models_folder,
    night_inputs,
    reusable_night,
    run_night,
    save_trained,
)
from leap_pipeline.orchestration.calendar import data_folder
from leap_pipeline.orchestration.data_assets import (
    SINGLE_RUN,
    partition_days,
    per_day_table,
    record_worker,
)
from leap_pipeline.orchestration.locks import held
from leap_pipeline.orchestration.resources import (
    MlflowResource,
    TrainingResource,
    WarehouseResource,
)
from leap_pipeline.orchestration.runs import land_days
from leap_pipeline.settings import WINDOW_DAYS, RegistrySettings
from leap_pipeline.studies.report import ReportSettings, build_report
from leap_serving.features import FEATURE_COLUMNS
from leap_serving.model import ModelArtifactError, load_registered
from leap_serving.publish import PublicationError, verify_folder

EVALUATION_COLUMNS = ("w5", "w10", "w15", "w20", "mdape", "median_ratio", "coverage")


def _image(path: str) -> str:
    return f"![plot](data:image/png;base64,{base64.b64encode(Path(path).read_bytes()).decode()})"


def train_nights(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, training: TrainingResource
) -> dg.Output[dict[str, dict]]:
    """Night D (``training.run_night``): the cascade, the single GBDT and the lookup table
    trained on the days before D, the one of the first two that scored best on the window's
    last day published, and every model scored on D. Each day's record names the folder the
    night was published to, with what the registry needs of it. A night whose inputs did not
    change since it was published is reused, not fitted again."""
    record_worker(context)
    per_day, records = [], {}
    settings = training.training_settings()
    with warehouse.open() as wh:
        for day in partition_days(context):
            try:
                inputs = night_inputs(wh, day, settings)
            except ValueError as exc:
                raise dg.Failure(f"{exc}: materialize the data assets for {day} first") from exc
            if inputs.rows.height == 0:
                records[day.isoformat()] = {"skipped": f"{day} has no measured attempt to score"}
                context.log.warning(f"{day}: no measured attempt, so no night to score: skipped")
                continue
            folder = models_folder(wh.path, day)
            with held(folder.with_name(f"{day.isoformat()}.lock"), f"night {day}"):
                reused = reusable_night(folder, inputs.fingerprint)
                if reused is None:
                    night = run_night(wh, day, settings, _oracle(wh, day), inputs=inputs)
                    record = {**night.record(), "fingerprint": inputs.fingerprint}
                    snapshot = wh.read("history_snapshot", day, day).drop("ds")
                    specs = wh.read("hardware_specs", day, day).drop("ds")
                    save_trained(
                        night.models, folder, snapshot, specs, training.profile,
                        night.evaluation, record,
                    )  # fmt: skip
            if reused is not None:
                records[day.isoformat()] = {**reused, "folder": str(folder.resolve())}
                per_day.append({"ds": day.isoformat(), "reused": True, **_night_row(reused)})
                context.log.info(f"{day}: inputs unchanged since it was trained, reused {folder}")
                continue
            models = night.models
            records[day.isoformat()] = {**record, "folder": str(folder.resolve())}
            cascade = models.cascade
            per_day.append(
                {
                    "ds": day.isoformat(),
                    "reused": False,
                    **_night_row(record),
                    "seconds": round(sum(models.seconds.values()), 1),
                    "em_iterations": cascade.em_iterations_,
                    "bins": cascade.n_bins_,
                    "trees_per_expert": int(np.mean(cascade.n_trees_per_expert_)),
                }
            )
            context.log.info(f"trained {day}: {per_day[-1]}")
    last = per_day[-1] if per_day else {"rows": 0}
    return dg.Output(
        records,
        metadata={
            "training_rows": last["rows"],
            "nights_reused": sum(r["reused"] for r in per_day),
            "profile": training.profile,
            "per_day": per_day_table(
                [{k: r.get(k, "") for k in per_day[0]} for r in per_day] if per_day else []
            ),
        },
    )


def _night_row(record: dict) -> dict:
    selection = record["selection"]
    return {
        "rows": record["training_rows"],
        "published": selection["published"],
        "challenger_margin": round(selection["margin"], 3),
    }


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
                        },
                        metrics={**headline(evaluation), "gate_passed": float(gate.passed)},
                        files=[folder / name for name in EVALUATION_FILES],
                        selection=night["selection"],
                        fingerprint=fingerprint,
                        gate_reason=gate.reason,
                    )
            wh.replace_partition("evaluation", day, _evaluation_rows(evaluation))
            scatter = _image(str(folder / "predicted_vs_measured.png"))
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
            last = (evaluation, breakdown, scatter, run_id)
        series = wh.read("evaluation", columns=["ds", "model", "w20"]) if last else None
    if last is None:  # every night of the run was skipped
        yield dg.Output(records, metadata={"nights": "none to evaluate"})
        yield dg.AssetCheckResult(
            check_name="evaluation_gate", passed=True, metadata={"decisions": "no night"}
        )
        return
    evaluation, breakdown, scatter, run_id = last
    with tempfile.TemporaryDirectory() as tmp:
        figure8 = plot_nightly_w20(series, str(Path(tmp) / "nightly_w20.png"))
        table = Path(tmp) / "nightly_w20.csv"
        series.pivot("model", index="ds", values="w20").sort("ds").write_csv(table)
        for path in (figure8, table):  # the Figure 8 series so far, with the last night's run
            registry.MlflowClient().log_artifact(run_id, str(path))
        nightly = _image(figure8)
    overall = pl.DataFrame([{"model": m} | v for m, v in evaluation["overall"].items()])
    yield dg.Output(
        records,
        metadata={
            **{k: v for k, v in headline(evaluation).items() if v is not None},
            "tracking_uri": tracking_uri,
            "run_kind": run_kind,
            "registered_versions": per_day_table(per_day),
            "overall": dg.MetadataValue.md(markdown_table(overall)),
            "breakdown": dg.MetadataValue.md(markdown_table(breakdown)),
            "table1": dg.MetadataValue.json(evaluation["table1"]),
            "predicted_vs_measured": dg.MetadataValue.md(scatter),
            "nightly_w20 (Figure 8)": dg.MetadataValue.md(
                markdown_table(series.pivot("model", index="ds", values="w20").sort("ds"))
                + "\n\n"
                + nightly
            ),
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


def move_alias(
    context: dg.AssetExecutionContext,
    model_evaluation: dict[str, dict],
    training: TrainingResource,
    mlflow_tracking: MlflowResource,
) -> dg.MaterializeResult:
    """The ``production`` alias: moved to the newest night of the run whose gate passed, on a
    nightly run (or when promotion is asked for), never to a night older than the one it names;
    old versions past retention removed (never one a promotion record names)."""
    mlflow_tracking.configure()
    passing = [
        (dt.date.fromisoformat(day), record)
        for day, record in sorted(model_evaluation.items())
        if record.get("gate_passed")
    ]
    # read, compare and move under one lock: two runs that promote at once (in-process runs do
    # not queue) cannot move the alias backwards between another's read and its move
    with held(data_folder() / "locks" / f"{registry.model_name()}.production.lock", "the alias"):
        current = registry.production_version()
        current_day = _evaluation_day(current)
        moved = None
        if not passing:
            note = "not promoted: no night of the run passed its gate"
        else:
            day, registered = passing[-1]
            allowed = registered["run_kind"] == "nightly" or training.registry_settings().promote
            if not allowed:
                kind = registered["run_kind"]
                note = f"not promoted: a {kind} run moves the pointer only when asked"
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
    deleted = registry.enforce_retention(training.registry_settings().keep_versions)
    current = registry.production_version()
    context.log.info(note)
    return dg.MaterializeResult(
        metadata={
            "decision": note,
            "production_version": str(current.version) if current else "none",
            "model_uri": registry.model_uri(),
            "moved_from": str(moved["from_version"]) if moved else "",
            "versions_deleted": ", ".join(deleted),
        }
    )


def _evaluation_day(version) -> dt.date | None:
    day = version.tags.get("evaluation_day") if version is not None else None
    return dt.date.fromisoformat(day) if day else None


def model_assets(partitions: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    """The three model assets over ``partitions``. ``cascade_model`` declares every feature day
    it reads, D-30 .. D, so lineage, staleness and backfills see day D too."""

    @dg.asset(
        name="cascade_model",
        deps=[
            dg.AssetDep(
                "feature_table",
                partition_mapping=dg.TimeWindowPartitionMapping(
                    start_offset=-WINDOW_DAYS,
                    end_offset=0,
                    allow_nonexistent_upstream_partitions=True,
                ),
            ),
            "history_snapshot",
            "hardware_specs",
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="model",
        io_manager_key="night_records",
    )
    def cascade_model(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource, training: TrainingResource
    ) -> dg.Output[dict[str, dict]]:
        """Train night D on D-30 .. D-1 and score it on D (or reuse it when nothing changed)."""
        return train_nights(context, warehouse, training)

    @dg.asset(
        name="model_evaluation",
        deps=["feature_table"],
        check_specs=[
            dg.AssetCheckSpec(
                "evaluation_gate",
                asset="model_evaluation",
                description="Each night's published model reaches the floor and is not more than "
                "the margin below a production model that never saw its day; fails when the "
                "newest night of the run fails.",
            )
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="model",
        io_manager_key="night_records",
    )
    def model_evaluation(
        context: dg.AssetExecutionContext,
        cascade_model: dict[str, dict],
        warehouse: WarehouseResource,
        training: TrainingResource,
        mlflow_tracking: MlflowResource,
    ) -> Iterator[dg.Output | dg.AssetCheckResult]:
        """Night D logged and registered in MLflow, and its gate decided."""
        yield from evaluate_nights(context, cascade_model, warehouse, training, mlflow_tracking)

    @dg.asset(
        name="production_model",
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="model",
    )
    def production_model(
        context: dg.AssetExecutionContext,
        model_evaluation: dict[str, dict],
        training: TrainingResource,
        mlflow_tracking: MlflowResource,
    ) -> dg.MaterializeResult:
        """The ``production`` alias, moved forward to the newest passing night."""
        return move_alias(context, model_evaluation, training, mlflow_tracking)

    return [cascade_model, model_evaluation, production_model]


def _run_kind(context: dg.AssetExecutionContext, settings: RegistrySettings) -> str:
    if settings.run_kind:
        return settings.run_kind
    return "nightly" if context.run.tags.get("dagster/schedule_name") else "adhoc"


def _oracle(wh, day: dt.date) -> Oracle | None:
    """The truth behind the day's measurements when its source has one (the simulator)."""
    source = logged_source(wh.read("source_log", day, day)["source"].to_list())
    return source.oracle() if source is not None else None


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
    return production, _evaluation_day(current) or dt.date.max


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


class ReportConfig(dg.Config):
    """``ReportSettings`` as the asset's run config."""

    scale: float = ReportSettings.scale
    nights: int = ReportSettings.nights
    seed: int = ReportSettings.seed
    quick: bool = ReportSettings.quick
    data: str = str(ReportSettings.data)


@dg.asset(group_name="report")
def paper_report(context: dg.AssetExecutionContext, config: ReportConfig) -> dg.MaterializeResult:
    """``leap report`` as an asset: the paper's evaluation and the routing value, with figures."""
    settings = ReportSettings.from_options(
        config.scale, config.nights, config.seed, config.data, config.quick
    )
    report = build_report(settings, land_days, log=context.log.info)
    root = Path(config.data) / "reports"
    return dg.MaterializeResult(
        metadata={
            "nightly_w20_median": report["nightly_w20_median"],
            "oracle_w20_median": report["oracle_w20_median"],
            "routing_capture": report["routing_capture"] or float("nan"),
            "report": dg.MetadataValue.md((root / "report.md").read_text()),
            "figures": dg.MetadataValue.md("\n\n".join(_image(p) for p in report["figures"])),
        }
    )
