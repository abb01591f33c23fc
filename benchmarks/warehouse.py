"""Compare warehouse designs that concurrent runs could share, on one scale's simulated days.

Run: OMP_NUM_THREADS=1 python benchmarks/warehouse.py [--scale 1.0] [--days 30] [--repeats 5]
     [--writer-days 5] [--writer-pause-s 1.0] [--json]
Needs the optional extra ``warehouse-bench`` (deltalake): pip install -e '.[warehouse-bench]'.

Designs, ratios against held: held (one DuckDB connection for the whole run, the old design),
per-operation (``leap_pipeline.data.warehouse`` today: the file opened for each call) and delta
(a Delta Lake table per table, partitioned by ds, a day replaced with ``write_deltalake(
predicate="ds = '...'")``, read into polars). Measures: (a) the feature table's window read, (b)
one day's landing and feature build written (frames computed once, with the assets' functions),
(c) two writer processes writing different days at once. data/bench-<scale>.duckdb is built
with ``materialize_days`` if missing and reused; the designs work on copies in a temp folder.
"""

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow.compute as pc

try:  # the optional extra: --help answers without it, a run names it
    import deltalake
    from deltalake import DeltaTable, write_deltalake
except ImportError:
    deltalake = None

from leap_pipeline.data.audits import refusal_row
from leap_pipeline.data.feature_table import (
    HISTORY_LOOKBACK_DAYS,
    build_feature_table,
    discard_stale_warehouse,
    land_day,
)
from leap_pipeline.data.sources import source_from_uri
from leap_pipeline.data.warehouse import Warehouse, _sql, open_warehouse
from leap_pipeline.orchestration.data_assets import source_log_row
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.orchestration.resources import WarehouseResource
from leap_pipeline.simulation import SPAN_START
from leap_serving.launch.snapshot import SNAPSHOT_INPUT_COLUMNS, history_snapshot

# a day's landing, one transaction in DuckDB; source_log last, so that in Delta (one commit per
# table) the row saying the day landed is written after the rows it vouches for
LANDING_TABLES = ("job_attempts", "allocations", "hardware_specs", "quarantine",
                  "landing_refusals", "source_log")  # fmt: skip
DAY_TABLES = (*LANDING_TABLES, "history_snapshot", "feature_table")
HELD_WAIT_S = 3600.0  # a held writer waits for the other's whole run: longer than any run here
NOTES = (
    "DuckLake is not measured: it needs duckdb 1.5.5 and third-party extension wheels, not 2.x.",
    "DuckDB's delta extension is not used: it is downloaded on first use, and this machine has "
    "no network; Delta is read with deltalake + polars instead.",
    "Delta has no transaction across tables: a day's eight tables are eight commits (source_log "
    "last), where DuckDB writes the landing in one transaction.",
    "Delta keeps no row order: delta-rs wrote a frame's batches out of order, so frames go as "
    "one batch (rechunk), which kept it here; a real design stores an order column.",
)
VERSIONS = ", ".join(
    f"{lib.__name__} {lib.__version__}" for lib in (deltalake, duckdb, pl) if lib is not None
)
DayFrames = dict[str, pl.DataFrame]  # table -> one day's rows, ds included


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def with_ds(rows: pl.DataFrame, day: dt.date) -> pl.DataFrame:
    return rows if "ds" in rows.columns else rows.with_columns(ds=pl.lit(day, dtype=pl.Date))


def build_warehouse(path: Path, scale: float, last: dt.date) -> None:
    """Materialize the simulated days SPAN_START .. ``last`` the file lacks, one run a day."""
    if discard_stale_warehouse(path):
        progress(f"removed {path}: it was built with other features")
    landed = set(WarehouseResource(path=str(path)).landed_days("feature_table"))
    days = [SPAN_START + dt.timedelta(days=i) for i in range((last - SPAN_START).days + 1)]
    for i, day in enumerate(days, start=1):
        if day in landed:
            continue
        start = time.perf_counter()
        materialize_days(day, day, source=f"simulator:seed=0,scale={scale}",
                         warehouse=str(path), log_level="WARNING")  # fmt: skip
        progress(f"materialized {day} ({i}/{len(days)}) in {time.perf_counter() - start:.1f} s")


