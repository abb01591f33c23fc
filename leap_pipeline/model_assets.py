"""Nightly model assets: train on the 30 days before D, evaluate on D, publish behind the alias.

``cascade_model`` fits the cascade and its two reference models and selects the one to publish
(``evaluation.fit_models``); ``model_evaluation`` scores them on day D, logs the run and registers
the published model as a new version in MLflow, and holds the blocking evaluation gate;
``production_model`` moves the ``production`` alias when the run is a nightly one (or promotion was
asked for) and the gate passed. Work lives in ``evaluation``, ``training`` and ``registry``.
"""

import base64
import datetime as dt
import tempfile
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from leap_serving.features import FEATURE_COLUMNS
from leap_serving.model import ModelArtifactError, load_registered
from leap_serving.publish import PublicationError, verify_folder

from . import registry
from .assets import SINGLE_RUN, partition_days, per_day_table
from .evaluation import (
    EVALUATION_FILES,
    WINDOW_DAYS,
    headline,
    markdown_table,
    plot_nightly_w20,
)
from .partitions import daily_partitions
from .report import ReportSettings, build_report
from .resources import MlflowResource, TrainingResource, WarehouseResource
from .runs import land_days
from .settings import RegistrySettings
from .sources import Oracle, logged_source
from .training import models_folder, run_night, save_trained

EVALUATION_COLUMNS = ("w5", "w10", "w15", "w20", "mdape", "median_ratio", "coverage")


def _image(path: str) -> str:
    return f"![plot](data:image/png;base64,{base64.b64encode(Path(path).read_bytes()).decode()})"


@dg.asset(
    deps=[
        dg.AssetDep(
            "feature_table",
            partition_mapping=dg.TimeWindowPartitionMapping(
                start_offset=-WINDOW_DAYS, end_offset=-1, allow_nonexistent_upstream_partitions=True
            ),
        ),
        "history_snapshot",
        "hardware_specs",
    ],
    partitions_def=daily_partitions,
    backfill_policy=SINGLE_RUN,
    group_name="model",
    io_manager_key="night_records",
)
def cascade_model(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, training: TrainingResource
) -> dg.Output[dict[str, dict]]:
    """Night D (``training.run_night``): the cascade, the single GBDT and the lookup table
    trained on the days before D, the one of the first two that scored best on the window's
    last day published, and every model scored on D. Each day's record names the folder the
    night was published to, with what the registry needs of it."""
    per_day, records = [], {}
    settings = training.training_settings()
    with warehouse.open() as wh:
        for day in partition_days(context):
            night = run_night(wh, day, settings, _oracle(wh, day))
            models = night.models
            snapshot = wh.read("history_snapshot", day, day).drop("ds")
            specs = wh.read("hardware_specs", day, day).drop("ds")
            folder = models_folder(wh.path, day)
            save_trained(models, folder, snapshot, specs, training.profile, night.evaluation)
            records[day.isoformat()] = {"folder": str(folder.resolve()), **night.record()}
            cascade = models.cascade
            per_day.append(
                {
                    "ds": day.isoformat(),
                    "rows": models.training_rows,
                    "seconds": round(sum(models.seconds.values()), 1),
                    "em_iterations": cascade.em_iterations_,
                    "rows_moved": ", ".join(f"{m:.3f}" for m in cascade.rows_moved_),
                    "bins": cascade.n_bins_,
                    "trees_per_expert": int(np.mean(cascade.n_trees_per_expert_)),
                    "published": models.selection["published"],
                    "challenger_margin": round(models.selection["margin"], 3),
                }
            )
            context.log.info(f"trained {day}: {per_day[-1]}")
    last = per_day[-1]
    return dg.Output(
        records,
        metadata={
            "training_rows": last["rows"],
            "training_seconds": last["seconds"],
            "em_iterations": last["em_iterations"],
            "profile": training.profile,
            "per_day": per_day_table(per_day),
        },
    )


