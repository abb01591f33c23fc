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
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

from leap_pipeline.data.feature_table import discard_stale_warehouse
from leap_pipeline.data.sources import source_from_uri
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.evaluation import novelty_scores
from leap_pipeline.modeling.progress import Progress
from leap_pipeline.modeling.selection import validation_rows
from leap_pipeline.modeling.training import run_night, save_trained
from leap_pipeline.settings import MIN_SUPPORT, WINDOW_DAYS, TrainingSettings
from leap_pipeline.studies import routing
from leap_serving import metrics
from leap_serving.cascade import (
    SINGLE_GBDT_UNITS,
    BinnedCascade,
    cascade_units,
    fit_booster,
    profile_params,
    single_gbdt,
)
from leap_serving.compiled import CompiledCascade
from leap_serving.features import FEATURE_COLUMNS, FEATURE_GROUPS
from leap_serving.novelty import NoveltyReference
from leap_serving.publish import write_atomic
from leap_serving.ranking import Ranker


@dataclass(frozen=True)
class ReportSettings:
    # the largest scale at which 30 nights take about an hour on 2 cores: 0.2 took 3,633 s
    # (docs/results.md), and a night's fits grow with the rows
    scale: float = 0.2
    nights: int = 30
    seed: int = 0
    profile: str = "fast"
    shuffles: int = 10
    data: Path = Path("data")
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scale={self.scale!r} must be positive")
        if self.nights < 1:
            raise ValueError(f"nights={self.nights!r} must be at least 1")

    @classmethod
    def quick_mode(cls, data: Path = Path("data")) -> ReportSettings:
        return cls(scale=0.02, nights=2, profile="quick", shuffles=2, data=data, quick=True)

    @classmethod
    def from_options(
        cls, scale: float | None, nights: int | None, seed: int, data: str | Path, quick: bool
    ) -> ReportSettings:
        """The settings the CLI flags and the asset's config name, read the same way (a flag
        left out, None, takes the default here)."""
        if quick:
            return cls.quick_mode(Path(data))
        return cls(
            scale=cls.scale if scale is None else scale,
            nights=cls.nights if nights is None else nights,
            seed=seed,
            data=Path(data),
        )

    def training(self) -> TrainingSettings:
        """Each night's training: the report's profile, its window, a lookup-table support
        that shrinks with the fleet, every core (the models are the same on any count)."""
        return TrainingSettings(
            profile=self.profile, window_days=self.window_days,
            lookup_min_support=self.lookup_min_support, n_jobs=-1,
        )  # fmt: skip

    @property
    def lookup_min_support(self) -> int:
        return max(2, round(MIN_SUPPORT * self.scale))

    @property
    def window_days(self) -> int:
        return 8 if self.quick else WINDOW_DAYS


# lands days first .. last of a source URI in a warehouse file: a run of the data assets
LandDays = Callable[[dt.date, dt.date, str, str], object]


