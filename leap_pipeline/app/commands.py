"""What each ``leap`` command does, one function per command; ``cli.build_parser`` wires them to
their flags and ``cli.main`` runs one, turning a bad argument into an error that names it."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import polars as pl

from leap_pipeline.app.registry_choice import from_registry, registry_uri
from leap_pipeline.data.warehouse import default_path
from leap_pipeline.settings import DATA_ENV, Environment, environment, set_environment
from leap_pipeline.studies.fleet_stats import (
    STAT_RANGES,
    in_range,
    simulated_fleet_statistics,
    warehouse_fleet_statistics,
)


def _format(value: float | bool | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) < 1:
        return f"{value:.3f}"
    return f"{value:.1f}"


def _progress(done: int, total: int) -> None:
    print(f"\rgenerating day {done}/{total}", end="" if done < total else "\n", file=sys.stderr)


def install(args: argparse.Namespace) -> Environment:
    """The install a command works on: with ``--data``, every path in that folder; without,
    the environment's (``$LEAP_DATA``, and any path a variable names explicitly)."""
    return environment({DATA_ENV: args.data}) if args.data else environment()


def parse_date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None


def parse_port(text: str) -> int:
    """A TCP port, 1..65535, checked as the flags are read: ``leap up`` hands its ports to the
    servers it starts one after another, and one out of range would fail only once Postgres and
    the others before it had started."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port 1..65535")
    return port


def fleet_stats(args: argparse.Namespace) -> int:
    warehouse = Path(args.warehouse) if args.warehouse else default_path()
    use_warehouse = args.read == "warehouse" or (args.read == "auto" and warehouse.exists())
    if use_warehouse:
        stats, where, scale = warehouse_fleet_statistics(warehouse, days=args.days)
    else:
        stats = simulated_fleet_statistics(
            seed=args.seed,
            scale=args.scale,
            days=args.days,
            progress=None if args.json else _progress,
        )
        where = f"simulated fleet: seed {args.seed}, scale {args.scale}, {args.days} days"
        scale = args.scale
    if args.json:
        print(json.dumps({**stats, "read_from": where}))
        return 0
    print(where)
    print(f"{'statistic':30} {'value':>14} {'paper':>16} {'accepted':>22}  ok")
    for key, accepted in STAT_RANGES.items():
        low, high = accepted.low, accepted.high
        if key == "attempts_per_day":
            low, high = low * scale, high * scale
        bounds = (
            f"{_format(low)} - {_format(high)}" if high != float("inf") else f">= {_format(low)}"
        )
        ok = "yes" if in_range(key, stats[key], scale) else "NO"
        print(f"{key:30} {_format(stats[key]):>14} {accepted.paper:>16} {bounds:>22}  {ok}")
    print(f"within_range: {_format(stats['within_range'])}")
    return 0


def materialize(args: argparse.Namespace) -> int:
    from leap_pipeline.orchestration.definitions import materialize_days

    end = args.end or args.start
    print(f"materializing {args.start} .. {end}", file=sys.stderr)
    materialize_days(args.start, end, source=args.source, warehouse=args.warehouse)
    print(f"done: {args.start} .. {end} in {args.warehouse or default_path()}", file=sys.stderr)
    return 0


def demo(args: argparse.Namespace) -> int:
    from leap_pipeline.app.demo import DemoSettings, run_demo, summary_lines

    settings = DemoSettings(
        scale=args.scale,
        days=args.days,
        nights=args.nights,
        seed=args.seed,
        profile=args.profile,
        data=install(args).data,
        last_day=args.last_day,
    )
    result = run_demo(settings, log=lambda line: print(line, file=sys.stderr))
    print("\n".join(summary_lines(result, settings)))
    if args.json:
        keys = (
            "w20",
            "coverage",
            "oracle_w20",
            "published_model",
            "selection",
            "table1",
            "intervals",
            "model_uri",
            "tracking_uri",
        )
        print(json.dumps({k: result[k] for k in keys}))
    return 0


def model_command(args: argparse.Namespace) -> int:
    from leap_pipeline.modeling import alias_records, registry
    from leap_pipeline.orchestration.promotion import alias_lock

    # the install's store unless MLFLOW_TRACKING_URI names one, as rank and serve read it: the
    # server `leap up` exports is where the nights register and move the alias
    tracking = environment().mlflow_tracking_uri
    registry_uri(install(args))  # a leap up folder without the server's variables: refused
    registry.configure_tracking(None if tracking else install(args).mlflow_store)
    if args.model_command == "promote":
        with alias_lock(install(args).data):  # never between a night's read and its move
            record = registry.promote(args.version, reason=args.reason)
            if args.pin:  # a person's choice: the next passing night must not undo it
                alias_records.pin(record["to_version"], reason=args.reason)
        pinned = " (pinned: nights leave it there until `leap model unpin`)" if args.pin else ""
        print(f"production: version {record['from_version']} -> {record['to_version']}{pinned}")
    elif args.model_command == "unpin":
        with alias_lock(install(args).data):
            held = alias_records.unpin()
        print(
            "nothing was pinned"
            if held is None
            else f"unpinned version {held['version']}: the next passing night moves production"
        )
    else:
        held = alias_records.pinned()
        if held is not None:
            print(
                f"pinned to version {held['version']} by {held['by']} at {held['at']}: "
                f"{held['reason']}"
            )
        for record in registry.promotion_history():
            print(
                f"{record['at']}  {record['from_version']} -> {record['to_version']}  "
                f"by {record['by']}: {record['reason']}"
            )
    return 0


def backup(args: argparse.Namespace) -> int:
    from leap_pipeline.app import backup as saving

    where = install(args)
    outcome = saving.backup(
        where.data, Path(args.dest), where.warehouse_path, without_secrets=args.without_secrets
    )
    outcome.notes[:0] = saving.uncovered(where)
    return _saved(outcome, args.json, f"backed up {where.data.resolve()}")


def restore(args: argparse.Namespace) -> int:
    from leap_pipeline.app import restore as saving

    outcome = saving.restore(Path(args.src), Path(args.data))
    outcome.notes.append(f"use it with --data {outcome.folder} or LEAP_DATA={outcome.folder}")
    return _saved(outcome, args.json, f"restored {Path(args.src).resolve()}")


def _saved(outcome, as_json: bool, what: str) -> int:
    summary = (
        f"{what} to {outcome.folder}: {outcome.files} files, "
        f"{outcome.bytes / 1e6:,.1f} MB, {outcome.seconds:.1f} s"
    )
    print(json.dumps(outcome.to_dict()) if as_json else "\n".join([summary, *outcome.notes]))
    return 0


# what `leap report --json` prints of report.json (the whole file is in <data>/reports/)
REPORT_JSON_KEYS = (
    "settings",
    "nightly_w20",
    "nightly_w20_median",
    "published_w20_median",
    "oracle_w20_median",
    "single_gbdt_w20_median",
    "table1",
    "ablation",
    "holdout_hardware_delta_w20",
    "holdout_family_delta_w20",
    "holdout_regret",
    "routing",
    "routing_capture",
    "per_night",
    "monitoring",
    "exploration",
    "published_w20",
    "single_gbdt_w20",
    "lookup_w20_median",
    "selection",
    "published_shares",
    "night_seconds",
    "night_peak_memory_mb",
    "w20_by_model",
    "physics_w20",
    "night_seconds_median",
    "night_peak_memory_mb_max",
    "staleness",
    "phase_seconds",
    "fits",
    "seconds",
)


def report(args: argparse.Namespace) -> int:
    from leap_pipeline.orchestration.runs import land_days
    from leap_pipeline.studies.report import build_report
    from leap_pipeline.studies.report_settings import ReportSettings

    settings = ReportSettings.from_options(
        args.scale, args.nights, args.seed, args.data, args.quick, args.profile
    )

    result = build_report(settings, land_days, log=lambda line: print(line, file=sys.stderr))
    if args.json:
        print(json.dumps({k: result[k] for k in REPORT_JSON_KEYS}))
    else:
        print((settings.data / "reports" / "report.md").read_text())
    return 0


def imported_calendar(data: Path, first: dt.date, source: str):
    """Imported logs bring their own days: the data folder's calendar starts no later than the
    first imported day, and names the staged logs as its source unless it names other logs."""
    from leap_pipeline.orchestration.calendar import Calendar

    calendar = Calendar.load(data)
    # the folder's own logs replace a simulated source; another folder of logs stays
    keep = calendar.source and not calendar.source.startswith("simulator")
    if not Calendar.exists(data) or first < calendar.first_day or not keep:
        calendar = Calendar(
            min(first, calendar.first_day) if Calendar.exists(data) else first,
            calendar.timezone,
            calendar.source if keep else source,
        )
        path = calendar.save(data)
        print(f"calendar: partitions from {calendar.first_day} ({path})", file=sys.stderr)
    return calendar


def import_logs(args: argparse.Namespace) -> int:
    from leap_pipeline.data.importer import stage_import
    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.orchestration.definitions import materialize_days

    data = install(args).data
    # absolute, since the calendar names it as the source for a UI or daemon started in another
    # directory; staging itself not resolved: it is a link each import moves to a new folder
    staging = data.resolve() / "imports" / "staging"
    staged = stage_import(
        Path(args.attempts), Path(args.allocations), Path(args.hardware), staging, args.days_from
    )
    first, last = staged.days[0], staged.days[-1]
    print(
        f"importing {staged.rows['job_attempts']:,} attempts over {len(staged.days)} days "
        f"({first} .. {last})",
        file=sys.stderr,
    )
    warehouse = args.warehouse or str(install(args).warehouse_path)
    calendar = imported_calendar(data, first, f"files:{staging}")
    materialize_days(
        first,
        last,
        source=f"files:{staging}",
        warehouse=warehouse,
        log_level="WARNING",
        calendar=calendar,
    )
    with open_warehouse(warehouse, read_only=True) as wh:
        kept = wh.read("job_attempts", first, last, columns=["ds"]).height
        quarantine = (
            wh.read("quarantine", first, last, columns=["reason"])
            if wh.has("quarantine")
            else pl.DataFrame({"reason": []}, schema={"reason": pl.String})
        )
    rows_in = staged.rows["job_attempts"]
    orphans = staged.rows["allocations_without_attempt"]
    print(
        f"rows in {rows_in:,}, kept {kept:,}, dropped (no throughput) "
        f"{rows_in - kept - quarantine.height:,}, quarantined {quarantine.height:,}; "
        f"allocations without an attempt {orphans:,}"
    )
    for reason, count in (
        quarantine.group_by("reason").len().sort("len", descending=True).head(10).iter_rows()
    ):
        print(f"  quarantined: {reason} ({count})")
    print(f"landed in {warehouse}; train with: leap materialize ... or the Dagster UI")
    return 0


def user_interfaces(args: argparse.Namespace) -> int:
    from leap_pipeline.app.ui import serve

    return serve(install(args).data, args.dagster_port, args.mlflow_port)


def service(args: argparse.Namespace) -> int:
    import os

    from leap_pipeline.app.up import Ports, serve

    ports = Ports(args.dagster_port, args.mlflow_port, args.dask_port)
    workers = (args.dask_workers or os.cpu_count() or 1) if args.dask else 0
    return serve(install(args).data, ports, workers, upgrade=args.upgrade)


def crossval(args: argparse.Namespace) -> int:
    from leap_pipeline.studies.crossval import SPLITS, exclude_groups, run_split
    from leap_pipeline.studies.crossval_tables import split_table

    attempts, specs = static_set(args)
    attempts = exclude_groups(attempts, args.exclude)
    splits = SPLITS if args.split == "all" else (args.split,)
    results = {}
    for split in splits:
        try:
            results[split] = run_split(
                attempts,
                specs,
                split,
                profile=args.profile,
                n_jobs=args.jobs,
                log=lambda line: print(line, file=sys.stderr),
            )
        except ValueError as exc:  # a split these rows cannot make; the others still run
            if len(splits) == 1:
                raise
            print(f"{split}: skipped: {exc}", file=sys.stderr)
            results[split] = {"skipped": str(exc)}
    tables = "\n".join(
        f"**{split}**: skipped: {result['skipped']}\n"
        if "skipped" in result
        else split_table(split, result)
        for split, result in results.items()
    )
    if args.markdown:
        Path(args.markdown).write_text(tables)
    print(json.dumps(results) if args.json else tables)
    return 0


def static_set(args: argparse.Namespace):
    """``--source``, ``--path`` and ``--hardware`` read (``data.static_sets``); its notes on
    stderr. Returns the kept attempts and the spec table."""
    from leap_pipeline.data.static_sets import read_static_set

    read = read_static_set(args.source, args.path, args.hardware or None)
    for note in read.notes:
        print(note, file=sys.stderr)
    return read.attempts, read.specs


def serve(args: argparse.Namespace) -> int:
    """Serve the Ranker over HTTP until stopped (``leap_serving.http``)."""
    from leap_pipeline.settings import serve_config
    from leap_serving.http.config import listener_settings
    from leap_serving.http.server import serve as run_server

    config = serve_config(host=args.host or None, port=args.port, **listener_settings(args))
    uri = registry_uri(install(args)) if from_registry(args.model) else install(args).tracking_uri
    set_environment(
        overwrite=False, MLFLOW_TRACKING_URI=uri, MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"
    )
    from leap_pipeline.orchestration.calendar import Calendar

    # the model's age counted in the calendar's days, not UTC's (docs/serving.md, /metrics)
    run_server(config, args.model or None, timezone=Calendar.load(install(args).data).timezone)
    return 0
