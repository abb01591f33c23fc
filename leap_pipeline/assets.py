"""The daily-partitioned assets: thin wrappers over the pure modules and the warehouse.

Each asset handles every partition of its run (``BackfillPolicy.single_run``), so a backfill of many
days is one run, from the UI or with ``dagster asset materialize --partition-range``. Checks run
inside the asset over the days it wrote; the blocking ones stop downstream assets.
"""

import datetime as dt
from collections.abc import Iterator

import dagster as dg
import polars as pl

from leap_serving.features import ALWAYS_PRESENT_FEATURES
from leap_serving.history import MAX_SNAPSHOT_FAMILIES, SNAPSHOT_INPUT_COLUMNS, history_snapshot

from .feature_table import (
    FEATURE_TABLE_COLUMNS,
    HISTORY_LOOKBACK_DAYS,
    build_feature_table,
    empty_snapshot,
    land_day,
)
from .partitions import daily_partitions
from .resources import SourceResource, WarehouseResource

SINGLE_RUN = dg.BackfillPolicy.single_run()


def partition_days(context: dg.AssetExecutionContext) -> list[dt.date]:
    return [dt.date.fromisoformat(key) for key in context.partition_keys]


def per_day_table(rows: list[dict]) -> dg.MetadataValue:
    if not rows:
        return dg.MetadataValue.md("(no days)")
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(r[h]) for h in header) + " |" for r in rows]
    return dg.MetadataValue.md("\n".join(lines))


