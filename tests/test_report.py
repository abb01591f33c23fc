"""The report in its quick mode, its studies on hand-made rows, and the routing simulation on
hand-made jobs."""

import dataclasses
import datetime as dt
import json
import logging
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from leap_pipeline.app.commands import REPORT_JSON_KEYS
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling import routing
from leap_pipeline.modeling.progress import LOGGER_NAME
from leap_pipeline.modeling.selection import split_window, validation_rows
from leap_pipeline.studies import ablations
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS, FEATURE_GROUPS
from leap_serving.model.cascade import make_single_gbdt_booster
from leap_serving.model.fitting import fit_booster


def _jobs(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "attempt_id": [f"j{i}" for i in range(n)],
            "arrival_s": [0.0] * n,
            "logged_hardware": ["dear"] * n,
        }
    )


def _options(n: int) -> pl.DataFrame:
    rows = []
    for i in range(n):
        rows.append((f"j{i}", "cheap", 100.0, 8.0, 1.0))
        rows.append((f"j{i}", "dear", 50.0, 8.0, 3.0))
    return pl.DataFrame(
        rows,
        schema=["attempt_id", "hardware_type", "duration_s", "devices", "cost_usd"],
        orient="row",
    )


def test_routing_places_on_the_first_free_type_and_queues_when_full():
    jobs, options = _jobs(3), _options(3)
    capacity = {"cheap": 16.0, "dear": 8.0}  # two jobs fit on cheap at once, one on dear
    prefer_cheap = {f"j{i}": ["cheap", "dear"] for i in range(3)}
    outcome = routing.simulate(jobs, options, prefer_cheap, capacity)
    # two on cheap now, the third goes to dear (free) rather than waiting
    assert outcome.cost == pytest.approx(1.0 + 1.0 + 3.0)
    assert outcome.top_choice_share == pytest.approx(2 / 3)
    assert outcome.mean_queue_delay_s == 0.0
    # a run on cheap takes 100 s against 50 s on dear, its fastest: more than 1.5x slower
    assert outcome.slow_share == pytest.approx(2 / 3)
    only_cheap = {f"j{i}": ["cheap"] for i in range(3)}
    queued = routing.simulate(jobs, options, only_cheap, capacity)
    assert queued.cost == pytest.approx(3.0)
    assert queued.mean_queue_delay_s == pytest.approx(100.0 / 3)  # the third waits 100 s
    empty = routing.simulate(jobs, options, {}, capacity)
    assert empty.fallback_share == 1.0 and empty.cost == pytest.approx(9.0)
    assert queued.slow_share == 1.0 and empty.slow_share == 0.0
    assert routing.capture(9.0, 5.0, 3.0) == pytest.approx(4 / 6)


def test_capacity_is_the_logged_peak_with_headroom():
    placements = pl.DataFrame(
        {"hardware_type": ["a", "a", "a"], "start_s": [0.0, 5.0, 20.0],
         "end_s": [10.0, 15.0, 30.0], "devices": [8.0, 8.0, 8.0]}
    )  # fmt: skip
    assert routing.capacities(placements, min_devices=0.0) == {"a": 18}  # ceil(16 * 1.1)


def _check_nightly_selection(report: dict) -> None:
    """The nightly selection: one entry per night, and the published model's w20 is its own
    model's figure wherever the report has that model's figure."""
    from leap_serving.model.profiles import GATING

    assert report["published_w20_median"] == float(np.median(report["published_w20"]))
    for night, published, single, cascade in zip(
        report["selection"], report["published_w20"], report["single_gbdt_w20"],
        report["nightly_w20"], strict=True,
    ):  # fmt: skip
        assert night["published_w20"] == published
        assert (night["single_gbdt_w20"], night["cascade_w20"]) == (single, cascade)
        scores = night["selection_scores"]
        assert set(scores) == {"single_gbdt", "single_gbdt_prior", "efficiency_gbdt",
                               "cascade_argmax", "cascade_mean", "cascade_median"}  # fmt: skip
        # a challenger ships only when it clears the bar over the single GBDT, and then it is the
        # best of them on the selection day
        challenger = night["published"] != "single_gbdt"
        assert challenger == (night["margin"] > night["required_margin"])
        if not challenger:
            assert published == single
        else:
            assert max(scores.values()) == scores[night["published"]]
        # the report's cascade figure (``nightly_w20``) is the night's cascade under its own
        # gating, GATING: it is the published figure when that gating shipped. The cascade under
        # another gating is another model, with no day-D figure of its own in the report.
        if night["published"] == f"cascade_{GATING}":
            assert published == cascade


