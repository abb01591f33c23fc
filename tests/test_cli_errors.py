"""What `leap` says when it cannot go on: a bad flag or a refused run exits 2 with one line on
stderr naming what was wrong, never a traceback."""

import dagster as dg
import pytest

from leap_pipeline.app import commands
from leap_pipeline.app.cli import build_parser, main

PORT_FLAGS = [
    ("up", "--dagster-port"), ("up", "--mlflow-port"), ("up", "--dask-port"),
    ("ui", "--dagster-port"), ("ui", "--mlflow-port"), ("serve", "--port"),
]  # fmt: skip


@pytest.mark.parametrize(("command", "flag"), PORT_FLAGS)
@pytest.mark.parametrize("value", ["70000", "0", "-1", "http"])
def test_a_port_out_of_range_is_refused_as_the_flags_are_read(command, flag, value, capsys):
    """`leap up --dask-port 70000` failed with an OverflowError traceback once Postgres, MLflow
    and Dagster had started."""
    assert getattr(build_parser().parse_args([command, flag, "8080"]), flag[2:].replace("-", "_"))
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([command, flag, value])
    assert stop.value.code == 2
    assert f"argument {flag}: '{value}' is not a port 1..65535" in capsys.readouterr().err


def test_a_refused_run_is_an_error_naming_why_not_a_traceback(monkeypatch, capsys):
    """A day mostly quarantined fails its step with a Failure, which `execute_in_process`
    re-raises as it is: `leap import` and `leap materialize` printed its traceback."""
    why = "feature_table: 1 day(s) not published, each keeps the rows it had"

    def refused(args):
        raise dg.Failure(description=why)

    monkeypatch.setattr(commands, "materialize", refused)
    with pytest.raises(SystemExit) as stop:
        main(["materialize", "--start", "2026-01-01"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == f"leap: error: {why}\n"


def test_any_other_exception_still_reaches_the_caller(monkeypatch):
    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(commands, "materialize", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["materialize", "--start", "2026-01-01"])


def test_leap_ui_refuses_a_folder_leap_up_serves(tmp_path, capsys):
    """`leap up` holds locks/up.lock while it runs; `leap ui` on its folder would start a second
    daemon on another instance and registry, with the nightly schedule on: it is refused, naming
    the holder. `leap ui` holds the lock shared while it runs, so a `leap up` is refused then."""
    import fcntl
    import json
    import os

    from leap_pipeline.app.backup_postgres import PostgresBackupError, up_locked_out
    from leap_pipeline.app.supervision import holding_folder
    from leap_pipeline.app.up_lock import sharing_folder

    lock = tmp_path / "locks" / "up.lock"
    lock.parent.mkdir(parents=True)
    with lock.open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        json.dump({"pid": os.getpid(), "since": "2026-12-05T18:00:00", "servers": {}}, held)
        held.flush()
        with pytest.raises(SystemExit) as stop:
            main(["ui", "--data", str(tmp_path)])
        assert stop.value.code == 2
        said = capsys.readouterr().err
        assert f"leap up serves this folder (pid {os.getpid()}" in said
        assert str(tmp_path) in said
        no_backup = pytest.raises(PostgresBackupError, match="leap up is starting or stopping")
        with no_backup, up_locked_out(tmp_path):  # no copy of Postgres while leap up holds it
            pass
        held.seek(0)
        held.truncate()  # a record naming no live process: leap up starts or stops
        json.dump({"pid": 4194999, "since": "2026-12-05T18:00:00"}, held)
        held.flush()
        no_ui = pytest.raises(ValueError, match="is held: leap up is starting or stopping")
        with no_ui, sharing_folder(tmp_path):
            pass
    lock.write_text("")  # leap up stopped cleanly: its record cleared, its lock free
    quiet = {"log": lambda line: None}
    with (
        sharing_folder(tmp_path),
        pytest.raises(ValueError, match="leap ui runs on"),
        holding_folder(tmp_path, **quiet),  # the UIs run: leap up may not
    ):
        pass
    with sharing_folder(tmp_path), up_locked_out(tmp_path):  # a backup may run beside the UIs
        pass
    with holding_folder(tmp_path, **quiet):  # the UIs stopped: leap up may run
        pass


def test_a_second_ctrl_c_while_the_uis_stop_does_not_cut_the_stop_short(tmp_path, monkeypatch):
    """Ctrl-C stops `leap ui`; a second one pressed while its servers stop used to raise out of
    the stop and leave them running. Here a stand-in server is stopped while SIGINT arrives."""
    import os
    import signal
    import sys

    import psutil

    from leap_pipeline.app import ui

    server = [sys.executable, "-c", "import time; time.sleep(600)"]
    monkeypatch.setattr(ui, "commands", lambda data, d, m: {"dagster": (server, dict(os.environ))})
    started = []
    real_start, real_stop = ui.start_group, ui.stop_groups

    def start(argv, env):
        started.append(real_start(argv, env))
        return started[-1]

    def stop(processes):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, mid-stop
        real_stop(processes)

    def interrupted(processes, log):
        raise KeyboardInterrupt  # the first Ctrl-C

    monkeypatch.setattr(ui, "start_group", start)
    monkeypatch.setattr(ui, "stop_groups", stop)
    monkeypatch.setattr(ui, "watch", interrupted)
    before = signal.getsignal(signal.SIGINT)  # ignored when pytest runs in the background
    assert ui.serve(tmp_path / "data", log=lambda line: None) == 0
    assert not psutil.pid_exists(started[0].pid) or started[0].poll() is not None
    assert signal.getsignal(signal.SIGINT) == before  # restored


def test_crossval_says_when_dated_rows_are_treated_as_one_day(tmp_path, capsys):
    """`leap crossval` scores data without days: a folder of several days' logs is read as one
    day (a test row's history may come from a later day), and it says so."""
    import argparse
    import datetime as dt

    import polars as pl

    from leap_pipeline.simulation.fleet import SimulatedFleet

    fleet = SimulatedFleet(seed=2, scale=0.01)
    attempts = pl.concat([d.attempts for _, d in fleet.days(0, 2)])
    assert attempts["ds"].n_unique() == 2
    attempts.write_parquet(tmp_path / "job_attempts.parquet")
    fleet.hardware_specs().write_parquet(tmp_path / "hardware_specs.parquet")
    args = argparse.Namespace(source="contract", path=str(tmp_path), hardware="")
    commands.static_set(args)
    assert "holds 2 days; crossval treats them as one" in capsys.readouterr().err
    attempts.with_columns(ds=pl.lit(dt.date(2026, 1, 1))).write_parquet(
        tmp_path / "job_attempts.parquet"
    )
    commands.static_set(args)
    assert "crossval treats them as one" not in capsys.readouterr().err
