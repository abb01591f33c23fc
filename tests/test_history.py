import datetime as dt

import polars as pl
import pytest

from leap_pipeline.data.feature_table import build_feature_table
from leap_serving.launch.contract import HARDWARE_SPEC_COLUMNS
from leap_serving.launch.families import normalize_job_name
from leap_serving.launch.features import FEATURE_COLUMNS, launch_features
from leap_serving.launch.history import HISTORY_FEATURES, HistoryIndex, history_features
from leap_serving.launch.snapshot import history_snapshot


@pytest.mark.parametrize(
    ("raw", "family"),
    [
        ("ads_ctr_dlrm_v3.exp_lr_kamo_20260105_462863451_attempt1", "ads_ctr_dlrm_v3.exp_lr_kamo"),
        ("ads_ctr_dlrm_v3.exp_lr_kamo_20260217_1200345_attempt3", "ads_ctr_dlrm_v3.exp_lr_kamo"),
        ("feed_seq_v2.prod_li-2026-03-01-run88123-a2", "feed_seq_v2.prod_li"),
        (
            "f424005591.stories_share_v5.explore_ri.20260105T165935.retry0",
            "stories_share_v5.explore_ri",
        ),
        ("mmoe_v5.sweep_neli/345009281/40c75da9/1", "mmoe_v5.sweep_neli"),
        ("Feed-Ranker_v2-2026-03-01-run88-a3", "feed-ranker_v2"),
    ],
)
def test_normalizer_strips_run_specific_identifiers(raw, family):
    assert normalize_job_name(raw) == family


def test_normalizer_recovers_simulated_families(small_fleet):
    attempts = small_fleet.day(5).attempts
    truth = small_fleet.oracle().families(5)
    normalized = attempts.select("attempt_id", "job_name").join(truth, on="attempt_id")
    predicted = normalized["job_name"].map_elements(normalize_job_name, return_dtype=pl.String)
    assert (predicted == normalized["family"].str.to_lowercase()).mean() == 1.0


D1, D2, D3, D4 = (dt.date(2026, 1, d) for d in (1, 2, 3, 4))
# the two specs the transfer features scale by (the rest unknown); W has no bandwidth on record
SPECS = pl.DataFrame({
    "hardware_type": ["X", "Y", "Z", "W"],
    "vendor": ["v", "v", "v", "v"],
    "peak_bf16_tflops": [100.0, 400.0, 50.0, 200.0],
    "memory_bandwidth_gbps": [1000.0, 1000.0, 2000.0, None],
})  # fmt: skip
SPECS = SPECS.with_columns(
    pl.lit(None, dtype=pl.Float64).alias(c) for c in HARDWARE_SPEC_COLUMNS if c not in SPECS.columns
)


def _rows() -> pl.DataFrame:
    """A hand-made fleet: family a runs on days 1, 1, 2 and 4 (types X, Y, X, then Y and Z); family
    b on day 2; c fails."""
    rows = [
        ("1", "a_20260101_11111_attempt1", "m", D1, 1, 100.0, "X"),
        ("2", "a_20260101_22222_attempt1", "m", D1, 2, 400.0, "Y"),
        ("3", "a_20260102_33333_attempt1", "m", D2, 1, 200.0, "X"),
        ("4", "b-2026-01-02-run44444-a1", "m", D2, 5, 50.0, "X"),
        ("5", "c_20260102_55555_attempt1", "m", D2, 6, None, "X"),
        ("6", "a_20260104_66666_attempt1", "m", D4, 1, 300.0, "Y"),
        ("7", "new_20260104_77777_attempt1", "m", D4, 2, 10.0, "X"),
        ("8", "b-2026-01-02-run88888-a1", "m", D2, 9, 80.0, "X"),
        ("9", "a_20260104_99999_attempt1", "m", D4, 3, 250.0, "Z"),
    ]
    return pl.DataFrame(
        [
            {
                "attempt_id": i,
                "job_name": name,
                "model_type": mt,
                "ds": ds,
                "launch_ts": dt.datetime.combine(ds, dt.time(hour)),
                "throughput": q,
                "hardware_type": hw,
            }
            for i, name, mt, ds, hour, q, hw in rows
        ],
        schema_overrides={"throughput": pl.Float64},
    )


def _feature_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Every row's feature-table row as the daily pipeline builds it, in ``rows``' order: the
    history_snapshot asset stores ``history_snapshot(attempts, as_of=D)`` per day, and the
    feature_table asset gives day D's attempts ``build_feature_table(..., snapshot of D - 1)``.
    The snapshot is handed every row, day D's and later ones included: only ``as_of`` keeps
    them out of day D's history."""
    # the identifying columns the table carries, unknown here (the snapshot is given the rows as
    # they are: without trainers and batch size, no lookup-key levels)
    unknown = {"num_trainers": pl.Int64, "batch_size": pl.Int64, "duration_s": pl.Float64}
    attempts = rows.with_columns(
        pl.lit(None, dtype=dtype).alias(name)
        for name, dtype in unknown.items()
        if name not in rows.columns
    )
    no_allocations = pl.DataFrame(
        schema={"attempt_id": pl.String, "num_hosts": pl.Int64, "devices_per_host": pl.Int64}
    )
    tables = [
        build_feature_table(
            attempts.filter(pl.col("ds") == day),
            no_allocations,
            SPECS,
            history_snapshot(rows, as_of=day - dt.timedelta(days=1)),
        )
        for day in rows["ds"].unique().sort()
    ]
    table = pl.concat(tables)
    return rows.select("attempt_id").join(table, on="attempt_id", maintain_order="left")