def build_report(
    settings: ReportSettings, land_days: LandDays, log: Callable[[str], None] = print
) -> dict:
    """The paper's evaluation over ``settings.nights`` nights of the simulated fleet, in a
    warehouse of its own that ``land_days`` fills (``runs.land_days``: a run of the data
    assets). The report itself runs no Dagster."""
    start = time.perf_counter()
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
    log(f"landing {days} days of {source}")
    land_days(first, last, source, str(warehouse))
    oracle = fleet.oracle()

    training = settings.training()
    nightly, selections, final = [], [], None
    with open_warehouse(warehouse, read_only=True) as wh:
        for i in range(settings.nights):
            day = first_night + dt.timedelta(days=i)
            night = run_night(wh, day, training, oracle)
            window, rows = night.window, night.rows
            models, evaluation = night.models, night.evaluation
            nightly.append(
                {"ds": day.isoformat(), **{m: v["w20"] for m, v in evaluation["overall"].items()}}
            )
            selections.append(
                {
                    "ds": day.isoformat(),
                    "published": models.selection["published"],
                    "selection_scores": models.selection["scores"],
                    "margin": models.selection["margin"],
                    "required_margin": models.selection["required_margin"],
                    "published_w20": nightly[-1]["published"],
                    "single_gbdt_w20": nightly[-1]["single_gbdt"],
                    "cascade_w20": nightly[-1]["cascade"],
                }
            )
            log(
                f"night {i + 1}/{settings.nights} {day}: "
                + ", ".join(f"{m} {v:.3f}" for m, v in nightly[-1].items() if m != "ds")
            )
            final = (day, window, rows, models, evaluation)
        day, window, rows, models, evaluation = final
        snapshot_before = wh.read(
            "history_snapshot", day - dt.timedelta(days=1), day - dt.timedelta(days=1)
        ).drop("ds")
        specs = wh.read("hardware_specs", day, day).drop("ds")
        attempts = wh.read("job_attempts", day, day)

    series = pl.DataFrame(nightly)
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
        "selection": selections,
        "lookup_w20_median": float(series["lookup"].median()),
        "oracle_w20_median": float(series["oracle"].median()),
        "table1": {
            "covered_jobs": evaluation["table1"]["covered_attempts"],
            "coverage": evaluation["table1"]["coverage"],
            **{
                k: evaluation["table1"][k]
                for k in evaluation["table1"]
                if "_w" in k or "ratio" in k
            },
        },
    }
    log("ablation ladder")
    report["ablation"] = ablation(window, rows, settings, models.cascade)
    log("permutation importance")
    report["importance"] = permutation_importance(models.cascade, rows, settings.shuffles)
    log("hold-outs")
    report.update(holdouts(window, rows, settings, models.cascade))
    log("first choices and routing")
    with tempfile.TemporaryDirectory() as tmp:
        night = Path(tmp) / "night"
        save_trained(models, night, snapshot_before, specs, settings.profile)
        ranker = Ranker(
            str(night / "cascade"),
            check_interval_s=float("inf"),
            wait=True,
            max_model_age_days=None,  # a simulated day long past: its age says nothing
        )
        leap_lists = leap_preferences(ranker, attempts, day)
    report["first_choice"] = first_choice_shares(attempts, leap_lists)
    report["routing"], report["routing_capture"] = routing_value(
        attempts, specs, models, leap_lists, oracle
    )
    report["figures"] = figures(window, series, report, root)
    report["seconds"] = round(time.perf_counter() - start, 1)
    write_atomic(root / "report.json", json.dumps(report, indent=2))
    write_atomic(root / "report.md", markdown(report))
    return report


def _holdout_cascade(settings: ReportSettings) -> BinnedCascade:
    """A hold-out's cascade, on every core as the nights' are (at scale 1.0 the four fits took
    42 minutes on one)."""
    return BinnedCascade(**profile_params(settings.profile), n_jobs=settings.training().n_jobs)


def _w20_log(predicted_log_q: np.ndarray, rows: pl.DataFrame) -> float:
    return metrics.within(np.exp(predicted_log_q), rows["throughput"].to_numpy(), 20)


def ablation(
    window: pl.DataFrame, rows: pl.DataFrame, settings: ReportSettings, cascade: BinnedCascade
) -> list[dict]:
    """Table 2's ladder on one held-out day: add feature groups, then the cascade (``cascade``:
    the night's model, already fitted on ``window``). Every rung is fitted at the report's profile,
    so a step up the ladder measures the features or the model, never a change of tree budget."""
    groups = [
        ("single GBDT: launch config + hardware specs", ("job", "cfg", "hw")),
        ("+ job history", ("job", "cfg", "hw", "hist")),
        ("+ throughput-ratio features", ("job", "cfg", "hw", "hist", "ratio")),
        ("+ architecture features", ("job", "cfg", "hw", "hist", "ratio", "arch")),
    ]
    y = window["log_q"].to_numpy()
    held_out = validation_rows(window)
    ladder = []
    progress = Progress("ablation ladder", SINGLE_GBDT_UNITS * len(groups))
    with threadpool_limits(1):
        for rung, (name, chosen) in enumerate(groups, start=1):
            columns = [c for g in chosen for c in FEATURE_GROUPS[g]]
            X = window.select(columns).to_numpy()
            model = single_gbdt(settings.profile)
            with progress.rounds(model, SINGLE_GBDT_UNITS, f"rung {rung}/{len(groups)}, "):
                model = fit_booster(model, X, y, held_out)
            ladder.append(
                {
                    "configuration": f"{name} ({settings.profile} profile)",
                    "w20": _w20_log(model.predict(rows.select(columns).to_numpy()), rows),
                }
            )
    ladder.append(
        {
            "configuration": f"+ binned cascade ({settings.profile} profile)",
            "w20": _w20_log(cascade.predict(rows.select(FEATURE_COLUMNS).to_numpy()), rows),
        }
    )
    return ladder


