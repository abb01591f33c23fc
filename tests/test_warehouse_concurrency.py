"""Several processes on one warehouse file: each holds it for one read or write, never for a run.

A run that kept its connection for the whole run (a night trains for minutes) made every other
run wait for it, then fail. These tests use real processes, as Dagster's run workers are.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time

import polars as pl

from leap_pipeline.data.warehouse import open_warehouse

FIRST = dt.date(2026, 3, 1)

# writes days FIRST + offset .. (stride) into two tables at once, each day's rows marked with
# its generation; prints "done" at the end
WRITER = """
import datetime as dt, sys
import polars as pl
from leap_pipeline.data.warehouse import open_warehouse
path, start, count, stride, generations = sys.argv[1], *map(int, sys.argv[2:6])
first = dt.date(2026, 3, 1)
with open_warehouse(path, wait_s=60) as wh:
    for g in range(generations):
        for i in range(count):
            day = first + dt.timedelta(days=start + i * stride)
            rows = pl.DataFrame({"generation": [g] * (100 + g), "day": [str(day)] * (100 + g)})
            wh.replace_partitions(day, {"job_attempts": rows, "source_log": rows.head(1)})
print("done", flush=True)
"""


def _writer(path, start: int, count: int, stride: int = 1, generations: int = 1):
    argv = [sys.executable, "-c", WRITER, str(path), str(start), str(count), str(stride)]
    return subprocess.Popen([*argv, str(generations)], stdout=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout: float = 120) -> str:
    out, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, out
    return out


def test_an_open_handle_does_not_keep_another_process_from_writing(tmp_path):
    path = tmp_path / "leap.duckdb"
    _finish(_writer(path, 0, 1))
    with open_warehouse(path) as wh:  # a run that reads, then trains for a long time
        assert wh.count("job_attempts", FIRST) == 100
        started = time.monotonic()
        _finish(_writer(path, 1, 1))  # a second run lands the next day meanwhile
        waited = time.monotonic() - started
        assert wh.partitions("job_attempts") == [FIRST, FIRST + dt.timedelta(days=1)]
    assert waited < 30, f"the writer waited {waited:.0f} s"


def test_two_processes_land_different_days_at_once_and_both_succeed(tmp_path):
    path = tmp_path / "leap.duckdb"
    writers = [_writer(path, start, 12, stride=2) for start in (0, 1)]  # even and odd days
    for writer in writers:
        _finish(writer)
    with open_warehouse(path, read_only=True) as wh:
        days = wh.partitions("job_attempts")
        assert days == [FIRST + dt.timedelta(days=i) for i in range(24)]
        assert wh.partitions("source_log") == days
        counts = wh.read("job_attempts").group_by("ds").len()
    assert counts["len"].to_list() == [100] * 24


def test_a_reader_sees_each_day_whole_while_it_is_rewritten(tmp_path):
    path = tmp_path / "leap.duckdb"
    _finish(_writer(path, 0, 1))
    writer = _writer(path, 0, 1, generations=40)
    seen = set()
    with open_warehouse(path, read_only=True, wait_s=60) as wh:
        while writer.poll() is None:
            rows = wh.read("job_attempts", FIRST, FIRST)
            generations = rows["generation"].unique().to_list()
            assert len(generations) == 1, f"one read saw generations {generations}"
            assert rows.height == 100 + generations[0]  # every row of that generation
            seen.add(generations[0])
    _finish(writer)
    assert len(seen) > 1, "the reader never saw the day change: the test proved nothing"


def test_a_read_session_sees_one_state_and_cannot_write(tmp_path):
    path = tmp_path / "leap.duckdb"
    with open_warehouse(path) as wh:
        wh.replace_partition("job_attempts", FIRST, pl.DataFrame({"generation": [0]}))
        with wh.session():
            assert wh.count("job_attempts", FIRST) == 1
            try:
                wh.replace_partition("job_attempts", FIRST, pl.DataFrame({"generation": [1]}))
            except Exception as exc:
                assert "read session cannot write" in str(exc)
            else:
                raise AssertionError("a read session wrote")
        with wh.session(write=True):
            wh.replace_partition("job_attempts", FIRST, pl.DataFrame({"generation": [2]}))
            assert wh.read("job_attempts")["generation"].to_list() == [2]
