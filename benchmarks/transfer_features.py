"""Do the cross-hardware transfer features (``hist_xfer_*``) help on the simulated fleet?

Trains the single GBDT and the cascade on the 30 days before each evaluation day of a landed
warehouse, with and without the transfer features, and scores the day by history group: cold
(new family), new type (a known family on a type it never ran on: the routing question) and known
(the family ran on this type). Run after ``leap demo`` (or ``leap materialize``):
python benchmarks/transfer_features.py --warehouse data/leap.duckdb [--nights 3] [--profile fast]
"""

import argparse
import datetime as dt

import numpy as np
from threadpoolctl import threadpool_limits

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.evaluation import HISTORY_GROUPS, history_groups
from leap_pipeline.modeling.selection import training_window, validation_rows
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS
from leap_serving.model.cascade import BinnedCascade, make_single_gbdt_booster
from leap_serving.model.fitting import fit_booster
from leap_serving.model.profiles import profile_params

TRANSFER = [c for c in FEATURE_COLUMNS if c.startswith("hist_xfer_")]
WITHOUT = [c for c in FEATURE_COLUMNS if c not in TRANSFER]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", default="data/leap.duckdb")
    parser.add_argument("--nights", type=int, default=3)
    parser.add_argument("--profile", default="fast")
    args = parser.parse_args()
    with open_warehouse(args.warehouse, read_only=True) as wh:
        last = max(wh.partitions("feature_table"))
        nights = [last - dt.timedelta(days=n) for n in reversed(range(args.nights))]
        data = [
            (
                day,
                wh.read("feature_table", *training_window(day)),
                wh.read("feature_table", day, day),
            )
            for day in nights
        ]
    print("day         features   model        cold    new type  known   all     (w20; rows)")
    for day, window, rows in data:
        groups = history_groups(rows.select(FEATURE_COLUMNS).to_numpy())
        y = window["log_q"].to_numpy()
        validation = validation_rows(window)
        q = rows["throughput"].to_numpy()
        for label, columns in (("without", WITHOUT), ("with", list(FEATURE_COLUMNS))):
            X, X_day = window.select(columns).to_numpy(), rows.select(columns).to_numpy()
            with threadpool_limits(1):
                gbdt = fit_booster(make_single_gbdt_booster(args.profile), X, y, validation)
            cascade = BinnedCascade(**profile_params(args.profile))
            cascade.fit(X, y, validation=validation)
            for name, model in (("single_gbdt", gbdt), ("cascade", cascade)):
                p = np.exp(model.predict(X_day))
                cells = [
                    f"{metrics.within(p[groups == g], q[groups == g], 20):6.3f}"
                    for g in HISTORY_GROUPS
                ]
                print(
                    f"{day}  {label:9}  {name:11}  {'  '.join(cells)}  "
                    f"{metrics.within(p, q, 20):6.3f}"
                )
        counts = {g: int((groups == g).sum()) for g in HISTORY_GROUPS}
        print(f"{day}  rows per group: {counts}")


if __name__ == "__main__":
    main()
