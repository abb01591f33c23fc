"""``leap report``: the paper's evaluation on the simulated fleet, and routing measured exactly.

Sections 3 and 4 of the paper, reproduced on a simulated fleet whose truth is known: the nightly
backtest (Figure 8), Table 1, the ablation ladder (Table 2), permutation importance (Figure 4),
hold-outs (Table 4), throughput per type and first choices (Figures 5 and 7), the noise ceiling,
and a routing simulation that prices each policy against the oracle. Pure orchestration over the
pipeline's modules; figures go to ``<data>/reports/``.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from leap_pipeline.data.feature_table import discard_stale_warehouse
from leap_pipeline.data.sources import source_from_uri
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.selection import training_window
from leap_pipeline.modeling.training import Night, run_night
from leap_pipeline.studies.ablations import (
    ablation,
    holdouts,
    permutation_importance,
    unseen_in,
)
from leap_pipeline.studies.exploration import exploration_value
from leap_pipeline.studies.holdout_regret import holdout_regrets
from leap_pipeline.studies.monitoring import monitoring_summary
from leap_pipeline.studies.report_markdown import figures, markdown
from leap_pipeline.studies.report_nights import (
    STUDY_MODULES,
    NightStore,
    landing_digest,
    missing_days,
    night_record,
    peak_memory_mb,
    published_shares,
    remaining_line,
)
from leap_pipeline.studies.report_settings import ReportSettings
from leap_pipeline.studies.staleness import staleness_summary
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS, cost_log_q
from leap_serving.model.publish import write_atomic
from leap_serving.model.published import LeapModel

# lands days first .. last of a source URI in a warehouse file: a run of the data assets
LandDays = Callable[[dt.date, dt.date, str, str], object]


def build_report(
    settings: ReportSettings, land_days: LandDays, log: Callable[[str], None] = print
) -> dict:
    """The paper's evaluation over ``settings.nights`` nights of the simulated fleet, in a
    warehouse of its own that ``land_days`` fills (``runs.land_days``: a run of the data
    assets). The report itself runs no Dagster."""
    start = lap_start = time.perf_counter()
    phases: dict = {"nights": []}  # seconds per stage, to see where a long report's time goes

    def _lap() -> float:
        nonlocal lap_start
        now = time.perf_counter()
        seconds, lap_start = round(now - lap_start, 1), now
        return seconds

    root = settings.data / "reports"
    root.mkdir(parents=True, exist_ok=True)
    warehouse = settings.data / f"report-{settings.scale}-{settings.seed}.duckdb"
    source = f"simulator:seed={settings.seed},scale={settings.scale}"
    fleet = source_from_uri(source)
    first = fleet.first_day()
    days = settings.window_days + settings.nights
    first_night = first + dt.timedelta(days=settings.window_days)
    last = first + dt.timedelta(days=days - 1)
    if discard_stale_warehouse(warehouse):
        log(f"removed {warehouse}: it was built with other features; landing it again")
    if warehouse.exists() and not _landed_by_this_code(warehouse):
        # removed, not landed over: a re-landing stopped part way would leave days of both
        # codes behind a stamp that says this one's
        log(f"{warehouse} was landed by other code: removed, landing every day again")
        for path in (warehouse, warehouse.with_name(warehouse.name + ".wal")):
            path.unlink(missing_ok=True)
    missing = _days_to_land(warehouse, first, last)
    if missing:  # from the first day a stopped run left unlanded: full-scale days take minutes
        log(f"landing {missing[0]} .. {last} of {source} ({len(missing)} of {days} days)")
        # stamped first: a landing stopped part way was this code's, and resumes from its gap
        _stamp(warehouse).write_text(landing_digest())
        land_days(missing[0], last, source, str(warehouse))
    else:
        log(f"all {days} days of {source} are landed in {warehouse}")
    phases["landing"] = _lap()
    oracle = fleet.oracle()

    training = settings.training()
    store = NightStore(root / "nights", settings.night_key())
    nightly, selections, per_night, explored, records, physics = [], [], [], [], [], []
    first_served: tuple[dt.date, LeapModel] | None = None  # the first night's model, as served
    with open_warehouse(warehouse, read_only=True) as wh:
        night_days = [first_night + dt.timedelta(days=i) for i in range(settings.nights)]
        keys = [store.key(wh, night_days[0], settings.window_days)]
        keys += [store.key(wh, day, settings.window_days, keys[0]) for day in night_days[1:]]
        kept = {key: store.load(key) for key in keys}
        final_key = keys[-1]
        study_keys = {s: store.study_key(final_key, s, settings.shuffles) for s in STUDY_MODULES}
        studies = {s: store.load(final_key, part) for s, part in study_keys.items()}
        computed_seconds = [r["seconds"] for r in kept.values() if r]  # until nights run here
        # the nights to compute: those not kept, and the last again when a study of it is not
        study_missing = any(v is None for v in studies.values())
        left = sum(r is None for r in kept.values())
        left += kept[final_key] is not None and study_missing
        log(
            f"{sum(r is not None for r in kept.values())} night(s) kept in {store.folder}; "
            + remaining_line(left, settings.nights, computed_seconds)
        )
        final = None
        for i, (day, key) in enumerate(zip(night_days, keys, strict=True)):
            record = kept[key]
            last_needed = i == settings.nights - 1 and study_missing
            if record is None or last_needed:
                if first_served is None and i > 0:
                    first_served = _first_served(
                        store, keys[0], night_days[0], wh, training, oracle
                    )
                    _lap()  # a night's seconds are its own, not the first night's again
                night = run_night(wh, day, training, oracle)
                record, served = night_record(wh, night, first_served)
                record["seconds"] = _lap()
                record["peak_memory_mb"] = peak_memory_mb()
                store.save(key, record)
                left -= 1
                if i == 0:
                    store.save_model(key, served)
                    first_served = (day, served)
                computed_seconds.append(record["seconds"])  # this machine, now
                final = night
                how, spent = f"{record['seconds']:.0f} s", record["seconds"]
            else:
                how, spent = "kept", _lap()
            records.append(record)
            nightly.append(record["nightly"])
            physics.append(physics_w20(wh.read("feature_table", day, day)))
            selections.append(record["selection"])
            per_night.append(record["monitoring"])
            if record.get("routing_launches") is not None:
                launches = wh.read("job_attempts", day, day)
                explored.append(
                    (
                        launches.select("attempt_id", "family", "candidate_hardware"),
                        record["routing_launches"],
                    )
                )
            phases["nights"].append(spent)  # this run's seconds (a kept night's are its reading)
            log(
                f"night {i + 1}/{settings.nights} {day} ({how}): "
                + ", ".join(f"{m} {v:.3f}" for m, v in nightly[-1].items() if m != "ds")
                + f"; {remaining_line(left, settings.nights, computed_seconds)}"
            )
        day = night_days[-1]
        # the last night's window: as that night read it, or from the warehouse when it was kept
        window = (
            final.window
            if final is not None and final.day == day
            else wh.read("feature_table", *training_window(day, settings.window_days))
        )
        snapshot_before = wh.read(
            "history_snapshot", day - dt.timedelta(days=1), day - dt.timedelta(days=1)
        ).drop("ds")
        specs = wh.read("hardware_specs", day, day).drop("ds")
        attempts = wh.read("job_attempts", day, day)

    # physics, the baseline a launcher has without a model: scored here, beside the kept nights
    series = pl.DataFrame(nightly).with_columns(physics=pl.Series(physics, dtype=pl.Float64))
    last = records[-1]
    report = {
        "settings": {k: str(v) for k, v in settings.__dict__.items()},
        "evaluation_day": day.isoformat(),
        "nightly": nightly,
        "nightly_w20": series["cascade"].to_list(),
        "nightly_w20_median": float(series["cascade"].median()),
        "nightly_w20_range": [float(series["cascade"].min()), float(series["cascade"].max())],
        "published_w20": series["published"].to_list(),
        "published_w20_median": float(series["published"].median()),
        "single_gbdt_w20": series["single_gbdt"].to_list(),
        "single_gbdt_w20_median": float(series["single_gbdt"].median()),
        "w20_by_model": w20_by_model(series),
        # per night: what the selection published and the selection day's evidence for it
        "selection": selections,
        "published_shares": published_shares(selections),
        # per night: its seconds and this process's peak memory when it ended, as computed
        # (a night kept from an earlier run carries that run's figures)
        "night_seconds": [r["seconds"] for r in records],
        "night_peak_memory_mb": [r["peak_memory_mb"] for r in records],
        "night_seconds_median": float(np.median([r["seconds"] for r in records])),
        "night_peak_memory_mb_max": max(r["peak_memory_mb"] for r in records),
        "fits": "Dask: " + training.dask_scheduler if training.dask_scheduler else "in process",
        # per night: the published model's interval coverage and routing value on its day
        "per_night": per_night,
        "monitoring": monitoring_summary(per_night),
        # the first night's model served on every later day beside that night's own
        "staleness": staleness_summary(per_night),
        # one trial run on a candidate the Ranker names, for 2% of each night's launches
        "exploration": exploration_value(explored, oracle),
        "lookup_w20_median": float(series["lookup"].median()),
        "physics_w20": physics,
        "oracle_w20_median": float(series["oracle"].median()),
        "table1": last["table1"],
    }
    for study, run in _last_night_studies(
        final, window, settings, oracle, attempts, snapshot_before, specs, warehouse
    ).items():
        if studies[study] is None:
            log(study)
            studies[study] = run()
            store.save(final_key, studies[study], study_keys[study])
            phases[study] = _lap()
        report.update(studies[study])
    log("first choices and routing")
    # the last night's replay (``routing.day_routing``, which each night's evaluation holds)
    if "policies" not in last["routing"]:
        raise RuntimeError(f"the routing replay of {day} did not run: {last['routing']}")
    first = last["routing_launches"]["first"]
    report["first_choice"] = first_choice_shares(
        attempts, {a: [first[a]] if a in first else [] for a in attempts["attempt_id"]}
    )
    report["routing"] = last["routing"]["policies"]
    report["routing_capture"] = last["routing"]["capture"]["leap"]
    report["figures"] = figures(window, series, report, root)
    phases["routing_and_figures"] = _lap()
    report["phase_seconds"] = phases
    report["seconds"] = round(time.perf_counter() - start, 1)
    write_atomic(root / "report.json", json.dumps(report, indent=2))
    write_atomic(root / "report.md", markdown(report))
    return report


def _stamp(warehouse: Path) -> Path:
    """Beside the warehouse: the digest of the code that landed it (``landing_digest``)."""
    return warehouse.with_name(warehouse.name + ".landed-by")


def _landed_by_this_code(warehouse: Path) -> bool:
    stamp = _stamp(warehouse)
    return stamp.is_file() and stamp.read_text().strip() == landing_digest()


def _days_to_land(warehouse: Path, first: dt.date, last: dt.date) -> list[dt.date]:
    if not warehouse.exists():
        return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    with open_warehouse(warehouse, read_only=True) as wh:
        return missing_days(wh, first, last)


def _first_served(store: NightStore, key: str, day: dt.date, wh, training, oracle):
    """The first night's served model: kept, or computed again when it is not."""
    model = store.load_model(key)
    if model is None:
        model = night_record(wh, run_night(wh, day, training, oracle), None)[1]
        store.save_model(key, model)
    return day, model


