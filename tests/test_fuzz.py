"""Fuzzing at scale: 10,000 generated launches against ``Ranker.rank`` and 2,000 broken rows
through ``leap import``. Nothing raises, every empty ranking says why, and every imported row is
kept, dropped with a count or quarantined with a reason."""

import datetime as dt
import math
import random

import polars as pl
import pytest

from leap_pipeline.app.cli import main
from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.night_store import save_trained
from leap_pipeline.modeling.selection import fit_models
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.simulation import SimulatedFleet
from leap_serving.decide.ranker import Ranker
from leap_serving.decide.results import REASON_CODES, Ranking

pytestmark = pytest.mark.long

LAUNCHES = 10_000
BAD_ROWS = 2_000
FIELDS = [
    "job_name", "model_type", "num_trainers", "batch_size", "requested_devices_per_host",
    "num_readers", "precision", "tensor_parallel", "pipeline_parallel", "embedding_sharding",
    "num_sparse_features", "num_dense_features", "hash_size", "seq_len", "training_days",
    "optimizer", "activation_checkpointing", "package_version", "model_definition", "ds",
]  # fmt: skip


class Weird:
    def __repr__(self) -> str:
        raise RuntimeError("repr fails")


def _value(rng: random.Random):
    return rng.choice([
        None, True, False, 0, -1, 1, 7, 2**63, -(2**63), 10**30, -(10**30), 1.5, -0.0,
        float("nan"), float("inf"), -float("inf"), 1e308, "", " ", "12", "-3", "1e3", "fp16",
        "ünïcødé ✓", "\x00", "a" * 10_000, "2026-02-30", "2027-01-01", "null", [], [1, "x"],
        {"a": 1}, {1: 2}, b"bytes", (1, 2), Weird(), dt.date(2030, 1, 1), object(),
        '[{"layer": "dense", "units": 1e99}]', "[", "{}",
    ])  # fmt: skip


def _candidates(rng: random.Random, known: list[str]):
    kind = rng.randrange(8)
    if kind == 0:
        return _value(rng)
    if kind == 1:
        return []
    if kind == 2:
        return [rng.choice(known)] * rng.randint(2, 5)  # duplicates
    if kind == 3:
        return [*rng.sample(known, 2), "TPU-v9", "ünknown"]
    if kind == 4:
        return [rng.choice(known), _value(rng)]
    if kind == 5:
        return iter(rng.sample(known, 3))  # any iterable
    return rng.sample(known, rng.randint(1, len(known)))