def permutation_importance(cascade: BinnedCascade, rows: pl.DataFrame, shuffles: int) -> dict:
    """Drop in w20 when one feature (or one group together) is shuffled on the held-out day.
    A day's rows of many launches, scored (features + groups) x shuffles times: through the
    compiled trees' many-row walk, one thread per core."""
    compiled = CompiledCascade(cascade)
    X = rows.select(FEATURE_COLUMNS).to_numpy()
    threads = os.cpu_count() or 1
    base = _w20_log(compiled.predict(X, threads)[0], rows)
    rng = np.random.default_rng(0)
    progress = Progress("permutation importance", len(FEATURE_COLUMNS) + len(FEATURE_GROUPS))

    def drop(name: str, columns: list[int]) -> float:
        losses = []
        for _ in range(shuffles):
            shuffled = X.copy()
            order = rng.permutation(len(X))
            shuffled[:, columns] = X[order][:, columns]
            losses.append(base - _w20_log(compiled.predict(shuffled, threads)[0], rows))
        progress.advance(f"{name} shuffled {shuffles}x")
        return float(np.mean(losses))

    index = {name: i for i, name in enumerate(FEATURE_COLUMNS)}
    per_feature = {name: drop(name, [index[name]]) for name in FEATURE_COLUMNS}
    per_group = {
        g: drop(f"group {g}", [index[c] for c in cols]) for g, cols in FEATURE_GROUPS.items()
    }
    top = sorted(per_feature.items(), key=lambda item: -item[1])[:15]
    return {
        "base_w20": base,
        "per_group": per_group,
        "top_features": dict(top),
        "per_feature": per_feature,
    }


def holdouts(
    window: pl.DataFrame, rows: pl.DataFrame, settings: ReportSettings, cascade: BinnedCascade
) -> dict:
    """Table 4: remove one hardware type, or one model type, from training; the same number of
    random rows removed is the control. Scored on the held-out day's rows of that type; the
    full model is ``cascade``, the night's model fitted on all of ``window``."""
    X_all, y_all = window.select(FEATURE_COLUMNS).to_numpy(), window["log_q"].to_numpy()
    held_out = validation_rows(window)
    rng = np.random.default_rng(0)
    model = _holdout_cascade(settings)
    progress = Progress(
        "hold-outs",
        4 * cascade_units(model.max_em_iter, model.n_bins, model.expert_overlap, model.em_sample),
    )
    out = {}
    for key, column in (("hardware", "hardware_type"), ("family", "model_type")):
        counts = rows.group_by(column).len().sort(["len", column], descending=[True, False])
        target = counts[column][0]
        scored = rows.filter(pl.col(column) == target)
        removed = (window[column] == target).to_numpy()
        control = np.zeros(len(y_all), dtype=bool)
        control[rng.choice(len(y_all), size=int(removed.sum()), replace=False)] = True
        X_day = scored.select(FEATURE_COLUMNS).to_numpy()
        w20 = {"full": _w20_log(cascade.predict(X_day), scored)}
        predicted = {}
        for name, drop in (("held_out", removed), ("control", control)):
            progress.phase = (f"{column} {target} held out" if name == "held_out"
                              else f"{column} control: as many random rows out")  # fmt: skip
            fitted = _holdout_cascade(settings).fit(
                X_all[~drop], y_all[~drop], validation=held_out[~drop], progress=progress
            )
            predicted[name] = np.exp(fitted.predict(X_day))
            w20[name] = _w20_log(np.log(predicted[name]), scored)
        out[f"holdout_{key}"] = {
            "held_out": target,
            "rows_removed": int(removed.sum()),
            "rows_scored": scored.height,
            **w20,
        }
        if key == "family":  # the novelty flag where the model type really is new to the model
            reference = NoveltyReference.fit(window.filter(~removed)["model_type"].to_list(),
                                             X_all[~removed])  # fmt: skip
            out["holdout_family"]["novelty"] = novelty_scores(
                reference.assess_rows(scored["model_type"].to_list(), X_day),
                predicted["held_out"], scored["throughput"].to_numpy(),
            )  # fmt: skip
        out[f"holdout_{key}_delta_w20"] = w20["held_out"] - w20["full"]
        out[f"holdout_{key}_control_delta_w20"] = w20["control"] - w20["full"]
    return out