@dg.asset(
    deps=["feature_table"],
    check_specs=[
        dg.AssetCheckSpec(
            "evaluation_gate",
            asset="model_evaluation",
            blocking=True,
            description="The published model's w20 reaches the floor and is not more than the "
            "margin below the production model's on the same day.",
        )
    ],
    partitions_def=daily_partitions,
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
    """Night D's evaluation logged to MLflow with its files, the published model registered as a
    new version, and the gate decided against the production model on the same rows. Each
    day's record carries the version, the gate's decision and the evaluation's summary."""
    tracking_uri = mlflow_tracking.configure()
    run_kind = _run_kind(context, training.registry_settings())
    gate_settings = training.gate_settings()
    decisions, per_day, records = [], [], {}
    last = None
    production = _production_model(context)
    with warehouse.open() as wh:
        for day in partition_days(context):
            night = cascade_model[day.isoformat()]
            folder, evaluation = Path(night["folder"]), night["evaluation"]
            try:  # what is registered is what cascade_model published, byte for byte
                verify_folder(folder)
            except PublicationError as exc:
                raise dg.Failure(f"{exc}: materialize cascade_model for {day} again") from exc
            rows = wh.read("feature_table", day, day)
            production_w20 = _production_w20(production, rows)
            gate = registry.evaluation_gate(
                evaluation["overall"]["published"]["w20"],
                production_w20,
                gate_settings.floor,
                gate_settings.margin,
            )
            wh.replace_partition("evaluation", day, _evaluation_rows(evaluation))
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
            )
            scatter = _image(str(folder / "predicted_vs_measured.png"))
            breakdown = pl.read_csv(folder / "breakdown.csv")
            records[day.isoformat()] = {
                "folder": str(folder),
                "version": version,
                "run_id": run_id,
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
                    **{f"{m}_w20": round(overall[m]["w20"], 3) for m in overall},
                    "gate": "pass" if gate.passed else "FAIL",
                }
            )
            context.log.info(f"evaluated {day}: {per_day[-1]} ({gate.reason})")
            last = (evaluation, breakdown, scatter, run_id)
        series = wh.read("evaluation", columns=["ds", "model", "w20"])
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
    failed = [f"{day}: {gate.reason}" for day, gate in decisions if not gate.passed]
    yield dg.AssetCheckResult(
        check_name="evaluation_gate",
        passed=not failed,
        metadata={"decisions": "; ".join(f"{d}: {g.reason}" for d, g in decisions)},
    )


@dg.asset(
    partitions_def=daily_partitions,
    backfill_policy=SINGLE_RUN,
    group_name="model",
)
def production_model(
    context: dg.AssetExecutionContext,
    model_evaluation: dict[str, dict],
    training: TrainingResource,
    mlflow_tracking: MlflowResource,
) -> dg.MaterializeResult:
    """The ``production`` alias: moved to the last day's version on a nightly run whose gate
    passed (or when promotion is asked for); old versions past retention removed."""
    mlflow_tracking.configure()
    day = partition_days(context)[-1]
    registered = model_evaluation[day.isoformat()]
    moved = None
    if not registered["gate_passed"]:
        note = f"not promoted: gate failed ({registered['gate_reason']})"
    elif registered["run_kind"] == "nightly" or training.registry_settings().promote:
        why = "nightly run" if registered["run_kind"] == "nightly" else "promotion asked for"
        moved = registry.promote(
            registered["version"],
            reason=f"{why}, evaluated on {day}: {registered['gate_reason']}",
            actor=f"dagster run {context.run.run_id}",
        )
        note = f"promoted version {registered['version']}"
    else:
        note = f"not promoted: a {registered['run_kind']} run moves the pointer only when asked"
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


def _run_kind(context: dg.AssetExecutionContext, settings: RegistrySettings) -> str:
    if settings.run_kind:
        return settings.run_kind
    return "nightly" if context.run.tags.get("dagster/schedule_name") else "adhoc"


def _oracle(wh, day: dt.date) -> Oracle | None:
    """The truth behind the day's measurements when its source has one (the simulator)."""
    source = logged_source(wh.read("source_log", day, day)["source"].to_list())
    return source.oracle() if source is not None else None


def _production_model(context: dg.AssetExecutionContext):
    """The model the alias names when the run starts (promotion happens after evaluation, so it
    stays the same for every day of the run), or None when there is none or it cannot load."""
    if registry.production_version() is None:
        return None
    try:
        production, _ = load_registered(registry.model_uri())
    except ModelArtifactError as exc:
        context.log.warning(f"production model not comparable: {exc}")
        return None
    return production


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