FIRST_NIGHT = dt.date(2026, 1, 9)  # the quick mode's 8-day window after 2026-01-01


@dataclasses.dataclass
class ResumedReport:
    """The quick report stopped in its second night, then run to its end through its asset: the
    folder, the nights each run computed, and what the second run logged and returned."""

    data: Path
    stopped_computed: list
    computed: list
    lines: list
    progress: list  # the progress records (``LOGGER_NAME``) of the second run
    result: object  # the asset's run
    report: dict  # what build_report returned in it


@pytest.fixture(scope="module")
def resumed_report(tmp_path_factory) -> ResumedReport:
    """One quick report for the module's two tests of it (each took about 30 s on its own): a
    user's Ctrl-C in night 2 (``build_report``, whose landing stopped before the last day, the
    day night 2 is scored on), then the report's asset on the same folder, which lands that
    day with the data assets in its own run and resumes from the kept night."""
    import dagster as dg

    from leap_pipeline.orchestration.definitions import defs
    from leap_pipeline.orchestration.runs import land_days
    from leap_pipeline.studies import report as report_module
    from leap_pipeline.studies.report_settings import ReportSettings

    data = tmp_path_factory.mktemp("report")
    computed, lines, returned, stop_on = [], [], {}, [FIRST_NIGHT + dt.timedelta(days=1)]
    real_run_night, real_build_report = report_module.run_night, report_module.build_report

    def run_night(wh, day, *args, **kwargs):
        if day in stop_on:
            raise KeyboardInterrupt  # the user's Ctrl-C, in night 2
        computed.append(day)
        return real_run_night(wh, day, *args, **kwargs)

    def build_report(settings, land, log):
        def both(line: str) -> None:
            lines.append(line)
            log(line)

        returned["report"] = real_build_report(settings, land, log=both)
        return returned["report"]

    progress = logging.getLogger(LOGGER_NAME)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_module, "run_night", run_night)

        def all_but_the_last_day(first, last, *args, **kwargs):
            return land_days(first, last - dt.timedelta(days=1), *args, **kwargs)

        with pytest.raises(KeyboardInterrupt):
            real_build_report(
                ReportSettings.quick_mode(data), all_but_the_last_day, log=lambda line: None
            )
        stopped_computed, computed[:], stop_on[:] = list(computed), [], []
        patch.setattr(report_module, "build_report", build_report)
        level = progress.level
        progress.setLevel(logging.INFO)
        progress.addHandler(handler)
        try:
            result = (
                defs()
                .resolve_implicit_global_asset_job_def()
                .execute_in_process(
                    asset_selection=[dg.AssetKey("paper_report")],
                    run_config={
                        "ops": {"paper_report": {"config": {"quick": True, "data": str(data)}}}
                    },
                    instance=dg.DagsterInstance.ephemeral(),
                )
            )
        finally:
            progress.removeHandler(handler)
            progress.setLevel(level)
    return ResumedReport(
        data, stopped_computed, computed, lines, records, result, returned["report"]
    )


