"""The `leap` command line.

Importing this module loads nothing heavy, and ``main`` reads ``leap --version`` and ``leap
rank`` with a parser of their flags alone first: ``leap rank --server URL`` asks a running
``leap serve`` and prints its answer before anything imports polars, MLflow or Dagster (the
full parser's imports alone took over a second on 2 busy cores), and an in-process ``leap
rank`` imports the Ranker alone. ``tests/test_rank_server.py`` holds it so.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

DESCRIPTION = "LEAP: learned hardware routing"
RANK_HELP = "rank candidate hardware for one job"


class _PrintVersion(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked (reading
    the installed distributions' metadata would add tens of ms to every other start)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"leap {version('leap')}")  # on stdout, as argparse's own version action
            parser.exit(0)
        except PackageNotFoundError:
            parser.exit(
                1,
                "leap: error: no installed distribution named leap to read a version "
                "from: install the project (pip install -e .)\n",
            )


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leap", description=DESCRIPTION)
    parser.add_argument("--version", action=_PrintVersion, help="print the installed version")
    return parser


def _add_rank_flags(ranking: argparse.ArgumentParser) -> None:
    """``leap rank``'s flags, for the full parser and the quick one ``main`` tries first."""
    from leap_pipeline.app.ranking import EXAMPLE_JOB

    ranking.add_argument(
        "--job", default=str(EXAMPLE_JOB), help="launch config as JSON (default: examples/job.json)"
    )
    ranking.add_argument("--candidates", default="", help="A,B,C (default: the job's candidates)")
    ranking.add_argument(
        "--model",
        default="",
        help="models:/name@alias or a model folder "
        "(default: $LEAP_MODEL_URI, else the production alias)",
    )
    ranking.add_argument(
        "--data",
        default="",
        help="where the demo's MLflow store lives, "
        "used unless MLFLOW_TRACKING_URI is set (default: $LEAP_DATA, else "
        "data)",
    )
    ranking.add_argument("--json", action="store_true", help="print one JSON object")
    ranking.add_argument(
        "--format",
        choices=("skypilot", "k8s", "slurm"),
        default=None,
        help="print the ranking for a scheduler: a SkyPilot task or a Kubernetes "
        "Job (YAML), or sbatch flags (docs/serving.md)",
    )
    ranking.add_argument(
        "--handoff-config",
        default="",
        help="YAML or JSON file: the hardware "
        "type -> scheduler name maps, top_k, the base task or Job",
    )
    ranking.add_argument(
        "--fail-empty",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --format: an empty ranking exits 2 and prints nothing on "
        "stdout, so args=$(leap rank ...) && sbatch $args fails instead of "
        "submitting unconstrained; --no-fail-empty exits 0, still printing "
        "nothing (the reason on stderr)",
    )
    ranking.add_argument(
        "--server",
        default="",
        help="URL of a running leap serve to ask "
        "instead of loading a model here (e.g. http://127.0.0.1:8765); the "
        "token from $LEAP_SERVE_TOKEN or $LEAP_SERVE_TOKEN_FILE",
    )
    ranking.add_argument(
        "--token-file",
        default="",
        help="with --server: a file whose first "
        "token is sent (default: $LEAP_SERVE_TOKEN, else "
        "$LEAP_SERVE_TOKEN_FILE)",
    )
    ranking.add_argument(
        "--cacert",
        default="",
        help="with an https --server: the PEM CA "
        "certificate that signed the server's (default: the system's trust "
        "store)",
    )


