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
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from leap_pipeline.data.feature_table import discard_stale_warehouse
from leap_pipeline.data.sources import source_from_uri
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.selection import serving_model
from leap_pipeline.modeling.training import run_night
from leap_pipeline.settings import MIN_SUPPORT, WINDOW_DAYS, TrainingSettings, environment
from leap_pipeline.studies.ablations import ablation, holdouts, permutation_importance
from leap_pipeline.studies.exploration import exploration_value
from leap_pipeline.studies.holdout_regret import holdout_regrets
from leap_pipeline.studies.monitoring import monitoring_summary, night_monitoring
from leap_pipeline.studies.report_markdown import figures, markdown
from leap_pipeline.studies.staleness import staleness_scores, staleness_summary
from leap_serving.model.profiles import profile_params
from leap_serving.model.publish import write_atomic
from leap_serving.model.published import LeapModel


@dataclass(frozen=True)
class ReportSettings:
    # the largest scale at which 30 nights take about an hour on 2 cores: 0.2 took 3,633 s
    # (docs/results.md), and a night's fits grow with the rows
    scale: float = 0.2
    nights: int = 30
    seed: int = 0
    profile: str = "fast"
    shuffles: int = 10
    # the install's data folder ($LEAP_DATA), read when settings are made, never at import
    data: Path = field(default_factory=lambda: environment().data)
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scale={self.scale!r} must be positive")
        if self.nights < 1:
            raise ValueError(f"nights={self.nights!r} must be at least 1")
        profile_params(self.profile)  # an unknown profile: a clear error before any work

    @classmethod
    def quick_mode(cls, data: Path | None = None) -> ReportSettings:
        folder = {"data": Path(data)} if data else {}
        return cls(scale=0.02, nights=2, profile="quick", shuffles=2, quick=True, **folder)

    @classmethod
    def from_options(
        cls,
        scale: float | None,
        nights: int | None,
        seed: int,
        data: str | Path | None,
        quick: bool,
        profile: str | None = None,
    ) -> ReportSettings:
        """The settings the CLI flags and the asset's config name, read the same way (a flag
        left out, None, takes the default here; no ``data``: the install's data folder)."""
        if quick:
            return cls.quick_mode(Path(data) if data else None)
        return cls(
            scale=cls.scale if scale is None else scale,
            nights=cls.nights if nights is None else nights,
            seed=seed,
            profile=cls.profile if profile is None else profile,
            **({"data": Path(data)} if data else {}),
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
    log(f"landing {days} days of {source}")
    land_days(first, last, source, str(warehouse))
    phases["landing"] = _lap()
    oracle = fleet.oracle()

    training = settings.training()
    nightly, selections, per_night, explored, final = [], [], [], [], None
    first_served: tuple[dt.date, LeapModel] | None = None  # the first night's model, as served
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
            per_night.append(night_monitoring(day, evaluation))
            launches = wh.read("job_attempts", day, day)
            before = day - dt.timedelta(days=1)
            served = serving_model(
                models,
                wh.read("history_snapshot", before, before).drop("ds"),
                wh.read("hardware_specs", day, day).drop("ds"),
            )
            if first_served is None:
                first_served = (day, served)
            else:  # the first night's model, as if every night since had failed
                per_night[-1]["staleness"] = staleness_scores(
                    served, first_served[1], first_served[0], launches, day
                )
            if evaluation.get("routing_launches") is not None:
                explored.append((launches.select("attempt_id", "family", "candidate_hardware"),
                                 evaluation["routing_launches"]))  # fmt: skip
            phases["nights"].append(_lap())
            log(
                f"night {i + 1}/{settings.nights} {day} ({phases['nights'][-1]:.0f} s): "
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
        # per night: the published model's interval coverage and routing value on its day
        "per_night": per_night,
        "monitoring": monitoring_summary(per_night),
        # the first night's model served on every later day beside that night's own
        "staleness": staleness_summary(per_night),
        # one trial run on a candidate the Ranker names, for 2% of each night's launches
        "exploration": exploration_value(explored, oracle),
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
    report["ablation"] = ablation(window, rows, settings.profile, models.single_gbdt_booster,
                                  models.cascade)  # fmt: skip
    phases["ablation"] = _lap()
    log("permutation importance")
    report["importance"] = permutation_importance(models.cascade, rows, settings.shuffles)
    phases["importance"] = _lap()
    log("hold-outs")
    table4, refits = holdouts(window, rows, models.published)
    report.update(table4)
    phases["holdouts"] = _lap()
    log("hold-outs as decisions")
    report["holdout_regret"] = holdout_regrets(
        attempts, snapshot_before, specs, oracle, models.published,
        {key: (report[f"holdout_{key}"]["target"], refit) for key, refit in refits.items()},
    )  # fmt: skip
    phases["holdout_regret"] = _lap()
    log("first choices and routing")
    # the last night's replay (``routing.day_routing``, which each night's evaluation holds)
    if "policies" not in evaluation.get("routing", {}):
        raise RuntimeError(f"the routing replay of {day} did not run: {evaluation.get('routing')}")
    first = evaluation["routing_launches"]["first"]
    report["first_choice"] = first_choice_shares(
        attempts, {a: [first[a]] if a in first else [] for a in attempts["attempt_id"]}
    )
    report["routing"] = evaluation["routing"]["policies"]
    report["routing_capture"] = evaluation["routing"]["capture"]["leap"]
    report["figures"] = figures(window, series, report, root)
    phases["routing_and_figures"] = _lap()
    report["phase_seconds"] = phases
    report["seconds"] = round(time.perf_counter() - start, 1)
    write_atomic(root / "report.json", json.dumps(report, indent=2))
    write_atomic(root / "report.md", markdown(report))
    return report


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
