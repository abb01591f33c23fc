"""The daily pipeline end to end on a small simulated fleet: warehouse, sources, assets, checks."""

import datetime as dt
import json
import subprocess
import sys
import time

import numpy as np
import polars as pl
import pytest

from leap_pipeline.data.feature_table import FEATURE_TABLE_COLUMNS, land_day
from leap_pipeline.data.sources import FileSource, SimulatorSource, source_from_uri
from leap_pipeline.data.warehouse import WarehouseError, open_warehouse
from leap_pipeline.orchestration.definitions import materialize_days
from leap_serving.launch.features import FEATURE_COLUMNS, expand_candidates, launch_features
from leap_serving.launch.validation import ContractError

SOURCE = "simulator:seed=3,scale=0.02"
FIRST = dt.date(2026, 1, 1)
LAST = dt.date(2026, 1, 6)


def _table_contents(path, table):
    with open_warehouse(path, read_only=True) as wh:
        rows = wh.read(table)
    return rows.sort(rows.columns[:2])


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    path = tmp_path_factory.mktemp("warehouse") / "leap.duckdb"
    materialize_days(FIRST, LAST, source=SOURCE, warehouse=str(path), log_level="WARNING")
    return path


# -- the warehouse -------------------------------------------------------------------------------


def test_replacing_a_partition_touches_only_that_day(tmp_path):
    path = tmp_path / "w.duckdb"
    day1, day2 = dt.date(2026, 1, 1), dt.date(2026, 1, 2)
    with open_warehouse(path) as wh:
        wh.replace_partition("feature_table", day1, pl.DataFrame({"x": [1.0, 2.0]}))
        wh.replace_partition("feature_table", day2, pl.DataFrame({"x": [3.0]}))
        wh.replace_partition("feature_table", day1, pl.DataFrame({"x": [9.0]}))
        assert wh.read("feature_table", day1, day1)["x"].to_list() == [9.0]
        assert wh.read("feature_table", day2, day2)["x"].to_list() == [3.0]


def test_a_read_gives_each_day_in_the_order_it_was_written(tmp_path):
    """A fit on a window's rows depends on their order (scikit-learn bins on a subsample past
    200,000 rows): a read must give a day's rows as written, not sorted by day alone, which
    DuckDB leaves in any order on a window this large. A backfilled day still reads in place."""
    days = [dt.date(2026, 1, d) for d in (1, 2, 3)]
    n = 150_000
    rng = np.random.default_rng(0)
    written = {day: rng.permutation(n).astype(np.int64) for day in days}
    with open_warehouse(tmp_path / "w.duckdb") as wh:
        for day in (days[1], days[2], days[0]):  # the first day written last, as a backfill
            wh.replace_partition("feature_table", day, pl.DataFrame({"x": written[day]}))
        for _ in range(3):
            got = wh.read("feature_table", days[0], days[-1])
            assert got["ds"].is_sorted()
            assert np.array_equal(got["x"].to_numpy(), np.concatenate([written[d] for d in days]))


def test_a_write_that_fails_half_way_leaves_the_old_rows(tmp_path):
    path = tmp_path / "w.duckdb"
    day = dt.date(2026, 1, 1)
    with open_warehouse(path) as wh:
        wh.replace_partitions(
            day,
            {"job_attempts": pl.DataFrame({"x": [1.0]}), "allocations": pl.DataFrame({"y": [1]})},
        )
        # the first table's delete and insert succeed, then the second insert fails
        with pytest.raises(Exception, match=r"(?i)conver|cast"):
            wh.replace_partitions(
                day,
                {
                    "job_attempts": pl.DataFrame({"x": [5.0, 6.0]}),
                    "allocations": pl.DataFrame({"y": ["not a number"]}),
                },
            )
        assert wh.read("job_attempts", day, day)["x"].to_list() == [1.0]
        assert wh.read("allocations", day, day)["y"].to_list() == [1]