def test_the_quick_report_has_every_section(resumed_report):
    """Through the report's asset, which lands the day its warehouse lacks with the data assets
    and resumes from the night a stopped run kept."""
    tmp_path = resumed_report.data
    result = resumed_report.result
    # after the nights, each long stage shows its steps and ends at 100% (at scale 1.0 the
    # ladder, the importance and the hold-outs take minutes to most of an hour each)
    steps = resumed_report.progress
    for task in ("ablation ladder", "permutation importance", "hold-outs"):
        mine = [r for r in steps if r.getMessage().startswith(task)]
        assert len(mine) > 1, task
        assert mine[-1].leap_finished and not any(r.leap_finished for r in mine[:-1]), task
    assert any("control" in r.getMessage() for r in steps if r.getMessage().startswith("hold"))
    metadata = result.asset_materializations_for_node("paper_report")[0].metadata
    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert metadata["nightly_w20_median"].value == report["nightly_w20_median"]
    for key in ("nightly_w20", "nightly_w20_median", "oracle_w20_median", "single_gbdt_w20_median",
                "table1", "ablation", "holdout_hardware_delta_w20", "holdout_family_delta_w20",
                "routing", "routing_capture"):  # fmt: skip
        assert key in report, key
    assert len(report["nightly_w20"]) == 2
    assert all(0.0 <= w <= 1.0 for w in report["nightly_w20"])
    assert report["oracle_w20_median"] > report["nightly_w20_median"]  # the noise ceiling
    assert [a["configuration"] for a in report["ablation"]][-1].startswith("+ binned cascade")
    # the ladder's top two rungs and the importance base are the last night's single GBDT and
    # cascade, not refits
    assert report["ablation"][-1]["w20"] == report["nightly_w20"][-1]
    assert report["ablation"][-2]["w20"] == report["single_gbdt_w20"][-1]
    assert report["importance"]["base_w20"] == report["nightly_w20"][-1]
    assert len(report["published_w20"]) == len(report["single_gbdt_w20"]) == 2
    # every model's median and range over the nights, from the nights' own figures
    by_model = report["w20_by_model"]
    assert set(by_model) == {"published", "cascade", "single_gbdt", "lookup", "oracle", "physics"}
    assert len(report["physics_w20"]) == 2 and all(0 <= w <= 1 for w in report["physics_w20"])
    for name, w in by_model.items():
        nights = [n.get(name) for n in report["nightly"]] if name != "physics" else (
            report["physics_w20"])  # fmt: skip
        values = [v for v in nights if v is not None]
        assert (w["low"], w["high"], w["nights"]) == (min(values), max(values), len(values))
        assert w["median"] == pytest.approx(np.median(values)), name
    assert by_model["published"]["median"] == report["published_w20_median"]
    assert report["night_seconds_median"] == np.median(report["night_seconds"])
    assert report["night_peak_memory_mb_max"] == max(report["night_peak_memory_mb"]) > 0
    assert set(REPORT_JSON_KEYS) <= set(report)  # what `leap report --json` prints
    page = (tmp_path / "reports" / "report.md").read_text()
    assert "w20 over the 2 night(s)" in page and "| oracle |" in page
    _check_nightly_selection(report)
    # each night's monitoring: its intervals' coverage and what routing by its model was worth
    assert [n["ds"] for n in report["per_night"]] == [n["ds"] for n in report["selection"]]
    for night, selection in zip(report["per_night"], report["selection"], strict=True):
        assert night["published_w20"] == selection["published_w20"]
        assert 0.0 <= night["coverage_80"] <= 1.0 and night["interval_width_median"] > 0
        assert set(night["routing"]) == set(routing.POLICIES)
        assert night["routing_capture"] == pytest.approx(routing.capture(
            night["routing"]["as_logged"]["cost"], night["routing"]["leap"]["cost"],
            night["routing"]["oracle"]["cost"]))  # fmt: skip
    summary = report["monitoring"]
    assert summary["coverage_80_median"] == np.median(
        [n["coverage_80"] for n in report["per_night"]]
    )
    totals = summary["routing_totals"]
    assert totals["oracle"]["capture"] == 1.0 and totals["as_logged"]["capture"] == 0.0
    assert totals["leap"]["cost"] == pytest.approx(
        sum(n["routing"]["leap"]["cost"] for n in report["per_night"])
    )
    assert report["routing"] == report["per_night"][-1]["routing"]
    # the first night's model served on the second night's day, beside that night's own
    aged = report["per_night"][1]["staleness"]
    assert aged["model_age_days"] == 1 and aged["rows"] > 0
    assert 0.0 <= aged["aged_w20"] <= 1.0 and 0.0 <= aged["fresh_w20"] <= 1.0
    assert "staleness" not in report["per_night"][0]
    assert report["staleness"]["w20_lost_oldest"] == pytest.approx(
        aged["fresh_w20"] - aged["aged_w20"])  # fmt: skip
    explored = report["exploration"]
    assert explored["net_saving"] == pytest.approx(
        explored["gross_saving"] - explored["trial_cost"])  # fmt: skip
    assert explored["trials"] <= sum(n["trials_named"] for n in report["per_night"])
    # the novelty flag on the held-out model type: a new type, judged against the others
    novelty = report["holdout_family"]["novelty"]
    assert novelty["launches"] == report["holdout_family"]["rows_scored"] > 0
    assert 0.0 <= novelty["flagged_share"] <= 1.0 and 0.0 <= novelty["flag_right"] <= 1.0
    assert "flagged novel" in (tmp_path / "reports" / "report.md").read_text()
    # where the time went: every stage timed, within the whole run (each lap rounded to 0.1 s)
    phases = report["phase_seconds"]
    stages = ("landing", "nights", "ablation", "importance", "holdouts", "routing_and_figures")
    assert set(phases) == set(stages)
    # the first night kept by the stopped run (its phase is its reading), the second computed
    assert len(phases["nights"]) == 2 and phases["nights"][0] >= 0 and phases["nights"][1] > 0
    spent = sum(phases["nights"]) + sum(phases[k] for k in stages if k != "nights")
    assert spent <= report["seconds"] + 0.05 * len(phases["nights"]) + 0.3
    # Table 4's hold-outs as decisions: the refitted published model and the rules are scored
    # on the same launches, by the oracle's truth on every candidate
    for key in ("hardware", "family"):
        part = report["holdout_regret"][key]
        # the same value Table 4 held out
        assert part["target"] == report[f"holdout_{key}"]["target"]
        assert part["launches"] > 0 and isinstance(part["target"], str)
        decisions = part["highest_fp16_peak"]["per_cost"]["decisions"]
        assert 0 < decisions <= part["launches"]
        for name in ("held_out", "full", "highest_fp16_peak", "best_fp16_peak_per_dollar"):
            for kind in ("fastest", "per_cost"):
                r = part[name][kind]
                assert r["decisions"] == decisions and r["mean"] >= 0.0, (key, name, kind)
                assert r["top1"] <= r["within_5pct"], (key, name, kind)
    assert "Hold-outs as decisions" in (tmp_path / "reports" / "report.md").read_text()
    # Table 4's refits saw no history of what they held out: rebuilt as if it had never run,
    # a row of the held-out type has no family level on it, where the night's rows have one
    assert report["holdout_hardware"]["history_removed"]
    assert report["holdout_family"]["history_removed"]
    day = dt.date.fromisoformat(report["evaluation_day"])
    for column, value, counted in (("hardware_type", report["holdout_hardware"]["target"],
                                    "hist_hw_count"),
                                   ("model_type", report["holdout_family"]["target"],
                                    "hist_count")):  # fmt: skip
        with open_warehouse(tmp_path / "report-0.02-0.duckdb", read_only=True) as wh:
            unseen = ablations.features_without(wh, day, day, column, value).rows
            shipped = wh.read("feature_table", day, day)
        assert sorted(unseen["attempt_id"]) == sorted(shipped["attempt_id"])
        held = pl.col(column) == value
        assert shipped.filter(held)[counted].fill_null(0).max() > 0, column
        assert unseen.filter(held)[counted].fill_null(0).max() == 0, column
    assert set(report["routing"]) == {"as_logged", "lookup", "leap", "leap_lower", "oracle"}
    assert report["routing"]["as_logged"]["top_choice_share"] == 1.0
    assert set(report["importance"]["per_group"]) == set(FEATURE_GROUPS)
    saved = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert saved["nightly_w20"] == report["nightly_w20"]
    for figure in report["figures"]:
        assert (tmp_path / "reports" / figure.split("/")[-1]).stat().st_size > 0