def compute_day(path: Path, scale: float, day: dt.date) -> tuple[DayFrames, dict[str, float]]:
    """One day's frames as the assets build them (landing, history snapshot, feature table),
    from the simulator and the earlier days in ``path``; the seconds each step took."""
    seconds, marks = {}, [time.perf_counter()]

    def lap(step: str) -> None:
        marks.append(time.perf_counter())
        seconds[step] = marks[-1] - marks[-2]

    source = source_from_uri(f"simulator:seed=0,scale={scale}")
    landed = land_day(source.read_day(day), day)
    lap("land_s")
    with open_warehouse(path, read_only=True) as wh:
        first = day - dt.timedelta(days=HISTORY_LOOKBACK_DAYS - 1)
        earlier = wh.read("job_attempts", first, day - dt.timedelta(days=1), SNAPSHOT_INPUT_COLUMNS)
        before = wh.read("history_snapshot", *[day - dt.timedelta(days=1)] * 2).drop("ds")
    lap("read_inputs_s")
    attempts, allocations = with_ds(landed.attempts, day), with_ds(landed.allocations, day)
    rows = pl.concat([earlier, attempts.select(SNAPSHOT_INPUT_COLUMNS)])
    snapshot = history_snapshot(rows, as_of=day).with_columns(ds=pl.lit(day))
    lap("snapshot_s")
    features = build_feature_table(attempts, allocations, landed.hardware_specs, before)
    lap("features_s")
    frames = {"job_attempts": attempts, "allocations": allocations,
              "hardware_specs": landed.hardware_specs, "quarantine": landed.quarantine,
              "landing_refusals": refusal_row(None),
              "source_log": source_log_row(source.description, landed),
              "history_snapshot": snapshot, "feature_table": features}  # fmt: skip
    return {table: with_ds(rows, day) for table, rows in frames.items()}, seconds


def write_day_duckdb(wh: Warehouse, day: dt.date, frames: DayFrames) -> None:
    """As the assets write a day: the landing in one transaction, then snapshot, then features."""
    wh.replace_partitions(day, {table: frames[table] for table in LANDING_TABLES})
    wh.replace_partition("history_snapshot", day, frames["history_snapshot"])
    wh.replace_partition("feature_table", day, frames["feature_table"])


def write_day_delta(root: Path, day: dt.date, frames: DayFrames) -> None:
    """A commit per table, each frame one batch (NOTES); the predicate is an ISO date's text."""
    for table in DAY_TABLES:
        rows = frames[table].rechunk().to_arrow()
        write_deltalake(root / table, rows, mode="overwrite", predicate=f"ds = '{day}'")


def read_window_polars(root: Path, first: dt.date, last: dt.date) -> pl.DataFrame:
    scan = pl.scan_delta(str(root / "feature_table")).filter(pl.col("ds").is_between(first, last))
    return scan.collect().sort("ds", maintain_order=True)


def read_window_pyarrow(root: Path, first: dt.date, last: dt.date) -> pl.DataFrame:
    dataset = DeltaTable(root / "feature_table").to_pyarrow_dataset()
    wanted = (pc.field("ds") >= first) & (pc.field("ds") <= last)
    return pl.from_arrow(dataset.to_table(filter=wanted)).sort("ds", maintain_order=True)