def leap_preferences(ranker: Ranker, attempts: pl.DataFrame, day: dt.date) -> dict[str, list]:
    jobs = [
        ({k: v for k, v in row.items() if k != "candidate_hardware"}, row["candidate_hardware"])
        for row in attempts.iter_rows(named=True)
    ]
    rankings = ranker.rank_many(jobs, launch_date=day)
    return {a: r.preference_list for a, r in zip(attempts["attempt_id"], rankings, strict=True)}


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


def routing_value(attempts, specs, models, leap_lists, oracle) -> tuple[dict, float | None]:
    """The same day replayed under each policy; costs from the truth."""
    types = specs["hardware_type"].to_list()
    truth = oracle.true_medians(attempts["attempt_id"].to_list(), types)
    cost_per_hour = dict(zip(types, specs["hourly_cost_usd"].to_list(), strict=True))
    candidates = attempts.select("attempt_id", pl.col("candidate_hardware").alias("hardware_type"))
    # devices as contract.job_devices counts them: the ranker's cost uses the same definition
    options = truth.join(candidates.explode("hardware_type"), on=["attempt_id", "hardware_type"])
    day_start = dt.datetime.combine(attempts["ds"][0], dt.time())
    jobs = attempts.select(
        "attempt_id",
        arrival_s=(pl.col("launch_ts") - pl.lit(day_start)).dt.total_microseconds() / 1e6,
        logged_hardware="hardware_type",
    )
    logged = jobs.join(
        options, left_on=["attempt_id", "logged_hardware"], right_on=["attempt_id", "hardware_type"]
    )
    capacity = routing.capacities(
        logged.select(
            hardware_type="logged_hardware",
            start_s="arrival_s",
            end_s=pl.col("arrival_s") + pl.col("duration_s"),
            devices="devices",
        )
    )
    for hardware_type in types:
        capacity.setdefault(hardware_type, 8.0)
    lookup = models.lookup.predict(
        attempts.explode("candidate_hardware")
        .drop("hardware_type")
        .rename({"candidate_hardware": "hardware_type"})
    )
    exploded = (
        attempts.explode("candidate_hardware")
        .select("attempt_id", "num_trainers", hardware_type="candidate_hardware")
        .with_columns(lookup=lookup)
    )
    per_dollar = (
        exploded.join(
            options.select("attempt_id", "hardware_type", "devices"),
            on=["attempt_id", "hardware_type"],
        )
        .with_columns(
            score=pl.col("lookup")
            / (
                pl.col("devices")
                * pl.col("hardware_type").replace_strict(cost_per_hour, return_dtype=pl.Float64)
            )
        )
        .filter(pl.col("score").is_not_null())
        .sort("score", descending=True)
    )
    lookup_lists = per_dollar.group_by("attempt_id", maintain_order=True).agg("hardware_type")
    cheapest = (
        options.sort("cost_usd").group_by("attempt_id", maintain_order=True).agg("hardware_type")
    )
    policies = {
        "as_logged": dict(
            zip(jobs["attempt_id"], ([h] for h in jobs["logged_hardware"]), strict=True)
        ),
        "lookup": dict(lookup_lists.iter_rows()),
        "leap": leap_lists,
        "oracle": dict(cheapest.iter_rows()),
    }
    outcomes = {
        name: routing.simulate(jobs, options, lists, capacity).__dict__
        for name, lists in policies.items()
    }
    captured = routing.capture(
        outcomes["as_logged"]["cost"], outcomes["leap"]["cost"], outcomes["oracle"]["cost"]
    )
    return outcomes, captured