def test_a_stopped_report_resumes_from_its_kept_nights(resumed_report, tmp_path, monkeypatch):
    """A report stopped in its second night keeps the first; the next run computes only the
    second (and the last night's studies), and a third run computes nothing: the same report,
    every night and study read back. The selection's record of each night is in the JSON."""
    import shutil

    from leap_pipeline.orchestration.runs import land_days
    from leap_pipeline.studies import report as report_module
    from leap_pipeline.studies.report import build_report
    from leap_pipeline.studies.report_settings import ReportSettings

    first_night = FIRST_NIGHT
    assert resumed_report.stopped_computed == [first_night]
    computed, lines = resumed_report.computed, resumed_report.lines
    resumed = resumed_report.report
    assert computed == [first_night + dt.timedelta(days=1)]  # night 1 kept, with its model
    assert any("1 night(s) kept" in line and "1 of 2 nights to compute" in line for line in lines)
    # the asset's run landed the one day the stopped run had not, and no other
    last_day = (first_night + dt.timedelta(days=1)).isoformat()
    landed = [line for line in lines if line.startswith("landing")]
    assert landed and landed[0].startswith(f"landing {last_day} .. {last_day} ")
    assert len(landed) == 1 and "(1 of 10 days)" in landed[0]
    assert resumed["per_night"][1]["staleness"]["model_age_days"] == 1  # against night 1's kept
    assert set(resumed["published_shares"]) == {s["published"] for s in resumed["selection"]}
    assert sum(resumed["published_shares"].values()) == pytest.approx(1.0)
    for night in resumed["selection"]:
        assert night["published"] in night["selection_scores"] and night["selection_day"]

    # the rest on a copy of the folder: the module's other test reads the resumed one
    data = tmp_path / "data"
    shutil.copytree(resumed_report.data, data)
    settings = ReportSettings.quick_mode(data)
    computed, real_run_night = [], report_module.run_night

    def run_night(wh, day, *args, **kwargs):
        computed.append(day)
        return real_run_night(wh, day, *args, **kwargs)

    monkeypatch.setattr(report_module, "run_night", run_night)
    computed, lines = [], []
    again = build_report(settings, land_days, log=lines.append)
    assert computed == []  # every night and every study of the last night kept
    assert not any(line in ("ablation", "importance", "holdouts") for line in lines)
    for key in ("nightly", "selection", "per_night", "ablation", "importance",
                "holdout_regret", "holdout_hardware", "routing", "first_choice", "exploration",
                "table1"):  # fmt: skip
        assert again[key] == resumed[key], key

    # the warehouse landed by other code (its stamp says): every day landed again, and as the
    # simulator gave the same content, every night still kept
    stamp = data / "report-0.02-0.duckdb.landed-by"
    stamp.write_text("other code")
    computed, lines = [], []
    build_report(settings, land_days, log=lines.append)
    assert any("landed by other code: removed" in line for line in lines) and computed == []

    # a shorter report keeps the longer one's first night; its last night, the first, is fitted
    # again for its studies, and its served model published again over the kept one
    computed, lines = [], []
    shorter = build_report(dataclasses.replace(settings, nights=1), land_days, log=lines.append)
    assert computed == [first_night] and shorter["nightly"] == resumed["nightly"][:1]
    assert any("1 night(s) kept" in line and "1 of 1 nights to compute" in line for line in lines)


