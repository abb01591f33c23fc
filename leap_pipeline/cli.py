"""The `leap` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .fleet_stats import STAT_RANGES, in_range, simulated_fleet_statistics
from .simulation import FleetArgumentError


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


def fleet_stats(args: argparse.Namespace) -> int:
    stats = simulated_fleet_statistics(
        seed=args.seed, scale=args.scale, days=args.days, progress=None if args.json else _progress
    )
    if args.json:
        print(json.dumps(stats))
        return 0
    print(f"simulated fleet: seed {args.seed}, scale {args.scale}, {args.days} days")
    print(f"{'statistic':30} {'value':>14} {'paper':>16} {'accepted':>22}  ok")
    for key, accepted in STAT_RANGES.items():
        low, high = accepted.low, accepted.high
        if key == "attempts_per_day":
            low, high = low * args.scale, high * args.scale
        bounds = (
            f"{_format(low)} - {_format(high)}" if high != float("inf") else f">= {_format(low)}"
        )
        ok = "yes" if in_range(key, stats[key], args.scale) else "NO"
        print(f"{key:30} {_format(stats[key]):>14} {accepted.paper:>16} {bounds:>22}  {ok}")
    print(f"within_range: {_format(stats['within_range'])}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leap", description="LEAP: learned hardware routing")
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
    stats.set_defaults(handler=fleet_stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (FleetArgumentError, ValueError) as exc:
        parser.exit(2, f"leap: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