def _history_by_attempt(rows: pl.DataFrame) -> dict[str, dict]:
    history = _feature_table(rows).select("attempt_id", *HISTORY_FEATURES)
    return {r["attempt_id"]: r for r in history.iter_rows(named=True)}


def test_every_history_value_is_what_serving_saw_the_day_before():
    import math

    got = _history_by_attempt(_rows())
    ln = math.log
    # day 1: nobody has history; with no earlier day there is no fallback level either
    for i in ("1", "2"):
        assert got[i]["hist_cold_start"] == 1.0 and got[i]["hist_count"] == 0.0
        assert got[i]["hist_prev_log_q"] is None
    # day 2, family a: two runs on day 1 (the later one, at 02:00, is the previous)
    a2 = got["3"]
    assert a2["hist_count"] == 2.0 and a2["hist_cold_start"] == 0.0
    assert a2["hist_prev_log_q"] == pytest.approx(ln(400))
    assert a2["hist_mean_log_q"] == pytest.approx((ln(100) + ln(400)) / 2)
    assert a2["hist_std_log_q"] == pytest.approx((ln(400) - ln(100)) / 2)
    assert a2["hist_days_since_last"] == 1.0
    # ... and on its own type X, one run
    assert a2["hist_hw_count"] == 1.0 and a2["hist_hw_mean_log_q"] == pytest.approx(ln(100))
    # day 2, family b: cold, imputed with the model type's mean level, not zero
    assert got["4"]["hist_cold_start"] == 1.0
    assert got["4"]["hist_mean_log_q"] == pytest.approx((ln(100) + ln(400)) / 2)
    assert got["8"]["hist_count"] == 0.0  # same-day runs never see each other
    # day 4, family a: three earlier runs, last seen on day 2 (day 3 had no rows at all)
    a4 = got["6"]
    assert a4["hist_count"] == 3.0 and a4["hist_days_since_last"] == 2.0
    assert a4["hist_prev_log_q"] == pytest.approx(ln(200))
    assert a4["hist_hw_count"] == 1.0 and a4["hist_hw_prev_log_q"] == pytest.approx(ln(400))
    # on a type the family never used, the per-type level falls back to the family's
    az = got["9"]
    assert az["hist_hw_count"] == 0.0 and az["hist_hw_prev_log_q"] == pytest.approx(ln(200))
    assert az["hist_hw_mean_log_q"] == az["hist_mean_log_q"]
    # day 4, a new family: cold start
    assert got["7"]["hist_cold_start"] == 1.0 and got["7"]["hist_days_since_last"] is None


def test_levels_on_other_types_are_carried_to_the_target_type():
    import math

    ln = math.log
    rows = _rows()
    got = _history_by_attempt(rows)
    # day 2, family a on X: as of day 1 it ran on X (100) and Y (400); only Y is another type
    a2 = got["3"]
    assert a2["hist_xfer_types"] == 1.0
    assert a2["hist_xfer_fleet_log_q"] == pytest.approx(ln(100))  # fleet ratio Y->X: 100/400
    assert a2["hist_xfer_compute_log_q"] == pytest.approx(ln(400) + ln(100 / 400))
    assert a2["hist_xfer_bandwidth_log_q"] == pytest.approx(ln(400))  # same bandwidth
    # day 4, family a on Z: X (mean of 100 and 200) and Y (400) carried; nobody ran Z before,
    # so there is no fleet ratio to it
    a4 = got["9"]
    x_level = (ln(100) + ln(200)) / 2
    assert a4["hist_xfer_types"] == 2.0 and a4["hist_xfer_fleet_log_q"] is None
    assert a4["hist_xfer_compute_log_q"] == pytest.approx(
        ((x_level + ln(50 / 100)) + (ln(400) + ln(50 / 400))) / 2
    )
    assert a4["hist_xfer_bandwidth_log_q"] == pytest.approx(
        ((x_level + ln(2)) + (ln(400) + ln(2))) / 2
    )
    # a cold family carries nothing
    assert got["4"]["hist_xfer_types"] == 0.0 and got["4"]["hist_xfer_compute_log_q"] is None
    # a target without a bandwidth on record gets no bandwidth transfer, but a compute one
    on_w = history_features(
        rows.filter(pl.col("attempt_id") == "9").with_columns(hardware_type=pl.lit("W")),
        history_snapshot(rows, D3),
        SPECS,
    ).row(0, named=True)
    assert on_w["hist_xfer_bandwidth_log_q"] is None
    assert on_w["hist_xfer_types"] == 2.0 and on_w["hist_xfer_compute_log_q"] is not None