def test_a_kept_night_is_computed_again_for_other_data(tmp_path, monkeypatch):
    """A night's key holds the landed content of its window and day: a day landed with other
    content gives the night another key, while the other nights keep theirs."""
    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.orchestration.runs import land_days
    from leap_pipeline.studies.report_nights import NightStore

    warehouse = tmp_path / "w.duckdb"
    land_days(dt.date(2026, 1, 1), dt.date(2026, 1, 4), "simulator:seed=0,scale=0.02",
              str(warehouse))  # fmt: skip
    store = NightStore(tmp_path / "nights", {"scale": 0.02})
    days = [dt.date(2026, 1, 3), dt.date(2026, 1, 4)]
    with open_warehouse(warehouse, read_only=True) as wh:
        before = [store.key(wh, day, 2) for day in days]
    with open_warehouse(warehouse) as wh:
        log = wh.read("source_log", days[1], days[1])
        wh.replace_partition("source_log", days[1], log.with_columns(content_sha256=pl.lit("x")))
    with open_warehouse(warehouse, read_only=True) as wh:
        after = [store.key(wh, day, 2) for day in days]
    assert after[0] == before[0] and after[1] != before[1]
    with open_warehouse(warehouse, read_only=True) as wh:
        other = NightStore(tmp_path / "nights", {"scale": 0.05}).key(wh, days[0], 2)
    assert other != before[0]  # other settings, another key
    # other landing code (orchestration/data_assets.py, say) over the same source rows: other
    # features, so other nights, though the source log's content digests are the same
    from leap_pipeline.studies import report_nights
    from leap_pipeline.studies.report_settings import ReportSettings

    monkeypatch.setattr(report_nights, "landing_digest", lambda: "other landing code")
    with open_warehouse(warehouse, read_only=True) as wh:
        relanded = NightStore(tmp_path / "nights", {"scale": 0.02}).key(wh, days[0], 2)
    assert relanded != before[0]
    # the report's own settings that change a night are in its key, as computed
    key = ReportSettings.quick_mode(tmp_path).night_key()
    assert {"window_days", "lookup_min_support"} <= set(key) and key["window_days"] == 8