def to_delta(source: Path, root: Path) -> None:
    """Every table of the DuckDB file as a Delta table partitioned by ds, rows in stored order."""
    with open_warehouse(source, read_only=True) as wh:
        for table in DAY_TABLES:
            rows = wh.read(table).rechunk().to_arrow()
            write_deltalake(root / table, rows, partition_by=["ds"], mode="overwrite")


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds one call of ``action`` took, and its result."""
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def folder_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in [path, *path.rglob("*")] if f.is_file()) / 2**20, 1)


def load_frames(folder: Path, days: list[dt.date]) -> dict[dt.date, DayFrames]:
    return {d: {t: pl.read_parquet(folder / f"{d}-{t}.parquet") for t in DAY_TABLES} for d in days}


def run_writer(spec: dict) -> None:
    """A writer process (``--writer``): load its days, say ready, wait for the go file, write
    each day after a pause (its compute) the design's way; print a JSON report of its times."""
    days = [dt.date.fromisoformat(d) for d in spec["days"]]
    target, frames = Path(spec["target"]), load_frames(Path(spec["frames"]), days)
    print("ready", flush=True)
    while not Path(spec["go"]).exists():
        time.sleep(0.005)
    report: dict[str, Any] = {"start": time.time(), "opened": None, "error": None, "written": 0}

    def write_days(write: Callable[[dt.date, DayFrames], None]) -> None:
        for day in days:
            time.sleep(spec["pause_s"])
            write(day, frames[day])
            report["written"] += 1

    try:
        if spec["design"] == "delta":
            write_days(lambda day, rows: write_day_delta(target, day, rows))
        elif spec["design"] == "held":
            with open_warehouse(target, wait_s=HELD_WAIT_S) as wh, wh.session(write=True):
                report["opened"] = time.time()
                write_days(lambda day, rows: write_day_duckdb(wh, day, rows))
        else:
            with open_warehouse(target) as wh:
                write_days(lambda day, rows: write_day_duckdb(wh, day, rows))
    except Exception as exc:  # reported: a failed writer is a result
        report["error"] = repr(exc)[:400]
    report["end"] = time.time()
    print(json.dumps(report), flush=True)


def remove_days(design: str, target: Path, first: dt.date, last: dt.date) -> None:
    """Setup, not measured: the writers' days are absent before they write them."""
    if design == "delta":
        for table in DAY_TABLES:
            DeltaTable(target / table).delete(f"ds >= '{first}' AND ds <= '{last}'")
        return
    with duckdb.connect(str(target)) as con:
        for table in DAY_TABLES:
            # the warehouse's own builder: the table name checked against the known tables
            # and quoted; the days bound
            con.execute(_sql("DELETE FROM {table} WHERE ds BETWEEN ? AND ?", table), [first, last])


def days_not_whole(design: str, target: Path, expected: dict[dt.date, DayFrames]) -> list[str]:
    """The (day, table) pairs whose rows are not exactly the frames written."""
    bad = []
    for day, frames in expected.items():
        for table, rows in frames.items():
            if design == "delta":
                scan = pl.scan_delta(str(target / table)).filter(pl.col("ds") == day)
                stored = scan.collect().select(rows.columns)
            else:
                with open_warehouse(target, read_only=True) as wh:
                    stored = wh.read(table, day, day)
            if not stored.equals(rows):
                bad.append(f"{day} {table}: {stored.height} rows stored, {rows.height} written")
    return bad


def concurrent_writers(design: str, target: Path, tmp: Path, days: list[dt.date],
                       pause_s: float) -> dict:  # fmt: skip
    """Two processes, each writing half of ``days``, started together; wall time until both
    end, failures, the held design's wait, and whether every day is whole afterwards."""
    remove_days(design, target, days[0], days[-1])
    go = tmp / f"go-{design}"
    writers, middle = [], len(days) // 2
    for half in (days[:middle], days[middle:]):
        spec = {"design": design, "target": str(target), "frames": str(tmp / "frames"),
                "days": [str(d) for d in half], "pause_s": pause_s, "go": str(go)}  # fmt: skip
        argv = [sys.executable, __file__, "--writer", json.dumps(spec)]
        writers.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    for writer in writers:
        assert writer.stdout and writer.stdout.readline().strip() == "ready"
    go.touch()
    started = time.time()
    reports = [json.loads(writer.communicate(timeout=2 * HELD_WAIT_S)[0]) for writer in writers]
    result = {"wall_s": round(max(r["end"] for r in reports) - started, 2),
              "writer_s": [round(r["end"] - r["start"], 2) for r in reports],
              "failures": [r["error"] for r in reports if r["error"]],
              "days_written": sum(r["written"] for r in reports)}  # fmt: skip
    if design == "held":
        first, second = sorted(reports, key=lambda r: r["opened"] or float("inf"))
        waited_whole_run = bool(second["opened"] and second["opened"] >= first["end"] - 0.05)
        result |= {"second_waited_s": round((second["opened"] or second["end"]) - started, 2),
                   "first_run_s": round(first["end"] - started, 2),
                   "second_waited_for_whole_first_run": waited_whole_run}  # fmt: skip
    result["not_whole"] = days_not_whole(design, target, load_frames(tmp / "frames", days))
    result["every_day_whole"] = not result["not_whole"]
    return result