def figures(window: pl.DataFrame, series: pl.DataFrame, report: dict, root: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from leap_pipeline.modeling.evaluation_files import plot_nightly_w20

    paths = []
    long = series.unpivot(index="ds", variable_name="model", value_name="w20")
    paths.append(plot_nightly_w20(long, str(root / "figure8_nightly_w20.png")))
    by_type = window.group_by("hardware_type").agg(pl.col("log_q")).sort("hardware_type")
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.boxplot([np.array(v) / np.log(10) for v in by_type["log_q"]], showfliers=False)
    ax.set_xticks(range(1, by_type.height + 1), by_type["hardware_type"].to_list(), rotation=60)
    ax.set(ylabel="log10 samples/s", title="Figure 5: throughput per hardware type")
    fig.tight_layout()
    fig.savefig(root / "figure5_throughput_by_type.png", dpi=90)
    plt.close(fig)
    paths.append(str(root / "figure5_throughput_by_type.png"))
    groups = report["importance"]["per_group"]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.barh(list(groups), list(groups.values()))
    ax.set(xlabel="drop in w20 when shuffled", title="Figure 4: importance by group")
    fig.tight_layout()
    fig.savefig(root / "figure4_importance.png", dpi=90)
    plt.close(fig)
    paths.append(str(root / "figure4_importance.png"))
    return paths


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _points(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f} points"


def markdown(report: dict) -> str:
    novelty = report["holdout_family"].get("novelty", {})
    lines = [
        f"# LEAP report ({report['settings']['scale']} scale, evaluation day "
        f"{report['evaluation_day']})",
        "",
        "| figure | ours | paper |",
        "|---|---|---|",
        f"| published model w20, median | {_pct(report['published_w20_median'])} "
        "| 77.0% (73.5 - 80.6) |",
        f"| cascade w20, median (range) | {_pct(report['nightly_w20_median'])} "
        f"({_pct(report['nightly_w20_range'][0])} - {_pct(report['nightly_w20_range'][1])}) "
        "| 77.0% (73.5 - 80.6) |",
        f"| single GBDT w20, median | {_pct(report['single_gbdt_w20_median'])} "
        "| 0.5 points below the cascade (Table 2) |",
        f"| oracle (noise ceiling) w20, median | {_pct(report['oracle_w20_median'])} | - |",
        f"| Table 1: lookup coverage | {_pct(report['table1']['coverage'])} | 13.3% |",
        f"| Table 1: lookup w20 / cascade w20 on covered | "
        f"{_pct(report['table1'].get('lookup_w20'))} / "
        f"{_pct(report['table1'].get('cascade_w20'))} | 53.2% / 85.1% |",
        f"| hold out a hardware type: change in w20 | "
        f"{_points(report['holdout_hardware_delta_w20'])} (control "
        f"{_points(report['holdout_hardware_control_delta_w20'])}) | -37 points (control < 2) |",
        f"| hold out a model type: change in w20 | {_points(report['holdout_family_delta_w20'])} "
        f"(control {_points(report['holdout_family_control_delta_w20'])}) | -49.7 points |",
        f"| held-out model type: launches flagged novel; w20 flagged / unflagged; flag right | "
        f"{_pct(novelty.get('flagged_share'))}; {_pct(novelty.get('w20_flagged'))} / "
        f"{_pct(novelty.get('w20_unflagged'))}; {_pct(novelty.get('flag_right'))} | - |",
        f"| routing capture of the oracle's saving | {_pct(report['routing_capture'])} | - |",
        "",
        "## Ablation (one held-out day)",
        "",
        "| configuration | w20 |",
        "|---|---|",
    ]
    lines += [f"| {a['configuration']} | {_pct(a['w20'])} |" for a in report["ablation"]]
    lines += [
        "",
        "## Nightly selection (scored on each window's last day, published as trained)",
        "",
        "| night | published | best challenger's margin over the single GBDT on the selection "
        "day (bar) | published w20 | single GBDT w20 |",
        "|---|---|---|---|---|",
    ]
    for night in report["selection"]:
        lines.append(
            f"| {night['ds']} | {night['published']} | {_points(night['margin'])} "
            f"({_points(night['required_margin'])}) | "
            f"{_pct(night['published_w20'])} | {_pct(night['single_gbdt_w20'])} |"
        )
    lines += [
        "",
        "## Routing",
        "",
        "| policy | cost (USD) | device-hours | mean queue (s) | top choice | fallback |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {o['cost']:,.0f} | {o['device_hours']:,.0f} | "
        f"{o['mean_queue_delay_s']:,.0f} | {_pct(o['top_choice_share'])} | "
        f"{_pct(o['fallback_share'])} |"
        for name, o in report["routing"].items()
    ]
    lines += ["", "## Importance by group (drop in w20)", ""]
    lines += [f"- {g}: {v:.3f}" for g, v in report["importance"]["per_group"].items()]
    return "\n".join(lines) + "\n"