@pytest.fixture(scope="module")
def ranker(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    first, night = dt.date(2026, 1, 1), dt.date(2026, 1, 9)
    materialize_days(first, night, source="simulator:seed=4,scale=0.01",
                     warehouse=str(root / "leap.duckdb"), log_level="WARNING")  # fmt: skip
    with open_warehouse(root / "leap.duckdb", read_only=True) as wh:
        window = wh.read("feature_table", first, night - dt.timedelta(days=1))
        models = fit_models(window, night, profile="quick")
        snapshot = wh.read("history_snapshot", night, night).drop("ds")
        specs = wh.read("hardware_specs", night, night).drop("ds")
        jobs = wh.read("job_attempts", night, night).drop("family", "candidate_hardware")
    save_trained(models, root / "night", snapshot, specs, "quick")
    ranker = Ranker(str(root / "night" / "cascade"), check_interval_s=float("inf"), wait=True)
    return ranker, jobs.with_columns(ds=pl.lit("2026-01-10")).to_dicts()


def test_ten_thousand_generated_launches_never_raise(ranker):
    ranker, real_jobs = ranker
    known = sorted(ranker._loaded.specs)
    rng = random.Random(20261130)
    before = ranker.stats()
    codes = set()
    for i in range(LAUNCHES):
        job = dict(rng.choice(real_jobs))
        for _ in range(rng.randint(0, 4)):
            action = rng.random()
            field = rng.choice([*FIELDS, "extra", "ünïcødé", 3, None])
            if action < 0.25:
                job.pop(field, None)
            else:
                job[field] = _value(rng)
        if i % 50 == 0:
            job = _value(rng)  # not a mapping at all
        result = ranker.rank(job, _candidates(rng, known))
        assert isinstance(result, Ranking)
        assert bool(result.ranking) == (result.reason is None)
        if result.ranking:
            for c in result.ranking:
                assert math.isfinite(c.predicted_throughput) and c.throughput_per_cost > 0
        else:
            assert result.reason and result.reason_code in REASON_CODES
            codes.add(result.reason_code)
    stats = ranker.stats()
    answers = stats["answers"] - before["answers"]
    ranked = stats["ranked"] - before["ranked"]
    empty = {c: n - before["empty"].get(c, 0) for c, n in stats["empty"].items()}
    assert answers == LAUNCHES and ranked + sum(empty.values()) == LAUNCHES
    assert empty.get("internal_error", 0) == 0, "a generated launch hit a bug"
    assert ranked > LAUNCHES // 10 and {"invalid_job", "invalid_candidates"} <= codes
    print(f"{LAUNCHES} launches: {ranked} ranked, empty by reason {empty}")


def _corrupt(rng: random.Random, row: dict, ids: list[str]) -> dict:
    choices = [
        ("num_trainers", rng.choice(["-3", "0", "many", "1e40", "", "NaN"])),
        ("batch_size", rng.choice(["-1", "2.5", "∞", "9" * 40])),
        ("hardware_type", rng.choice(["TPU-v9", "", "ünknown", "A100 "])),
        ("launch_ts", rng.choice(["yesterday", "2026-13-45T99:00:00", "", "0"])),
        ("throughput", rng.choice(["-5", "0", "", "fast", "nan", "1e400"])),
        ("status", rng.choice(["", "exploded", "SUCCEEDED "])),
        ("attempt_id", rng.choice(ids)),  # a duplicate
        ("attempt_id", ""),
        ("job_name", ""),
        ("precision", rng.choice(["fp8", "", "ünï"])),
        ("num_readers", rng.choice(["-2", "x"])),
        ("seq_len", "-1"),
        ("candidate_hardware", rng.choice(["", ";;", "A10G;;TPU"])),
        ("activation_checkpointing", rng.choice(["maybe", "2"])),
        ("model_definition", rng.choice(["[", "{}", "null"])),
        ("requested_devices_per_host", rng.choice(["0", "-8", "eight"])),
    ]
    for field, value in rng.sample(choices, rng.randint(1, 3)):
        row[field] = value
    return row


def test_two_thousand_broken_rows_are_each_accounted_for(tmp_path, capsys):
    fleet = SimulatedFleet(seed=6, scale=0.1)  # enough clean rows that no day is mostly broken
    days = [d for _, d in fleet.days(0, 3)]
    attempts = (
        pl.concat([d.attempts for d in days])
        .drop("ds")
        .with_columns(pl.col("candidate_hardware").list.join(";"))
        .cast(pl.String)
    )
    rng = random.Random(7)
    rows = attempts.to_dicts()
    ids = [r["attempt_id"] for r in rows]
    broken = []
    for i in range(BAD_ROWS):
        row = _corrupt(rng, dict(rng.choice(rows)), ids)
        if row["attempt_id"]:
            row["attempt_id"] = row["attempt_id"] + f"-bad{i}" if rng.random() < 0.8 else row[
                "attempt_id"]  # fmt: skip
        broken.append(row)
    table = pl.DataFrame(rows + broken, schema=attempts.schema)
    table.write_csv(tmp_path / "attempts.csv")
    pl.concat([d.allocations for d in days]).write_parquet(tmp_path / "allocations.parquet")
    fleet.hardware_specs().write_csv(tmp_path / "hardware.csv")
    code = main(["import", "--attempts", str(tmp_path / "attempts.csv"),
                 "--allocations", str(tmp_path / "allocations.parquet"),
                 "--hardware", str(tmp_path / "hardware.csv"), "--days-from", "launch_ts",
                 "--data", str(tmp_path / "data")])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    with open_warehouse(tmp_path / "data" / "leap.duckdb", read_only=True) as wh:
        kept = wh.read("job_attempts", columns=["attempt_id"])
        quarantine = wh.read("quarantine", columns=["attempt_id", "reason"])
        # the rows the landing counted as dropped (valid, no positive throughput), day by day as
        # validation counted them: not the rows left over after the kept and quarantined ones
        dropped = int(wh.read("source_log", columns=["dropped"])["dropped"].sum())
    assert quarantine["reason"].null_count() == 0
    assert (quarantine["reason"].str.len_chars() > 0).all()
    read = table.height
    # a row without an id can only be quarantined
    no_id = table.filter(pl.col("attempt_id").fill_null("") == "").height
    assert quarantine.filter(pl.col("attempt_id").fill_null("") == "").height == no_id

    # per attempt id (ids repeat on purpose): the rows neither kept nor quarantined are missing,
    # and only a row without a positive throughput may be missing (dropped, with a count)
    def per_id(frame: pl.DataFrame, name: str) -> pl.DataFrame:
        return (
            frame.filter(pl.col("attempt_id").fill_null("") != "")
            .group_by("attempt_id")
            .agg(pl.len().alias(name))
        )

    unlabelled = (
        table.with_columns(
            no_label=pl.col("throughput").cast(pl.Float64, strict=False).fill_null(0.0) <= 0
        )
        .group_by("attempt_id")
        .agg(pl.col("no_label").sum())
    )
    ledger = (
        per_id(table, "read")
        .join(per_id(kept, "kept"), on="attempt_id", how="left")
        .join(per_id(quarantine, "quarantined"), on="attempt_id", how="left")
        .join(unlabelled, on="attempt_id", how="left")
        .fill_null(0)
        .with_columns(missing=pl.col("read") - pl.col("kept") - pl.col("quarantined"))
    )
    assert (ledger["missing"] >= 0).all(), "a row was landed twice"
    assert (ledger["missing"] <= ledger["no_label"]).all(), "a labelled row vanished"
    # every row read is kept, quarantined or counted as dropped: a row gone without a count fails
    assert dropped > 0 and kept.height + quarantine.height + dropped == read
    assert f"dropped (no throughput) {dropped:,}" in printed
    assert f"rows in {read:,}, kept {kept.height:,}" in printed
    assert f"quarantined {quarantine.height:,}" in printed
    assert quarantine.height >= BAD_ROWS * 0.8
    print(f"{read} rows: kept {kept.height}, dropped {dropped}, quarantined {quarantine.height}")