def test_first_choice_ties_are_ordered_by_type_name():
    from leap_pipeline.studies.report import first_choice_shares

    attempts = pl.DataFrame({"attempt_id": list("abcdef"), "model_type": ["m"] * 6})
    lists = {"a": ["T4"], "b": ["T4"], "c": ["L4"], "d": ["A10G"], "e": ["H100"], "f": []}
    shares = first_choice_shares(attempts, lists)
    # T4 leads; L4, A10G, H100 and the empty list (None) tie at one launch each
    assert [s["first"] for s in shares] == ["T4", "A10G", "H100", "L4", None]
    assert sum(s["share"] for s in shares) == pytest.approx(1.0)


def test_flags_left_out_take_the_report_settings_defaults():
    from leap_pipeline.app.cli import build_parser
    from leap_pipeline.studies.report_settings import ReportSettings

    args = build_parser().parse_args(["report"])
    settings = ReportSettings.from_options(args.scale, args.nights, args.seed, args.data, False)
    assert settings == ReportSettings()
    args = build_parser().parse_args(["report", "--scale", "0.3", "--nights", "2",
                                      "--profile", "paper"])  # fmt: skip
    settings = ReportSettings.from_options(
        args.scale, args.nights, args.seed, args.data, False, args.profile
    )
    assert (settings.scale, settings.nights, settings.profile) == (0.3, 2, "paper")
    assert settings.training().profile == "paper"
    with pytest.raises(ValueError, match="profile='slow'"):
        ReportSettings(profile="slow")


def _study_window(rng: np.random.Generator, days: int = 4, per_day: int = 150) -> pl.DataFrame:
    """Feature-table rows of ``days`` days whose throughput follows two of the features."""
    n = days * per_day
    X = rng.normal(size=(n, len(FEATURE_COLUMNS)))
    log_q = X[:, 0] + 0.5 * X[:, -1] + 0.1 * rng.normal(size=n)
    first = dt.date(2026, 1, 1)
    return pl.DataFrame(X, schema=list(FEATURE_COLUMNS)).with_columns(
        ds=pl.Series([first + dt.timedelta(days=i // per_day) for i in range(n)]),
        log_q=pl.Series(log_q),
        throughput=pl.Series(np.exp(log_q)),
    )


def test_the_ladder_scores_the_nights_single_gbdt_and_refits_only_the_lower_rungs(monkeypatch):
    rng = np.random.default_rng(0)
    window, rows = _study_window(rng), _study_window(rng, days=1)
    training, _ = split_window(window)
    single = fit_booster(
        make_single_gbdt_booster("quick"), training.select(FEATURE_COLUMNS).to_numpy(),
        training["log_q"].to_numpy(), validation_rows(training),
    )  # fmt: skip
    fitted_columns = []

    def counted(model, X, y, validation=None):
        fitted_columns.append(X.shape[1])
        return fit_booster(model, X, y, validation)

    class Cascade:  # the night's cascade: only scored
        def predict(self, X):
            return X[:, 0]

    monkeypatch.setattr(ablations, "fit_booster", counted)
    ladder = ablations.ablation(window, rows, "quick", single, Cascade())
    assert len(fitted_columns) == len(ladder) - 2 and max(fitted_columns) < len(FEATURE_COLUMNS)
    assert fitted_columns == sorted(set(fitted_columns))  # each rung adds a group
    X_day = rows.select(FEATURE_COLUMNS).to_numpy()
    assert ladder[-2]["w20"] == metrics.within(
        np.exp(single.predict(X_day)), rows["throughput"].to_numpy(), 20
    )
    assert ladder[-1]["w20"] == metrics.within(np.exp(X_day[:, 0]), rows["throughput"], 20)