def test_training_history_equals_serving_from_the_snapshot():
    """Day 4's feature-table rows (what the model trains on) are what the ranker computes for
    the same launches from the snapshot a model ships (as of day 3, through its index)."""
    rows = _rows()
    trained = _feature_table(rows).filter(pl.col("ds") == D4)
    launches = rows.filter(pl.col("ds") == D4).drop("throughput")  # a launch has no label
    index = HistoryIndex.from_snapshot(history_snapshot(rows, D3))
    served = launch_features(launches, SPECS, index)
    assert served.columns == list(FEATURE_COLUMNS)
    assert served.equals(trained.select(FEATURE_COLUMNS))
    history = served.select(HISTORY_FEATURES)
    assert history.equals(history_features(launches, history_snapshot(rows, D3), SPECS))
    # and it is history: family a's three earlier runs, not day 4's own
    assert history["hist_count"].to_list() == [3.0, 0.0, 3.0]


def test_snapshot_ignores_missing_throughput_and_caps_families():
    rows = _rows()
    snapshot = history_snapshot(rows, D4)
    assert "c" not in snapshot["family"].to_list()
    capped = history_snapshot(rows, D4, max_families=2)
    families = capped.filter(pl.col("hardware_type").is_null())["family"].to_list()
    assert families == ["a", "new"]  # the most recently seen
    assert set(capped["family"]) == {"a", "new"}  # per-type rows only for kept families
    per_type = capped.filter(pl.col("family") == "a", pl.col("hardware_type").is_not_null())
    assert per_type["hardware_type"].to_list() == ["X", "Y", "Z"]
    assert per_type["count"].to_list() == [2, 2, 1]


def test_a_snapshot_from_the_launch_day_is_refused():
    rows = _rows()
    with pytest.raises(ValueError, match="earlier days"):
        history_features(rows.filter(pl.col("ds") == D2), history_snapshot(rows, D2), SPECS)


def test_the_model_types_record_and_the_lookup_key_level_are_history_too():
    """Model type m's level on a type is the mean over its attempts there (families pooled,
    as of the day before); the lookup key's level needs two attempts behind it."""
    import math

    ln = math.log
    rows = _rows().with_columns(
        num_trainers=pl.lit(4, dtype=pl.Int64),
        batch_size=pl.when(pl.col("attempt_id") == "2").then(512).otherwise(256),
    )
    got = _history_by_attempt(rows)
    # day 2 on X: m ran once on X on day 1 (100); the key (m, 4, 256, X) has one attempt only
    assert got["4"]["hist_mt_hw_count"] == 1.0
    assert got["4"]["hist_mt_hw_mean_log_q"] == pytest.approx(ln(100))
    assert got["4"]["hist_key_count"] == 0.0 and got["4"]["hist_key_mean_log_q"] is None
    # ... and its level on Y (400) carried to X by the fleet ratio Y->X (100/400)
    assert got["4"]["hist_mt_xfer_fleet_log_q"] == pytest.approx(ln(100))
    # day 4 on X: as of day 2, X holds 100, 200, 50 and 80 for m (the failed run is no level)
    levels = [ln(100), ln(200), ln(50), ln(80)]
    assert got["7"]["hist_mt_hw_count"] == 4.0
    assert got["7"]["hist_mt_hw_mean_log_q"] == pytest.approx(sum(levels) / 4)
    # the key (m, 4, 256, X) now has all four behind it; (m, 4, 256, Z) nothing
    assert got["7"]["hist_key_count"] == 4.0
    assert got["7"]["hist_key_mean_log_q"] == pytest.approx(sum(levels) / 4)
    assert got["9"]["hist_key_count"] == 0.0 and got["9"]["hist_mt_hw_count"] == 0.0
    # a model type never seen has no record
    other = history_features(
        rows.filter(pl.col("attempt_id") == "7").with_columns(model_type=pl.lit("unseen")),
        history_snapshot(rows, D3),
        SPECS,
    ).row(0, named=True)
    assert other["hist_mt_hw_count"] == 0.0 and other["hist_mt_hw_mean_log_q"] is None
    assert other["hist_mt_xfer_fleet_log_q"] is None
    # serving keeps each (model type, type) carried level once asked; names a caller makes up
    # are answered without growing what it keeps
    index = HistoryIndex.from_snapshot(history_snapshot(rows, D3))
    carried = index.model_type_carried("m", "X")
    assert math.isfinite(carried) and index.model_type_carried("m", "X") == carried
    for made_up in ("unseen", "also_unseen", "m2"):
        assert math.isnan(index.model_type_carried(made_up, "X"))
    assert list(index._carried) == [("m", "X")]