def build_parser() -> argparse.ArgumentParser:
    from leap_pipeline.app import commands as command
    from leap_pipeline.app.plan import add_plan_parser
    from leap_pipeline.studies.splits import SPLITS
    from leap_serving.http.config import add_listener_flags

    parser = _top_parser()
    commands = parser.add_subparsers(dest="command", required=True)
    fleet = commands.add_parser("fleet", help="the simulated fleet")
    fleet_commands = fleet.add_subparsers(dest="fleet_command", required=True)
    stats = fleet_commands.add_parser(
        "stats", help="print the fleet's statistics beside the paper's"
    )
    stats.add_argument("--scale", type=float, default=1.0, help="attempts/day relative to ~25,000")
    stats.add_argument("--days", type=int, default=31, help="days: window plus one held-out day")
    stats.add_argument("--seed", type=int, default=0, help="fleet seed")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.add_argument(
        "--read",
        choices=("auto", "warehouse", "simulator"),
        default="auto",
        help="auto: the warehouse's feature table when it exists, else the simulated fleet",
    )
    stats.add_argument(
        "--warehouse",
        default="",
        help="DuckDB file (default: $LEAP_WAREHOUSE, else $LEAP_DATA/leap.duckdb)",
    )
    stats.set_defaults(handler=command.fleet_stats)

    run = commands.add_parser(
        "materialize", help="run the daily pipeline for a range of days (one Dagster run)"
    )
    run.add_argument(
        "--start", type=command.parse_date, required=True, help="first day, YYYY-MM-DD"
    )
    run.add_argument("--end", type=command.parse_date, help="last day (default: --start)")
    run.add_argument("--source", default="", help="simulator[:seed=S,scale=X] or files:/folder")
    run.add_argument("--warehouse", default="", help="DuckDB file")
    run.set_defaults(handler=command.materialize)

    show = commands.add_parser("demo", help="everything, end to end, on a small simulated fleet")
    show.add_argument("--scale", type=float, default=0.1, help="fleet scale (1.0: ~25k/day)")
    show.add_argument("--days", type=int, default=45, help="days to simulate")
    show.add_argument("--nights", type=int, default=3, help="nightly retrains to run")
    show.add_argument("--seed", type=int, default=0)
    show.add_argument("--profile", choices=("fast", "paper"), default="fast")
    show.add_argument(
        "--data",
        default="",
        help="folder for the warehouse and MLflow (default: $LEAP_DATA, else data)",
    )
    show.add_argument(
        "--last-day",
        type=command.parse_date,
        default=None,
        help="the last day to land "
        "(default: the day before yesterday; a data folder keeps its own)",
    )
    show.add_argument("--json", action="store_true", help="end with one JSON line")
    show.set_defaults(handler=command.demo)

    from leap_pipeline.app.ranking import rank_in_process

    ranking = commands.add_parser("rank", help=RANK_HELP)
    _add_rank_flags(ranking)
    ranking.set_defaults(handler=rank_in_process)  # main answers it first, with _quick

    server = commands.add_parser("serve", help="the Ranker over HTTP (docs/serving.md)")
    server.add_argument("--host", default="", help="default $LEAP_SERVE_HOST, else 127.0.0.1")
    server.add_argument(
        "--port", type=command.parse_port, default=None, help="default $LEAP_SERVE_PORT, else 8765"
    )
    server.add_argument(
        "--model",
        default="",
        help="models:/name@alias or a model folder "
        "(default: $LEAP_MODEL_URI, else the production alias)",
    )
    server.add_argument(
        "--data",
        default="",
        help="where the demo's MLflow store lives, "
        "used unless MLFLOW_TRACKING_URI is set (default: $LEAP_DATA, else "
        "data)",
    )
    add_listener_flags(server)  # --token-file, --tls-cert/--tls-key, --webhook-port, ...
    server.set_defaults(handler=command.serve)

    imports = commands.add_parser("import", help="land your own logs as daily partitions")
    imports.add_argument("--attempts", required=True, help="job attempts: a file or a folder")
    imports.add_argument("--allocations", required=True, help="allocation logs")
    imports.add_argument("--hardware", required=True, help="the hardware spec table")
    imports.add_argument(
        "--days-from",
        default="ds",
        help="column giving each attempt's day (a date or a timestamp, e.g. launch_ts)",
    )
    imports.add_argument(
        "--data",
        default="",
        help="staging goes under DATA/imports/ (default: $LEAP_DATA, else data)",
    )
    imports.add_argument(
        "--warehouse",
        default="",
        help="DuckDB file (default DATA/leap.duckdb; without --data, $LEAP_WAREHOUSE when set)",
    )
    imports.set_defaults(handler=command.import_logs)

    static = commands.add_parser("crossval", help="grouped-split evaluation of static data")
    static.add_argument("--source", choices=("sia", "lambda", "contract"), required=True)
    static.add_argument(
        "--path",
        required=True,
        help="Sia traces folder, a Lambda snapshot's pytorch folder, or a folder of contract files",
    )
    static.add_argument(
        "--hardware",
        default="",
        help="Epoch ml_hardware.csv (sia) or a hardware_specs file (contract)",
    )
    static.add_argument("--split", default="leave-model-hardware-out", choices=(*SPLITS, "all"))
    static.add_argument(
        "--jobs", type=int, default=-1, help="folds fitted at once (joblib; -1: one per core)"
    )
    static.add_argument("--profile", choices=("quick", "fast", "paper"), default="fast")
    static.add_argument(
        "--exclude",
        default="",
        help="MODEL:TYPE,... groups dropped before splitting, e.g. input-bound measurements",
    )
    static.add_argument("--json", action="store_true")
    static.add_argument(
        "--markdown", default="", help="also write the tables, one per split, to this file"
    )
    static.set_defaults(handler=command.crossval)

    ui = commands.add_parser("ui", help="the Dagster and MLflow UIs on the project's data")
    ui.add_argument(
        "--data",
        default="",
        help="the folder the demo and pipeline write (default: $LEAP_DATA, else data)",
    )
    ui.add_argument("--dagster-port", type=command.parse_port, default=3000)
    ui.add_argument("--mlflow-port", type=command.parse_port, default=5000)
    ui.set_defaults(handler=command.user_interfaces)

    up = commands.add_parser(
        "up",
        help="the service on this machine: Postgres, MLflow, "
        "Dagster's webserver and daemon (the service extra)",
    )
    up.add_argument(
        "--data",
        default="",
        help="the install's folder; Postgres keeps its data "
        "in DATA/postgres (default: $LEAP_DATA, else data)",
    )
    up.add_argument("--dagster-port", type=command.parse_port, default=3000)
    up.add_argument("--mlflow-port", type=command.parse_port, default=5000)
    up.add_argument(
        "--dask",
        action="store_true",
        help="also a Dask scheduler and workers, for the training resource's dask_scheduler",
    )
    up.add_argument("--dask-port", type=command.parse_port, default=8786)
    up.add_argument(
        "--dask-workers",
        type=int,
        default=0,
        help="worker processes of one thread each (default: one per core)",
    )
    up.add_argument(
        "--upgrade",
        action="store_true",
        help="after installing a new release: migrate the MLflow and Dagster databases first",
    )
    up.set_defaults(handler=command.service)

    add_plan_parser(commands)

    paper = commands.add_parser("report", help="the paper's evaluation and routing value")
    paper.add_argument(
        "--scale",
        type=float,
        help="fleet scale (default: the largest at which "
        "30 nights take about an hour on 2 cores; docs/commands.md)",
    )
    paper.add_argument("--nights", type=int, help="nightly retrains to score (default: 30)")
    paper.add_argument("--seed", type=int, default=0)
    paper.add_argument(
        "--profile",
        choices=("fast", "paper"),
        help="the nights' trees "
        "(default: fast; paper: section 2.4's, about 9 minutes a night at "
        "scale 1.0)",
    )
    paper.add_argument(
        "--data",
        default="",
        help="warehouse and DATA/reports/ go here (default: $LEAP_DATA, else data)",
    )
    paper.add_argument("--quick", action="store_true", help="a one-minute run for tests")
    paper.add_argument("--json", action="store_true")
    paper.set_defaults(handler=command.report)

    model = commands.add_parser("model", help="the registered model and its production pointer")
    model_commands = model.add_subparsers(dest="model_command", required=True)
    promote = model_commands.add_parser("promote", help="point production at VERSION (rollback)")
    promote.add_argument("version")
    promote.add_argument("--reason", default="manual promotion", help="recorded with the move")
    promote.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="let the next passing night move it again (default: pinned until unpin)",
    )
    model_commands.add_parser("unpin", help="let passing nights move production again")
    model_commands.add_parser("history", help="every recorded move of the pointer, and the pin")
    model.add_argument(
        "--data",
        default="",
        help="the install's folder, its MLflow store used "
        "unless MLFLOW_TRACKING_URI is set (default: $LEAP_DATA, else "
        "data)",
    )
    model.set_defaults(handler=command.model_command)

    saved = commands.add_parser(
        "backup",
        help="a consistent copy of an install's data folder: "
        "warehouse, records, MLflow, Dagster, Postgres",
    )
    saved.add_argument("dest", help="a new (or empty) folder, outside the data folder")
    saved.add_argument(
        "--data", default="", help="the install's folder (default: $LEAP_DATA, else data)"
    )
    saved.add_argument("--json", action="store_true", help="print one JSON object")
    saved.add_argument(
        "--without-secrets",
        action="store_true",
        help="leave secrets/ (the Postgres, MLflow admin and Dask keys) out of the backup, for "
        "a store others can read; put it back before leap up runs on the restored folder",
    )
    saved.set_defaults(handler=command.backup)
    back = commands.add_parser(
        "restore", help="a backup into a new data folder, checked first (trusted backups only)"
    )
    back.add_argument("src", help="a folder `leap backup` wrote")
    back.add_argument(
        "--data", required=True, help="the new data folder (must not exist or be empty)"
    )
    back.add_argument("--json", action="store_true", help="print one JSON object")
    back.set_defaults(handler=command.restore)
    return parser