def _last_night_studies(
    final: Night | None, window, settings, oracle, attempts, snapshot, specs, warehouse: Path
) -> dict[str, Callable[[], dict]]:
    """The studies of the last night's models, each a function run only when not kept."""

    def ablation_study() -> dict:
        models = final.models
        ladder = ablation(
            window, final.rows, settings.profile, models.single_gbdt_booster, models.cascade
        )
        return {"ablation": ladder}

    def importance_study() -> dict:
        cascade, rows = final.models.cascade, final.rows
        return {"importance": permutation_importance(cascade, rows, settings.shuffles)}

    def holdout_study() -> dict:
        published = final.models.published
        rebuild = unseen_in(warehouse, window, final.day)  # the value unseen, as if new
        table4, refits = holdouts(window, final.rows, published, rebuild)
        targets = {k: (table4[f"holdout_{k}"]["target"], *fit) for k, fit in refits.items()}
        regret = holdout_regrets(attempts, snapshot, specs, oracle, published, targets)
        return {**table4, "holdout_regret": regret}

    return {"ablation": ablation_study, "importance": importance_study, "holdouts": holdout_study}


def physics_w20(rows: pl.DataFrame) -> float | None:
    """w20 of the per-layer cost model alone (``cost_log_q``: the roofline of each layer at the
    type's peaks, no measurement) on a day's feature rows; a row without an architecture, which
    it cannot predict, counts as a miss, as the lookup table's misses do."""
    if rows.height == 0:
        return None  # no measured attempt that day: nothing to score
    X = rows.select(FEATURE_COLUMNS).to_numpy()
    return metrics.within(np.exp(cost_log_q(X)), rows["throughput"].to_numpy(), 20)