def test_warehouse_refuses_unknown_tables_and_changed_columns(tmp_path):
    with open_warehouse(tmp_path / "w.duckdb") as wh:
        with pytest.raises(WarehouseError, match="table='x; DROP"):
            wh.read("x; DROP TABLE job_attempts")
        wh.replace_partition("quarantine", FIRST, pl.DataFrame({"a": [1]}))
        with pytest.raises(WarehouseError, match=r"new columns \['b'\], dropped \['a'\]"):
            wh.replace_partition("quarantine", FIRST, pl.DataFrame({"b": [1]}))


def test_only_a_warehouse_with_other_feature_columns_is_discarded(tmp_path):
    from leap_pipeline.data.feature_table import FEATURE_TABLE_COLUMNS, discard_stale_warehouse

    current = {c: [FIRST] if c == "ds" else [1.0] for c in FEATURE_TABLE_COLUMNS}
    for name, columns, stale in (("old", {"attempt_id": ["a"]}, True), ("new", current, False)):
        path = tmp_path / f"{name}.duckdb"
        with open_warehouse(path) as wh:
            wh.replace_partition("feature_table", FIRST, pl.DataFrame(columns))
        assert discard_stale_warehouse(path) is stale
        assert path.exists() is not stale
    assert discard_stale_warehouse(tmp_path / "absent.duckdb") is False