@dg.multi_asset(
    specs=[
        dg.AssetSpec("job_attempts", description="Validated job attempts with a measured label."),
        dg.AssetSpec("allocations", description="Allocation logs: hosts and devices per attempt."),
        dg.AssetSpec("hardware_specs", description="The hardware spec table as of each day."),
    ],
    check_specs=[
        dg.AssetCheckSpec(
            "attempts_landed",
            asset="job_attempts",
            blocking=True,
            description="No day with rows lost them all; quarantine held under half.",
        )
    ],
    partitions_def=daily_partitions,
    backfill_policy=SINGLE_RUN,
    group_name="sources",
)
def source_tables(
    context: dg.AssetExecutionContext, source: SourceResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Land each day's three sources; bad rows go to the quarantine table with their reason."""
    adapter = source.source()
    per_day = []
    with warehouse.open() as wh:
        for i, day in enumerate(partition_days(context), start=1):
            landed = land_day(adapter.read_day(day), day)
            wh.replace_partitions(
                day,
                {
                    "job_attempts": landed.attempts,
                    "allocations": landed.allocations,
                    "hardware_specs": landed.hardware_specs,
                    "quarantine": landed.quarantine,
                    "source_log": pl.DataFrame({"source": [adapter.description]}),
                },
            )
            per_day.append({"ds": day.isoformat(), **landed.counts})
            context.log.info(f"{day} ({i}/{len(context.partition_keys)}): {landed.counts}")
    totals = {k: sum(r[k] for r in per_day) for k in ("rows_in", "kept", "dropped", "quarantined")}
    yield dg.MaterializeResult(
        asset_key="job_attempts",
        metadata={
            **totals,
            "source": adapter.description,
            "per_day": per_day_table(per_day),
        },
    )
    yield dg.MaterializeResult(
        asset_key="allocations", metadata={"rows": sum(r["allocations"] for r in per_day)}
    )
    yield dg.MaterializeResult(
        asset_key="hardware_specs", metadata={"hardware_types": per_day[-1]["hardware_types"]}
    )
    # a day with no launches is fine; a day whose rows were all rejected is not
    empty = [r["ds"] for r in per_day if r["rows_in"] and r["kept"] == 0]
    mostly_bad = [r["ds"] for r in per_day if r["quarantined"] * 2 > r["rows_in"]]
    yield dg.AssetCheckResult(
        check_name="attempts_landed",
        asset_key="job_attempts",
        passed=not empty and not mostly_bad,
        metadata={"days_without_rows": str(empty), "days_mostly_quarantined": str(mostly_bad)},
    )


@dg.asset(
    name="history_snapshot",
    deps=[
        dg.AssetDep(
            "job_attempts",
            partition_mapping=dg.TimeWindowPartitionMapping(
                start_offset=-(HISTORY_LOOKBACK_DAYS - 1),
                end_offset=0,
                allow_nonexistent_upstream_partitions=True,
            ),
        )
    ],
    check_specs=[
        dg.AssetCheckSpec(
            "snapshot_as_of_its_day",
            asset="history_snapshot",
            blocking=True,
            description="No statistic comes from after the snapshot's day; size within the cap.",
        )
    ],
    partitions_def=daily_partitions,
    backfill_policy=SINGLE_RUN,
    group_name="history",
)
def history_snapshot_asset(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Job-family history as of the end of each day, over the last ``HISTORY_LOOKBACK_DAYS``."""
    per_day = []
    problems = []
    with warehouse.open() as wh:
        for day in partition_days(context):
            if wh.count("source_log", day) == 0:
                raise dg.Failure(f"the sources of {day} have not landed: materialize them first")
            first = day - dt.timedelta(days=HISTORY_LOOKBACK_DAYS - 1)
            rows = wh.read(
                "job_attempts",
                first,
                day,
                columns=SNAPSHOT_INPUT_COLUMNS,
            )
            snapshot = history_snapshot(rows, as_of=day)
            wh.replace_partition("history_snapshot", day, snapshot.with_columns(ds=pl.lit(day)))
            families = snapshot.filter(pl.col("hardware_type").is_null()).height
            if snapshot.height and snapshot["last_ds"].max() > day:
                problems.append(f"{day}: a statistic from {snapshot['last_ds'].max()}")
            if families > MAX_SNAPSHOT_FAMILIES:
                problems.append(f"{day}: {families} families")
            per_day.append({"ds": day.isoformat(), "families": families, "rows": snapshot.height})
    yield dg.MaterializeResult(
        metadata={"families_last_day": per_day[-1]["families"], "per_day": per_day_table(per_day)}
    )
    yield dg.AssetCheckResult(
        check_name="snapshot_as_of_its_day",
        passed=not problems,
        metadata={"problems": str(problems)},
    )


@dg.asset(
    deps=[
        "job_attempts",
        "allocations",
        "hardware_specs",
        dg.AssetDep(
            "history_snapshot",
            partition_mapping=dg.TimeWindowPartitionMapping(
                start_offset=-1, end_offset=-1, allow_nonexistent_upstream_partitions=True
            ),
        ),
    ],
    check_specs=[
        dg.AssetCheckSpec("columns_are_the_feature_list", asset="feature_table", blocking=True),
        dg.AssetCheckSpec("one_row_per_kept_attempt", asset="feature_table", blocking=True),
        dg.AssetCheckSpec("required_features_present", asset="feature_table", blocking=True),
        dg.AssetCheckSpec("history_from_earlier_days", asset="feature_table", blocking=True),
    ],
    partitions_def=daily_partitions,
    backfill_policy=SINGLE_RUN,
    group_name="features",
)
def feature_table(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """One row per measured attempt: ids, the label ln q and the shared feature list."""
    per_day = []
    failures: dict[str, list[str]] = {
        "columns_are_the_feature_list": [],
        "one_row_per_kept_attempt": [],
        "required_features_present": [],
        "history_from_earlier_days": [],
    }
    with warehouse.open() as wh:
        for day in partition_days(context):
            if wh.count("source_log", day) == 0:
                raise dg.Failure(f"the sources of {day} have not landed: materialize them first")
            attempts = wh.read("job_attempts", day, day)
            snapshot = _snapshot_before(wh, day)
            table = build_feature_table(
                attempts,
                wh.read("allocations", day, day),
                wh.read("hardware_specs", day, day).drop("ds"),
                snapshot,
            )
            wh.replace_partition("feature_table", day, table)
            stored = wh.read("feature_table", day, day)
            if stored.columns != list(FEATURE_TABLE_COLUMNS):
                failures["columns_are_the_feature_list"].append(str(day))
            if stored.height != attempts.height:
                failures["one_row_per_kept_attempt"].append(f"{day}: {stored.height}")
            nulls = [c for c in (*ALWAYS_PRESENT_FEATURES, "log_q") if stored[c].null_count()]
            if nulls:
                failures["required_features_present"].append(f"{day}: {nulls}")
            if (stored["hist_days_since_last"] < 1).any():
                failures["history_from_earlier_days"].append(str(day))
            cold = float(stored["hist_cold_start"].mean() or 0.0)
            per_day.append({"ds": day.isoformat(), "rows": stored.height, "cold_start": cold})
            context.log.info(f"feature_table {day}: {stored.height} rows, cold start {cold:.1%}")
    yield dg.MaterializeResult(
        metadata={
            "rows": sum(r["rows"] for r in per_day),
            "features": len(FEATURE_TABLE_COLUMNS),
            "per_day": per_day_table(per_day),
        }
    )
    for name, failed in failures.items():
        yield dg.AssetCheckResult(
            check_name=name, passed=not failed, metadata={"failed": str(failed)}
        )


def _snapshot_before(wh, day: dt.date) -> pl.DataFrame:
    """The snapshot as of ``day - 1``; empty only when no earlier day of attempts exists at all."""
    previous = day - dt.timedelta(days=1)
    if wh.count("history_snapshot", previous):
        return wh.read("history_snapshot", previous, previous).drop("ds")
    earlier = [d for d in wh.partitions("source_log") if d < day]
    if earlier:
        raise dg.Failure(
            f"history_snapshot for {previous} is missing but job_attempts has earlier days: "
            "materialize history_snapshot for the day before first"
        )
    return empty_snapshot()


DATA_ASSETS = [source_tables, history_snapshot_asset, feature_table]
