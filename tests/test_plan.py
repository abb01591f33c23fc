"""``leap plan``: which GPU type to buy, priced by replaying the window on predictions. The replay
on hand-made launches (a plan on perfect predictions is the truth), the errors that name their
field, and the command on the session's small demo."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import polars as pl
import pytest

from leap_pipeline.app import cli
from leap_pipeline.modeling import planning
from leap_pipeline.modeling.planning import PlanInputError, Predictions, Purchase

DAY = dt.date(2026, 3, 1)


def _launches(n: int) -> pl.DataFrame:
    """``n`` launches of two families, a minute apart, each 1e6 samples of work on 8 devices,
    logged on the expensive type ``big``."""
    start = dt.datetime.combine(DAY, dt.time())
    attempts = pl.DataFrame(
        {
            "attempt_id": [f"a{i:03d}" for i in range(n)],
            "ds": [DAY] * n,
            "launch_ts": [start + dt.timedelta(minutes=i) for i in range(n)],
            "hardware_type": ["big"] * n,
            "model_type": ["dlrm" if i % 3 else "bert" for i in range(n)],
            "throughput": [1000.0] * n,
            "duration_s": [1000.0] * n,
        }
    )
    return planning.window_launches(attempts, DAY, DAY)


def _predictions(launches: pl.DataFrame, rate: dict[str, float]) -> Predictions:
    """Every launch on each type of ``rate`` (samples/s), 8 devices, ``big`` at 4 USD a
    device-hour and ``small`` at 1; a 10% interval; cheaper per sample first."""
    price = {"big": 4.0, "small": 1.0}
    rows = [
        (a, h, q, q * 0.9, q * 1.1, 8.0, price[h])
        for a in launches["attempt_id"]
        for h, q in rate.items()
    ]
    order = sorted(rate, key=lambda h: price[h] / rate[h])
    options = pl.DataFrame(rows, schema=planning._OPTIONS, orient="row")
    return Predictions(options, {a: list(order) for a in launches["attempt_id"]})


def test_a_plan_on_perfect_predictions_saves_what_the_truth_saves():
    launches = _launches(60)
    # small runs at half big's rate at a quarter of its price: half the cost per sample
    predictions = _predictions(launches, {"big": 1000.0, "small": 500.0})
    result = planning.plan_purchases(
        launches, predictions, {"big": 400.0}, [Purchase("small", (8, 16, 800))]
    )
    table = {row["count"]: row for row in result.table.iter_rows(named=True)}
    # the fleet as it is: 60 launches of 1,000 s on 8 big devices at 4 USD
    assert result.baseline.cost == pytest.approx(60 * 1000 / 3600 * 8 * 4)
    # unbounded, every launch goes small: 2,000 s each, one a minute, 8 devices, so at most
    # ceil(2000 / 60) = 34 run at once
    assert result.saturation["small"] == 34 * 8
    everything = 60 * (1000 / 3600 * 8 * 4 - 2000 / 3600 * 8 * 1)
    assert table[800]["saving_usd"] == pytest.approx(everything)
    # 8 small devices hold one launch at a time: fewer move, and fewer still at 8 than at 16
    assert 0 < table[8]["saving_usd"] < table[16]["saving_usd"] < table[800]["saving_usd"]
    assert table[800]["families_moving"].startswith("dlrm 67%, bert 33%")
    for row in table.values():
        assert row["saving_low_usd"] <= row["saving_usd"] <= row["saving_high_usd"]
    # the truth prices the same placements: with predictions that are the truth, the same saving
    truth = predictions.options.select("attempt_id", "hardware_type", true_median="throughput")
    base = planning.true_cost(result.baseline_placements, launches, truth)
    for count, row in table.items():
        # in any row order: each placement is priced at its own type's price
        placed = result.placements[("small", count)].sample(fraction=1.0, shuffle=True, seed=count)
        assert base - planning.true_cost(placed, launches, truth) == pytest.approx(
            row["saving_usd"]
        )
    # and a truth the predictions got wrong (small at a third of its predicted rate) shows it
    wrong = truth.with_columns(
        true_median=pl.when(pl.col("hardware_type") == "small")
        .then(pl.col("true_median") / 3)
        .otherwise(pl.col("true_median"))
    )
    placed = result.placements[("small", 800)]
    assert base - planning.true_cost(placed, launches, wrong) < 0 < table[800]["saving_usd"]


def test_a_type_no_launch_prefers_saves_nothing_and_needs_no_device():
    launches = _launches(10)
    # small is slower per dollar than big: routing never picks it
    predictions = _predictions(launches, {"big": 1000.0, "small": 100.0})
    result = planning.plan_purchases(
        launches, predictions, {"big": 400.0}, [Purchase("small", (8,))]
    )
    (row,) = result.table.iter_rows(named=True)
    assert row["saving_usd"] == 0 and row["families_moving"] == ""
    assert result.saturation["small"] == 0


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("H100", "expected TYPE:COUNTS"),
        ("H100:0", "count=0"),
        ("H100:8,x", "count='x'"),
        ("H100:8:-1", "price='-1'"),
        ("H100:8:free", "price='free'"),
        ("H100:8:30000/0y", "price='30000/0y'"),
    ],
)
def test_a_bad_purchase_is_refused_naming_its_field(text, named):
    with pytest.raises(PlanInputError, match=named.replace("(", r"\(")):
        planning.parse_purchase(text)


def test_an_amortized_price_is_spread_over_every_hour_of_its_years():
    purchase = planning.parse_purchase("B200:8,16:26298/1y")
    assert purchase.counts == (8, 16)
    assert purchase.hourly_cost_usd == pytest.approx(26298 / 8766)


def test_a_type_without_specs_an_empty_window_and_a_price_for_an_owned_type_are_refused():
    specs = pl.DataFrame({"hardware_type": ["big"], "hourly_cost_usd": [4.0]})
    with pytest.raises(PlanInputError, match="hardware_type='tiny' is not in the spec table"):
        planning.planned_specs(specs, [Purchase("tiny", (8,))])
    with pytest.raises(PlanInputError, match=r"window 2026-03-02\.\.2026-03-03"):
        planning.window_launches(
            _launches(3).drop("work_samples", "arrival_s"),
            DAY + dt.timedelta(days=1),
            DAY + dt.timedelta(days=2),
        )
    with pytest.raises(PlanInputError, match="count=0"):
        Purchase("big", (0,))


def test_a_new_type_row_without_a_usable_price_or_host_size_is_refused():
    rows = pl.DataFrame(
        {
            "hardware_type": ["X1", "X2"],
            "hourly_cost_usd": [2.0, 3.0],
            "devices_per_host": [8.0, 0.0],
        }
    )
    with pytest.raises(PlanInputError, match=r"new type .X2.: devices_per_host=0\.0"):
        planning.new_type_rows(rows, ["hardware_type"])
    priced_at_infinity = rows.with_columns(hourly_cost_usd=pl.lit(float("inf")))
    with pytest.raises(PlanInputError, match="new type 'X1': hourly_cost_usd=inf"):
        planning.new_type_rows(priced_at_infinity, ["hardware_type"])
    twice = pl.concat([rows.head(1), rows.head(1)])
    with pytest.raises(PlanInputError, match="hardware_type='X1' is given twice"):
        planning.new_type_rows(twice, ["hardware_type"])


def test_a_fleet_without_devices_is_refused():
    launches = _launches(3)
    predictions = _predictions(launches, {"big": 1000.0, "small": 500.0})
    with pytest.raises(PlanInputError, match="the fleet as it is has no device"):
        planning.plan_purchases(launches, predictions, {}, [Purchase("small", (8,))])


def test_leap_plan_names_the_field_of_a_bad_flag(capsys):
    for argv, named in (
        (["plan", "--buy", "L4:0"], "count=0"),
        (["plan", "--buy", "L4:8:abc"], "price='abc'"),
        (["plan"], "--buy: name at least one purchase"),
        (["plan", "--buy", "L4:8", "--days", "0"], "--days 0"),
        (["plan", "--buy", "L4:8", "--days", "9999999"], "--days 9999999"),
        (["plan", "--buy", "L4:8", "--capacity", "L4=-3"], "--capacity 'L4=-3'"),
        (["plan", "--buy", "L4:99999999999"], "more than 10,000,000 devices"),
        (["plan", "--buy", "L4:8", "--end", "0001-01-02"], "--end '0001-01-02' is before"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2
        assert named in capsys.readouterr().err


def _leap_plan(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "leap_pipeline.app.cli", "plan", *args]
    return subprocess.run(command, capture_output=True, text=True)


def test_leap_plan_on_the_small_demo_prints_its_table_and_writes_the_picture(
    small_demo, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "plan"
    data = str(small_demo.data)
    done = _leap_plan(
        "--data", data, "--days", "3", "--buy", "L4:8,64", "--buy", "H100-SXM:16", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| L4 | 64 |" in done.stdout and "| H100-SXM | 16 |" in done.stdout
    assert "highest_fp16_peak_per_dollar" in done.stdout
    assert (out / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "plan.md").read_text() == done.stdout.rstrip("\n") + "\n"
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    for args, named in (  # in this process: each loads the model, then refuses
        (["--buy", "NoSuchGPU:8"], "hardware_type='NoSuchGPU' is not in the spec table"),
        (["--buy", "L4:8", "--capacity", "H100=0"], "capacity: hardware_type='H100' is not"),
        (["--buy", "L4:8", "--end", "2099-01-01"], "end=2099-01-01: after the last day landed"),
        (["--buy", "X:8:1.0", "--new-type", str(empty)], f"--new-type '{empty}': unreadable"),
    ):
        # as a fresh process finds it: MLflow's restore after a load exports the URI it had
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        with pytest.raises(SystemExit) as exited:
            cli.main(["plan", "--data", data, *args])
        assert exited.value.code == 2
        assert named in capsys.readouterr().err, args


def test_the_purchase_plan_asset_shows_the_table_and_the_picture(small_demo, monkeypatch):
    import dagster as dg
    import mlflow

    from leap_pipeline.orchestration.dagster_private import without_definitions_state
    from leap_pipeline.orchestration.plan_asset import purchase_plan
    from leap_pipeline.orchestration.resources import MlflowResource

    monkeypatch.setenv("LEAP_DATA", str(small_demo.data))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    resources = {"mlflow_tracking": MlflowResource()}

    def materialize(config: dict) -> dg.ExecuteInProcessResult:
        run = {"ops": {"purchase_plan": {"config": config}}}
        return without_definitions_state(
            lambda: dg.materialize(
                [purchase_plan], run_config=run, resources=resources, raise_on_error=False
            )
        )

    uris = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    try:
        done = materialize({"buy": ["L4:8,64"], "days": 2})
        refused = materialize({"buy": ["L4:8"], "end": "2026-13-01"})
    finally:  # the asset points MLflow at the folder's store, as the nights do
        mlflow.set_tracking_uri(uris[0])
        mlflow.set_registry_uri(uris[1])
    assert done.success
    (event,) = done.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert "| L4 | 64 |" in metadata["plan"].value
    assert "data:image/png;base64," in metadata["saving_against_count"].value
    assert metadata["leap_order"].value == "L4"
    written = small_demo.data / "plans" / metadata["window"].value.split("..")[1] / "plan.md"
    assert written.read_text() == metadata["plan"].value
    assert not refused.success
    failure = refused.get_step_failure_events()[0].step_failure_data.error
    assert "end '2026-13-01' is not a date" in failure.message


def test_the_saving_interval_holds_the_saving_however_wide_the_errors():
    """Each draw's cost has a mean above the point (a lognormal error), and summed over many
    families the draws settle there: the interval is set on the saving, not on that mean."""
    n = 400
    launches = _launches(n).with_columns(model_type=pl.format("family{}", pl.int_range(n)))
    options = _predictions(launches, {"big": 1000.0, "small": 500.0}).options.with_columns(
        throughput_high=pl.col("throughput") * 2.0  # a log spread of about 0.54
    )
    priced = planning.priced(options, launches, "throughput")
    before = priced.filter(pl.col("hardware_type") == "big")
    after = priced.filter(pl.col("hardware_type") == "small")
    point = before["cost_usd"].sum() - after["cost_usd"].sum()
    low, high = planning.saving_interval(before, after, priced, launches)
    assert low < point < high


def test_a_purchases_saving_is_the_same_whatever_else_is_priced_beside_it(small_demo, monkeypatch):
    """Other purchases, of a type the fleet has or of a new one, change neither the fleet as it
    is nor another purchase's saving."""
    from leap_pipeline.app.plan import plan_folder

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    alone = plan_folder(small_demo.data, [Purchase("L4", (8, 64))], days=3)
    # a new type: an L4 twice as fast on paper, at 0.9 USD a device-hour
    new = alone.specs.filter(pl.col("hardware_type") == "L4").with_columns(
        hardware_type=pl.lit("L4x2"), peak_bf16_tflops=pl.col("peak_bf16_tflops") * 2
    )
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    beside = plan_folder(
        small_demo.data,
        [Purchase("H100-SXM", (16,)), Purchase("L4", (8, 64)), Purchase("L4x2", (8,), 0.9)],
        days=3,
        new_types=new,
    )
    assert beside.result.baseline == alone.result.baseline
    kept = beside.result.table.filter(pl.col("hardware_type") == "L4")
    assert kept.equals(alone.result.table)
    assert (
        beside.result.table.filter(pl.col("hardware_type") == "L4x2")["hourly_cost_usd"][0] == 0.9
    )