def _hold(warehouse, seconds: float) -> subprocess.Popen:
    code = (
        "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); print('open', flush=True); "
        f"time.sleep({seconds}); con.close()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(warehouse)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "open"
    return holder


def test_a_locked_warehouse_is_waited_for_then_an_error_naming_the_holder(warehouse, caplog):
    holder = _hold(warehouse, 30)
    try:
        held = pytest.raises(WarehouseError, match=f"process {holder.pid} holds it")
        with open_warehouse(warehouse, wait_s=2.0) as wh, held as failed:
            wh.count("feature_table", FIRST)
        assert "did not let go within 2 s" in str(failed.value)
        assert str(warehouse) in str(failed.value)
        assert "is held by another process; waiting up to 2 s" in caplog.text
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("holds", ["write", "read"])
def test_a_warehouse_a_leap_process_holds_is_waited_for_then_an_error_naming_it(warehouse, holds):
    """Held by LEAP itself (to write, or to read while this one writes), the warehouse's lock
    file is what a second process waits on; at the deadline the error names the holder."""
    code = (
        "import sys, time; from leap_pipeline.data.warehouse import open_warehouse\n"
        f"with open_warehouse(sys.argv[1]) as wh, wh.session(write={holds == 'write'}):\n"
        "    print('open', flush=True); time.sleep(30)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(warehouse)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        held = pytest.raises(WarehouseError, match=f"process {holder.pid} holds it")
        with open_warehouse(warehouse, wait_s=1.0) as wh, held as failed:
            wh.replace_partition("job_attempts", FIRST, pl.DataFrame({"x": [1]}))
        assert "did not let go within 1 s" in str(failed.value)
        assert (warehouse.parent / f"{warehouse.name}.lock").stat().st_mode & 0o077 == 0
    finally:
        holder.kill()
        holder.wait()


def test_no_process_opens_the_warehouse_while_another_holds_its_lock_file(warehouse):
    """DuckDB reads a file's headers before it takes its own lock: a process that read them
    during another's checkpoint lost that one's last write. The lock file is taken before
    DuckDB opens anything, so a holder of the lock file alone (here one that has not opened
    DuckDB at all) keeps a reader and a writer out."""
    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1] + '.lock', os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(warehouse)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        for read_only in (True, False):
            held = pytest.raises(WarehouseError, match="did not let go within 1 s")
            with open_warehouse(warehouse, read_only=read_only, wait_s=1.0) as wh, held:
                wh.count("feature_table", FIRST)
    finally:
        holder.kill()
        holder.wait()
    with open_warehouse(warehouse, read_only=True, wait_s=1.0) as wh:  # let go: it opens
        assert wh.has("feature_table")


def test_a_warehouse_released_while_waiting_opens(warehouse):
    holder = _hold(warehouse, 1.5)
    try:
        with open_warehouse(warehouse, read_only=True, wait_s=60) as wh:
            assert wh.has("feature_table")
    finally:
        holder.wait()


def test_discarding_a_stale_warehouse_removes_its_log(tmp_path):
    from leap_pipeline.data.warehouse import remove_warehouse

    path = tmp_path / "w.duckdb"
    path.write_bytes(b"x")
    (tmp_path / "w.duckdb.wal").write_bytes(b"y")
    remove_warehouse(path)
    assert list(tmp_path.iterdir()) == []


# -- sources -------------------------------------------------------------------------------------


def test_source_uris_select_the_adapter(tmp_path, monkeypatch):
    assert source_from_uri("simulator:seed=2,scale=0.1") == SimulatorSource(seed=2, scale=0.1)
    assert source_from_uri(f"files:{tmp_path}") == FileSource(tmp_path)
    monkeypatch.setenv("LEAP_SOURCE", "simulator:seed=4")
    assert source_from_uri("") == SimulatorSource(seed=4, scale=0.05)
    with pytest.raises(ValueError, match="unknown setting"):
        source_from_uri("simulator:sed=1")
    with pytest.raises(ValueError, match="scale"):
        source_from_uri("simulator:scale=-1")


def _write_day(root, day_data, day, layout, fmt):
    def write(frame, source):
        if fmt == "csv":
            frame = frame.with_columns(
                pl.col(pl.List(pl.String)).list.join(";"),
            )
        if layout == "hive":
            folder = root / source / f"ds={day.isoformat()}"
            folder.mkdir(parents=True)
            target = folder / f"part-0.{fmt}"
        else:
            (root / source).mkdir(parents=True, exist_ok=True)
            target = root / source / f"{day.isoformat()}.{fmt}"
        frame.write_csv(target) if fmt == "csv" else frame.write_parquet(target)

    write(day_data.attempts, "job_attempts")
    write(day_data.allocations, "allocations")
    day_data.hardware_specs.write_parquet(root / "hardware_specs.parquet")


def test_a_source_tells_its_first_day_and_only_the_simulator_has_an_oracle(tmp_path):
    day = dt.date(2026, 1, 3)
    simulator = SimulatorSource(seed=3, scale=0.02)
    simulated = simulator.read_day(day)
    assert simulator.first_day() == dt.date(2026, 1, 1)
    ids = simulated.attempts["attempt_id"].to_list()[:5]
    assert simulator.oracle().true_medians(ids)["attempt_id"].to_list() == ids
    files = FileSource(tmp_path)
    assert files.first_day() is None and files.oracle() is None
    assert not files.has_day(day)
    _write_day(tmp_path, simulated, day, "daily", "csv")
    assert files.first_day() == day
    # a day has arrived when its attempts and allocations are there
    assert files.has_day(day) and not files.has_day(day + dt.timedelta(days=1))
    assert simulator.has_day(day) and not simulator.has_day(dt.date(2025, 12, 31))


@pytest.mark.parametrize(("layout", "fmt"), [("hive", "parquet"), ("daily", "csv")])
def test_a_folder_of_files_lands_like_the_simulator(tmp_path, layout, fmt):
    day = dt.date(2026, 1, 3)
    simulated = SimulatorSource(seed=3, scale=0.02).read_day(day)
    _write_day(tmp_path, simulated, day, layout, fmt)
    from_files = land_day(FileSource(tmp_path).read_day(day), day)
    from_simulator = land_day(simulated, day)
    assert from_files.counts == from_simulator.counts
    assert from_files.quarantine.height == 0
    assert from_files.attempts.equals(from_simulator.attempts)


def test_bad_rows_in_a_csv_are_quarantined_with_their_reason(tmp_path):
    day = dt.date(2026, 1, 3)
    simulated = SimulatorSource(seed=3, scale=0.02).read_day(day)
    attempts = simulated.attempts.head(8).with_columns(pl.col(pl.Int64).cast(pl.String))
    ids = attempts["attempt_id"].to_list()
    broken = attempts.with_columns(
        num_trainers=pl.when(pl.col("attempt_id") == ids[0]).then(pl.lit("four"))
        .otherwise(pl.col("num_trainers")),
        batch_size=pl.when(pl.col("attempt_id") == ids[1]).then(pl.lit("-512"))
        .otherwise(pl.col("batch_size")),
        hardware_type=pl.when(pl.col("attempt_id") == ids[2]).then(pl.lit("TPU-v9"))
        .otherwise(pl.col("hardware_type")),
        throughput=pl.when(pl.col("attempt_id") == ids[4]).then(None)
        .otherwise(pl.col("throughput")),
    )  # fmt: skip
    broken = pl.concat([broken, broken.filter(pl.col("attempt_id") == ids[3])])
    _write_day(tmp_path, type(simulated)(broken, simulated.allocations, simulated.hardware_specs),
               day, "daily", "csv")  # fmt: skip
    landed = land_day(FileSource(tmp_path).read_day(day), day)
    reasons = dict(zip(landed.quarantine["attempt_id"], landed.quarantine["reason"], strict=True))
    assert reasons[ids[0]] == "num_trainers: not a valid Int64"
    assert reasons[ids[1]] == "batch_size: -512 is not positive"
    assert reasons[ids[2]] == "hardware_type: TPU-v9 is not in the spec table"
    assert reasons[ids[3]] == f"attempt_id: {ids[3]} appears more than once"
    assert (
        json.loads(landed.quarantine.filter(pl.col("attempt_id") == ids[0])["record"][0])[
            "num_trainers"
        ]
        == "four"
    )
    unlabelled = simulated.attempts.head(8)["throughput"].is_null().sum()
    assert landed.counts["dropped"] >= 1 + unlabelled - (ids[4] in reasons)
    assert sum(landed.counts[k] for k in ("kept", "dropped", "quarantined")) == broken.height


def test_a_missing_day_file_is_an_error_naming_the_place(tmp_path):
    with pytest.raises(ContractError, match="no job_attempts file for 2026-01-03"):
        FileSource(tmp_path).read_day(dt.date(2026, 1, 3))


# -- the assets ----------------------------------------------------------------------------------


def test_the_pipeline_builds_every_table_for_every_day(warehouse):
    with open_warehouse(warehouse, read_only=True) as wh:
        days = [FIRST + dt.timedelta(days=i) for i in range((LAST - FIRST).days + 1)]
        for table in ("job_attempts", "allocations", "hardware_specs", "feature_table"):
            assert wh.partitions(table) == days, table
        assert wh.partitions("history_snapshot") == days
        for day in days:
            assert wh.count("feature_table", day) == wh.count("job_attempts", day) > 0


def test_feature_table_columns_are_exactly_the_declared_list(warehouse):
    with open_warehouse(warehouse, read_only=True) as wh:
        assert wh.columns("feature_table") == list(FEATURE_TABLE_COLUMNS)


def test_rematerializing_leaves_identical_contents(warehouse, tmp_path):
    before = {t: _table_contents(warehouse, t) for t in ("feature_table", "history_snapshot")}
    materialize_days(
        FIRST + dt.timedelta(days=2), LAST, source=SOURCE, warehouse=str(warehouse),
        log_level="WARNING",
    )  # fmt: skip
    for table, rows in before.items():
        assert _table_contents(warehouse, table).equals(rows), table


def test_features_come_from_the_observable_tables_alone(warehouse):
    """Recompute a day's features in a process where the simulator cannot even be imported."""
    script = f"""
import sys, datetime as dt
class Forbid:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("leap_pipeline"):
            raise ImportError("no pipeline or simulator in reach: " + name)
sys.meta_path.insert(0, Forbid())
import duckdb, polars as pl
from leap_serving.launch.features import FEATURE_COLUMNS, launch_features
day, before = dt.date(2026, 1, 5), dt.date(2026, 1, 4)
con = duckdb.connect({str(warehouse)!r}, read_only=True)
read = lambda q: con.sql(q, params=[day if "hist" not in q else before]).pl()
attempts = read("SELECT * FROM job_attempts WHERE ds = ? ORDER BY attempt_id")
specs = read("SELECT * FROM hardware_specs WHERE ds = ?").drop("ds")
snapshot = read("SELECT * FROM history_snapshot WHERE ds = ?").drop("ds")
stored = read("SELECT * FROM feature_table WHERE ds = ? ORDER BY attempt_id")
assert stored["attempt_id"].equals(attempts["attempt_id"])
recomputed = launch_features(attempts, specs, snapshot)
assert recomputed.equals(stored.select(FEATURE_COLUMNS)), "features differ"
assert not any(m.startswith("leap_pipeline") for m in sys.modules)
print("ok", recomputed.height)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok ")


def test_training_and_serving_extract_byte_identical_rows(warehouse):
    day, before = dt.date(2026, 1, 6), dt.date(2026, 1, 5)
    with open_warehouse(warehouse, read_only=True) as wh:
        attempts = wh.read("job_attempts", day, day).sort("attempt_id")
        stored = wh.read("feature_table", day, day).sort("attempt_id")
        specs = wh.read("hardware_specs", day, day).drop("ds")
        snapshot = wh.read("history_snapshot", before, before).drop("ds")
    known = stored.filter(pl.col("hist_cold_start") == 0.0)
    for attempt_id in [stored["attempt_id"][0], known["attempt_id"][0]]:
        launch = attempts.filter(pl.col("attempt_id") == attempt_id).to_dicts()[0]
        trained = stored.filter(pl.col("attempt_id") == attempt_id).select(FEATURE_COLUMNS)
        # what a launcher sends: the config as a mapping, and one candidate type
        rows = expand_candidates(launch, [launch["hardware_type"]])
        served = launch_features(rows, specs, snapshot)
        assert served.to_numpy().tobytes() == trained.to_numpy().tobytes()


def test_fleet_stats_reads_the_feature_table(warehouse, capsys):
    from leap_pipeline.app.cli import main

    assert main(["fleet", "stats", "--json", "--warehouse", str(warehouse)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["read_from"].startswith("feature table")
    with open_warehouse(warehouse, read_only=True) as wh:
        measured = wh.read("feature_table", columns=["ds"]).group_by("ds").len()["len"].mean()
    assert stats["attempts_per_day"] == pytest.approx(measured)
    assert stats["oracle_w20"] is not None  # the warehouse came from the simulator


def test_a_missing_snapshot_for_the_day_before_stops_the_feature_table(tmp_path):
    path = tmp_path / "w.duckdb"
    materialize_days(FIRST, FIRST, source=SOURCE, warehouse=str(path), log_level="WARNING")
    # day 3 without day 2: its history would be incomplete, so the run must fail, loudly
    with pytest.raises(Exception, match="history_snapshot for 2026-01-02 is missing"):
        materialize_days(
            FIRST + dt.timedelta(days=2), FIRST + dt.timedelta(days=2), source=SOURCE,
            warehouse=str(path), log_level="CRITICAL",
        )  # fmt: skip
    assert _table_contents(path, "feature_table")["ds"].unique().to_list() == [FIRST]


def test_kill_still_stops_a_background_process_after_an_in_process_run(tmp_path):
    """A process started with SIGINT ignored (a script's ``&``, nohup) must still obey SIGTERM
    after Dagster's in-process run, which maps SIGTERM to SIGINT's handler."""
    # SIGTERM starts at its default: an ignored disposition is inherited, and this test process
    # may itself have run Dagster in the background
    script = f"""
import datetime as dt, os, signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from leap_pipeline.orchestration.runs import land_days
day = dt.date(2026, 1, 1)
land_days(day, day, "simulator:seed=0,scale=0.01", {str(tmp_path / "w.duckdb")!r})
print("SIGTERM handler after the run:", signal.getsignal(signal.SIGTERM), flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5)
print("still running")
"""
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == -15, done.stdout + done.stderr[-2000:]
    assert "still running" not in done.stdout


def test_the_skew_check_passes_as_built_and_names_a_planted_skew(warehouse):
    """The daily skew check recomputes the serving path's features for a sample of a day's
    launches: nothing differs on the pipeline as built; a row changed in the table, or serving
    from a stale snapshot, is named feature by feature."""
    from leap_pipeline.data.serving_skew import serving_skew
    from leap_serving.launch.history import HISTORY_FEATURES

    day, before = dt.date(2026, 1, 6), dt.date(2026, 1, 5)
    with open_warehouse(warehouse, read_only=True) as wh:
        attempts = wh.read("job_attempts", day, day)
        stored = wh.read("feature_table", day, day)
        specs = wh.read("hardware_specs", day, day).drop("ds")
        snapshot = wh.read("history_snapshot", before, before).drop("ds")
        stale = wh.read("history_snapshot", before - dt.timedelta(days=2),
                        before - dt.timedelta(days=2)).drop("ds")  # fmt: skip
    every = attempts.height
    assert serving_skew(attempts, stored, specs, snapshot, sample=every) == []
    planted_id = stored["attempt_id"][3]
    planted = stored.with_columns(
        pl.when(pl.col("attempt_id") == planted_id)
        .then(pl.col("hw_memory_gb") * 2)
        .otherwise(pl.col("hw_memory_gb"))
        .alias("hw_memory_gb")
    )
    (found,) = serving_skew(attempts, planted, specs, snapshot, sample=every)
    assert found["feature"] == "hw_memory_gb" and found["launches"] == 1
    assert found["example"].startswith(planted_id)
    # serving from the snapshot of three days before: only the history features differ
    skewed = serving_skew(attempts, stored, specs, stale, sample=every)
    assert skewed and {f["feature"] for f in skewed} <= set(HISTORY_FEATURES)


@pytest.mark.parametrize("failure", ["open", "flock"])
def test_without_lock_files_duckdbs_lock_alone_is_said_once_and_errors_stay_their_own(
    tmp_path, monkeypatch, caplog, failure
):
    """A folder this process cannot create lock files in, or a file system without flock: one
    warning, then the block runs on DuckDB's lock; an error in it is not chained to the lock's
    (it was raised inside the except clause, "during handling of" an OSError, and said twice)."""
    import errno
    import fcntl
    import logging

    from leap_pipeline.data import warehouse as warehouse_module

    if failure == "open":
        monkeypatch.setattr(warehouse_module.os, "open", _refused_open(warehouse_module.os.open))
    else:

        def no_locks(fd, operation):
            raise OSError(errno.ENOLCK, "No locks available")

        monkeypatch.setattr(fcntl, "flock", no_locks)
    path = tmp_path / "w.duckdb"
    held = warehouse_module._lock_file_held(path, True, 1.0, time.monotonic() + 1.0)
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError) as raised, held:
        raise ValueError("the block's own error")
    assert raised.value.__context__ is None
    said = [r.getMessage() for r in caplog.records if "relying on DuckDB's lock" in r.getMessage()]
    assert len(said) == 1, said
    assert str(path) in said[0]
    with open_warehouse(path) as wh:  # and the warehouse works on DuckDB's lock alone
        wh.replace_partition("job_attempts", FIRST, pl.DataFrame({"x": [1]}))
        assert wh.count("job_attempts", FIRST) == 1


def _refused_open(real_open):
    def refused(file, flags, *args, **kwargs):
        if str(file).endswith((".lock", ".gate")):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, flags, *args, **kwargs)

    return refused


def test_a_ctrl_c_while_a_writer_waits_for_the_lock_lets_its_gate_go(tmp_path, monkeypatch):
    """A writer takes the gate, then waits for the lock; a Ctrl-C there closed neither file, so
    the gate stayed held, every reader and writer of the warehouse held back, until the process
    ended."""
    import fcntl
    import os

    from leap_pipeline.data import warehouse as warehouse_module

    real_flock, taken = warehouse_module._flock, []

    def interrupted(fd, *args):
        taken.append(fd)
        if len(taken) == 2:  # the gate held, waiting for the lock
            raise KeyboardInterrupt
        return real_flock(fd, *args)

    monkeypatch.setattr(warehouse_module, "_flock", interrupted)
    path = tmp_path / "w.duckdb"
    held = warehouse_module._lock_file_held(path, True, 1.0, time.monotonic() + 1.0)
    with pytest.raises(KeyboardInterrupt), held:
        pass
    gate = os.open(warehouse_module._gate_file(path), os.O_RDWR)
    try:  # another open file takes the gate at once
        fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(gate)