@contextmanager
def progress_on_stderr() -> Iterator[None]:
    """Training progress (``leap.progress``) on stderr: one line in place on a terminal."""
    from leap_pipeline.modeling.progress import LOGGER, TerminalLine

    handler = TerminalLine(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    try:
        yield
    finally:
        handler.end_line()
        LOGGER.removeHandler(handler)


def _quick(argv: list[str]) -> int | None:
    """``leap --version`` and ``leap rank`` (in-process or ``--server``), answered with a
    parser of their flags alone; None for any other call (the full parser then reads it)."""
    if argv[:1] not in (["--version"], ["rank"]):
        return None
    parser = _top_parser()
    _add_rank_flags(parser.add_subparsers(dest="command").add_parser("rank", help=RANK_HELP))
    args = parser.parse_args(argv)
    from leap_pipeline.app.ranking import rank_from_server, rank_in_process

    try:
        return rank_from_server(args) if args.server else rank_in_process(args)
    except ValueError as exc:  # a bad flag or launch file, or a HandoffError
        parser.exit(2, f"leap: error: {exc}\n")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quick = _quick(argv)
    if quick is not None:
        return quick
    from leap_pipeline.data.warehouse import WarehouseError
    from leap_pipeline.simulation import FleetArgumentError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with progress_on_stderr():
            return args.handler(args)
    except (FleetArgumentError, ValueError, WarehouseError) as exc:  # ContractError included
        parser.exit(2, f"leap: error: {exc}\n")
    except Exception as exc:
        # Dagster only now: importing it up front would cost every command a second
        import dagster as dg

        if not isinstance(exc, dg.Failure):
            raise
        # a run refused (a day mostly quarantined, a night without its window): execute_in_process
        # re-raises the step's Failure as it is, and its description says what to do
        parser.exit(2, f"leap: error: {exc.description or exc}\n")


if __name__ == "__main__":
    sys.exit(main())