def w20_by_model(series: pl.DataFrame) -> dict[str, dict[str, float | None]]:
    """Each model's nightly w20 over the nights: median, lowest and highest (None for a model
    with no figure on any night), in the order the nights record them."""
    summary = {}
    for name in (c for c in series.columns if c != "ds"):
        values = series[name].fill_nan(None).drop_nulls()  # a night with nothing to score
        summary[name] = {
            "median": float(values.median()) if len(values) else None,
            "low": float(values.min()) if len(values) else None,
            "high": float(values.max()) if len(values) else None,
            "nights": len(values),
        }
    return summary


def first_choice_shares(attempts: pl.DataFrame, lists: dict[str, list]) -> list[dict]:
    """Figure 7: per top-10 model type, the share of launches each type was ranked first on."""
    firsts = attempts.select("attempt_id", "model_type").with_columns(
        first=pl.col("attempt_id").replace_strict(
            {a: (p[0] if p else None) for a, p in lists.items()}, return_dtype=pl.String
        )
    )
    top = firsts.group_by("model_type").len().sort(["len", "model_type"], descending=[True, False])
    shares = (
        firsts.filter(pl.col("model_type").is_in(top.head(10)["model_type"].implode()))
        .group_by("model_type", "first")
        .len()
        .with_columns(share=pl.col("len") / pl.col("len").sum().over("model_type"))
        .sort(["model_type", "share", "first"], descending=[False, True, False], nulls_last=True)
    )  # ties in share are ordered by type name, so the report is the same run to run
    return shares.select("model_type", "first", "share").to_dicts()
