"""``leap plan``: which GPU type to buy, and how many, priced on the data folder's last days.

The production model (or ``--model``) ranks the window's launches with each purchase available;
``modeling.planning`` replays them on the predictions. The table is printed and written beside
its picture under ``--out`` (default ``DATA/plans/<last day>``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: every `leap` command builds this parser
    import polars as pl

    from leap_pipeline.modeling.planning import Plan, Purchase

DEFAULT_DAYS = 7


def add_plan_parser(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser("plan", help="which GPU type to buy, and how many (docs/buying.md)")
    plan.add_argument(
        "--buy",
        action="append",
        default=[],
        metavar="TYPE:COUNTS[:PRICE]",
        help="a purchase to price, e.g. H100-SXM:64,256 or L4:128:0.4 or B200:32:300000/4y "
        "(PRICE: USD per device-hour, or USD per device over YEARS; default the spec "
        "table's); repeat for each candidate",
    )
    plan.add_argument(
        "--new-type",
        default="",
        metavar="FILE",
        help="CSV or Parquet spec rows (hardware_specs' columns) for types the table lacks",
    )
    plan.add_argument(
        "--capacity",
        action="append",
        default=[],
        metavar="TYPE=DEVICES",
        help="the fleet's devices of a type (default: its peak use in the allocation logs)",
    )
    plan.add_argument("--days", type=int, default=DEFAULT_DAYS, help="the window, in days")
    plan.add_argument("--end", default="", help="the window's last day (default: the last landed)")
    plan.add_argument(
        "--model", default="", help="model URI (default: models:/leap-throughput@production)"
    )
    plan.add_argument("--data", default="", help="the data folder (default: $LEAP_DATA, else data)")
    plan.add_argument(
        "--out", default="", help="plan.md and plan.png go here (default: DATA/plans/<end>)"
    )
    plan.add_argument("--json", action="store_true", help="the table as JSON on stdout")
    plan.set_defaults(handler=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from leap_pipeline.modeling import planning
    from leap_pipeline.modeling.planning import PlanInputError

    purchases = [planning.parse_purchase(text) for text in args.buy]
    if not purchases:
        raise PlanInputError("--buy: name at least one purchase, e.g. --buy H100-SXM:64,256")
    if not 1 <= args.days <= planning.MAX_DAYS:
        raise PlanInputError(f"--days {args.days}: the window needs 1 to {planning.MAX_DAYS} days")
    capacity = dict(_capacity(text) for text in args.capacity)
    new_types = _new_types(Path(args.new_type)) if args.new_type else None
    plan = plan_folder(
        Path(args.data) if args.data else None,
        purchases,
        days=args.days,
        end=planning.parse_day(args.end) if args.end else None,
        model_uri=args.model or None,
        capacity=capacity,
        new_types=new_types,
    )
    out = Path(args.out) if args.out else plan_folder_out(args.data, plan.last_day)
    try:
        table, picture = planning.write_plan(plan, out)
    except OSError as exc:
        raise PlanInputError(f"--out {str(out)!r}: {exc.strerror or exc}") from None
    if args.json:
        print(
            json.dumps(
                {
                    "table": plan.result.table.to_dicts(),
                    "orders": plan.orders,
                    "baseline_cost_usd": plan.result.baseline.cost,
                    "markdown": str(table),
                    "picture": str(picture),
                }
            )
        )
    else:
        print(table.read_text())
        print(f"written: {table} and {picture}", file=sys.stderr)
    return 0


def plan_folder(
    data: Path | None,
    purchases: Sequence[Purchase],
    days: int = DEFAULT_DAYS,
    end: dt.date | None = None,
    model_uri: str | None = None,
    capacity: dict[str, float] | None = None,
    new_types: pl.DataFrame | None = None,
) -> Plan:
    """The plan on a data folder's warehouse and registered model: ``planning.plan_window``
    over the ``days`` that end at ``end`` (default: the last day landed)."""
    from leap_pipeline.app.carry import pointed_at
    from leap_pipeline.app.registry_choice import registry_uri
    from leap_pipeline.modeling import planning, registry
    from leap_pipeline.modeling.planning import PlanInputError
    from leap_pipeline.settings import DATA_ENV, environment, set_environment
    from leap_serving.registry.registered import load_registered

    where = environment({DATA_ENV: str(data)}) if data else environment()
    if not where.warehouse_path.exists():
        raise PlanInputError(f"--data {where.data}: no warehouse at {where.warehouse_path}")
    set_environment(overwrite=False, MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false")
    uri = model_uri or registry.model_uri()  # $LEAP_MODEL_NAME's production alias
    try:
        # the folder's registry, whatever MLflow pointed at before in this process
        with pointed_at(registry_uri(where)):
            model, _ = load_registered(uri)
    except (OSError, RuntimeError) as exc:  # no such version, alias or artifact
        raise PlanInputError(f"--model {uri!r}: {exc}") from None
    return planning.plan_warehouse(
        where.warehouse_path, model, purchases, days, end, capacity, new_types
    )


def plan_folder_out(data: str, last_day: dt.date) -> Path:
    from leap_pipeline.settings import DATA_ENV, environment

    where = environment({DATA_ENV: data}) if data else environment()
    return Path(where.data) / "plans" / last_day.isoformat()


def _capacity(text: str) -> tuple[str, float]:
    from leap_pipeline.modeling.planning import PlanInputError

    name, sep, value = text.partition("=")
    try:
        devices = float(value)
    except ValueError:
        devices = -1.0
    if not sep or not name or not devices >= 0:
        raise PlanInputError(f"--capacity {text!r}: expected TYPE=DEVICES, DEVICES a number >= 0")
    return name, devices


def _new_types(path: Path) -> pl.DataFrame:
    import polars as pl

    from leap_pipeline.data.sources import read_file, typed_frame
    from leap_pipeline.modeling.planning import PlanInputError, new_type_rows
    from leap_serving.launch.contract import required_columns

    if not path.is_file():
        raise PlanInputError(f"--new-type {str(path)!r}: no such file")
    try:
        raw = read_file(path, "hardware_specs")
    except (OSError, pl.exceptions.PolarsError) as exc:  # empty, ragged or not the format
        raise PlanInputError(f"--new-type {str(path)!r}: unreadable: {exc}") from None
    required = required_columns("hardware_specs")
    missing = [c for c in required if c not in raw.columns and c != "available_from"]
    if missing:
        raise PlanInputError(f"--new-type {path}: lacks column(s) {missing}")
    if "available_from" not in raw.columns:
        raw = raw.with_columns(available_from=pl.lit("1970-01-01"))
    return new_type_rows(typed_frame(raw), [c for c in required if c != "available_from"])
