"""Which GPU to buy, scored against the truth: ``leap plan``'s hold-outs on a simulated fleet.

On a data folder ``leap demo`` made (a simulated source, its production model registered), the
``--types`` types the plan's window ran most are held out in turn: the production model's
estimator is refitted on the 30 days before the window without the type and with every history
rebuilt without it, and the plan buys the type back at the capacity its allocation logs show it
used (and at a quarter, half and twice that). The simulator's truth prices the same placements
(``studies.purchase_holdouts``). Prints, per type, the predicted and the true saving; then how
many are within 20% of the truth, and the Spearman correlation of LEAP's ranking of the
purchases and of the two spreadsheet rules' with the truth's.

    .venv/bin/leap demo                                   # data/, scale 0.1
    python benchmarks/purchase_plan.py --data data --days 7 --types 4 --json

Progress goes to stderr; stdout gets the table, or one JSON line with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from demo_truth import window_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    window_arguments(parser, skip=0)
    parser.add_argument("--rank-by", choices=("median", "lower"), default="median")
    parser.add_argument(
        "--price-by", choices=("throughput", "throughput_low"), default="throughput"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.days < 1 or args.types < 2:
        parser.error(f"--days {args.days} --types {args.types}: need days >= 1 and types >= 2")

    from demo_truth import open_demo_folder, plan_window

    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.studies.purchase_holdouts import purchase_holdouts

    started = time.monotonic()
    where, oracle, published, version = open_demo_folder(Path(args.data), parser.error)
    with open_warehouse(where.warehouse_path, read_only=True) as wh:
        first, last, types = plan_window(wh, args.days, args.types, args.skip)
        result = purchase_holdouts(
            wh,
            published,
            oracle.true_medians,
            first,
            last,
            types,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            rank_by=args.rank_by,
            price_by=args.price_by,
        )
    result["model_version"] = version
    result["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"window {first}..{last}, {result['launches']} launches, model version {version}")
    print("| held out | devices | predicted saving (USD) | interval | true saving | ratio |")
    print("|---|---|---|---|---|---|")
    for name, row in result["per_type"].items():
        low, high = row["saving_interval_usd"]
        print(
            f"| {name} | {row['logged_capacity']:.0f} | {row['predicted_saving_usd']:,.0f} "
            f"| {low:,.0f} .. {high:,.0f} | {row['true_saving_usd']:,.0f} | {row['ratio']:.2f} |"
        )
    print(f"within 20% of the truth: {result['within_20pct']} of {len(result['per_type'])}")
    for name, rho in result["spearman"].items():
        pick = result["top_pick"][name]
        print(
            f"{name}: Spearman {rho:.2f} with the truth; top pick {pick['type']} "
            f"(true saving {pick['true_saving_usd']:,.0f} USD)"
        )
    print(f"in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