def ratio(value: float | None, base: float) -> float | None:
    return round(value / base, 2) if value is not None and base else None


def cell(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def print_comparison(result: dict) -> None:
    window, designs = result["window"], result["designs"]
    held_read, held_write = designs["held"]["read_s"], designs["held"]["write_s"]
    print(f"\nwarehouse designs at scale {result['scale']}: feature_table {window['first']} .. "
          f"{window['last']} ({window['days']} days, {window['rows']:,} rows); the day written: "
          f"{result['day']}; medians of {result['repeats']}; ratios against held; load "
          f"average (1 min) at start and end {result['load_1min']}")  # fmt: skip
    rows = [("design", "read s", "x held", "<=1.5x", "same rows", "write s", "x held",
             "2 writers s", "failed", "whole")]  # fmt: skip
    for name, design in designs.items():
        writers = design.get("writers", {})
        within = "yes" if design["read_s"] <= 1.5 * held_read else "NO"
        rows.append((name, design["read_s"], ratio(design["read_s"], held_read), within,
                     design["same_rows"], design.get("write_s"),
                     ratio(design.get("write_s"), held_write), writers.get("wall_s"),
                     len(writers["failures"]) if writers else None,
                     writers.get("every_day_whole")))  # fmt: skip
    for row in rows:
        print(f"{row[0]:30}" + "".join(f"{cell(value):>12}" for value in row[1:]))
    compute = ", ".join(f"{k} {v:.2f}" for k, v in result["day_compute_s"].items())
    print(f"one day's compute, the same for every design and not in 'write s': {compute}")
    held = designs["held"]["writers"]
    print(f"two writers: {result['writer_days']} days each, {result['writer_pause_s']} s pause "
          f"per day standing in for its compute; held: the second writer waited "
          f"{held['second_waited_s']} s, the first run took {held['first_run_s']} s (waited for "
          f"the whole first run: {held['second_waited_for_whole_first_run']})")  # fmt: skip
    for name, writers in ((n, d["writers"]) for n, d in designs.items() if "writers" in d):
        for problem in [*writers["failures"], *writers["not_whole"][:5]]:
            print(f"  {name}: {problem}")
    print(f"sizes MB: {result['size_mb']}; DuckDB -> Delta conversion {result['convert_s']} s; "
          f"computed day equals stored: {result['computed_day_equals_stored']}; "
          f"{result['versions']}")  # fmt: skip
    for note in NOTES:
        print(f"note: {note}")


def measure_designs(copies: tuple[Path, Path], delta_root: Path, first: dt.date, last: dt.date,
                    frames: DayFrames, repeats: int) -> tuple[dict[str, dict], int]:  # fmt: skip
    """(a) the window read, then (b) the day's write, the designs taking turns in each round;
    held has a copy of its own (a process cannot hold a file for writing and also read it)."""
    reference: pl.DataFrame | None = None  # held's window
    per_operation = Warehouse(copies[1])  # the module as it is: it opens the file per call
    with open_warehouse(copies[0], wait_s=HELD_WAIT_S) as held, held.session(write=True):
        reads = {
            "held": lambda: held.read("feature_table", first, last),
            "per-operation": lambda: per_operation.read("feature_table", first, last),
            "delta": lambda: read_window_polars(delta_root, first, last),
            "delta (pyarrow dataset read)": lambda: read_window_pyarrow(delta_root, first, last),
        }
        writes = {
            "held": lambda: write_day_duckdb(held, last, frames),
            "per-operation": lambda: write_day_duckdb(per_operation, last, frames),
            "delta": lambda: write_day_delta(delta_root, last, frames),
        }
        designs: dict[str, dict] = {name: {"same_rows": True} for name in reads}
        for kind, actions in (("read", reads), ("write", writes)):
            progress(f"the {kind}s, {repeats} rounds of every design")
            runs: dict[str, list[float]] = {name: [] for name in actions}
            for _ in range(repeats):
                for name, action in actions.items():
                    seconds, window = timed(action)
                    runs[name].append(seconds)
                    if kind == "read":
                        reference = window if reference is None else reference
                        designs[name]["same_rows"] &= window.equals(reference)
            for name, seconds in runs.items():
                designs[name][f"{kind}_s"] = statistics.median(seconds)
                designs[name][f"{kind}_runs_s"] = seconds
    return designs, reference.height if reference is not None else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--days", type=int, default=30, help="days of the window read")
    parser.add_argument("--repeats", type=int, default=5, help="timed reads and writes")
    parser.add_argument("--writer-days", type=int, default=5, help="days each writer writes")
    parser.add_argument("--writer-pause-s", type=float, default=1.0,
                        help="a writer's pause before each day, its compute")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--writer", help=argparse.SUPPRESS)  # internal: one writer process
    args = parser.parse_args()
    if deltalake is None:
        parser.error("the Delta Lake design needs deltalake: pip install -e '.[warehouse-bench]'")
    if args.writer:
        return run_writer(json.loads(args.writer))
    store = Path(f"data/bench-{args.scale}.duckdb")
    last = SPAN_START + dt.timedelta(days=args.days)  # the window ends here; it is also the day
    first = last - dt.timedelta(days=args.days - 1)
    build_warehouse(store, args.scale, last)
    writer_days = [last - dt.timedelta(days=i) for i in range(2 * args.writer_days)][::-1]
    result: dict[str, Any] = {**vars(args), "day": str(last), "notes": NOTES,  # the arguments too
                              "versions": VERSIONS, "load_1min": [os.getloadavg()[0]]}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="leap-warehouse-bench-") as folder:
        tmp = Path(folder)
        copy, held_db, delta = tmp / "leap.duckdb", tmp / "held.duckdb", tmp / "delta"
        for path in (copy, held_db):
            shutil.copy(store, path)
        progress(f"converting the warehouse to Delta tables, then computing {last}'s frames")
        convert_s, _ = timed(lambda: to_delta(copy, delta))
        result["convert_s"] = round(convert_s, 1)
        result["size_mb"] = {"duckdb": folder_mb(copy), "delta": folder_mb(delta)}
        frames, compute_s = compute_day(copy, args.scale, last)
        result["day_compute_s"] = {k: round(v, 2) for k, v in compute_s.items()}
        frames_dir = tmp / "frames"
        frames_dir.mkdir()
        with open_warehouse(copy, read_only=True) as wh:
            stored = wh.read("feature_table", last, last)
            result["computed_day_equals_stored"] = stored.equals(frames["feature_table"])
            for day in writer_days:
                for table in DAY_TABLES:
                    wh.read(table, day, day).write_parquet(frames_dir / f"{day}-{table}.parquet")
        designs, rows = measure_designs((held_db, copy), delta, first, last, frames, args.repeats)
        for design in ("held", "per-operation", "delta"):
            progress(f"{design}: two writers, {args.writer_days} days each")
            target = delta if design == "delta" else copy
            designs[design]["writers"] = concurrent_writers(
                design, target, tmp, writer_days, args.writer_pause_s
            )
    result["window"] = {"first": str(first), "last": str(last), "days": args.days, "rows": rows}
    result["designs"] = designs
    result["load_1min"].append(os.getloadavg()[0])  # the machine is shared: the noise's source
    print_comparison(result)
    if args.json:
        print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
