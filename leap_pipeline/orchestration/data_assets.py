"""The daily-partitioned data assets: thin wrappers over the pure modules and the warehouse.

Each asset handles every partition of its run (``BackfillPolicy.single_run``), so a backfill of many
days is one run, from the UI or with ``dagster asset materialize --partition-range``. Each day is
written, audited, then published: the day's rows are built and checked in memory, and only a day
that passes its audit replaces its partition (in one transaction), so a failed check never leaves
rows a later step or another run could read. The checks report every day of the run, and a day
a check refused fails the run, named with its check: it is never reported materialized (the days
of the run that passed are, one partition each).

The assets are built by ``data_assets(partitions)``: the partitions come from the installation's
calendar (``calendar.py``) when the definitions load, never from the environment at import.
"""

import datetime as dt
from collections.abc import Iterator, Sequence

import dagster as dg
import polars as pl

from leap_pipeline.data.audits import (
    Refusal,
    feature_audit,
    landing_audit,
    refusal_row,
    refusals,
    snapshot_audit,
)
from leap_pipeline.data.digest import frame_digest
from leap_pipeline.data.feature_table import (
    FEATURE_TABLE_COLUMNS,
    HISTORY_LOOKBACK_DAYS,
    LandedDay,
    build_feature_table,
    empty_snapshot,
    land_day,
)
from leap_pipeline.data.serving_skew import SKEW_SAMPLE, serving_skew
from leap_pipeline.orchestration.dagster_beta import beta_parameters_accepted
from leap_pipeline.orchestration.liveness import record_worker
from leap_pipeline.orchestration.metadata import table_metadata
from leap_pipeline.orchestration.resources import SourceResource, WarehouseResource
from leap_serving.launch.snapshot import SNAPSHOT_INPUT_COLUMNS, history_snapshot

SINGLE_RUN = dg.BackfillPolicy.single_run()
SOURCE_ASSETS = ("job_attempts", "allocations", "hardware_specs")
FEATURE_CHECKS = (
    "columns_are_the_feature_list",
    "one_row_per_kept_attempt",
    "required_features_present",
    "history_from_earlier_days",
)


def partition_days(context: dg.AssetExecutionContext) -> list[dt.date]:
    return [dt.date.fromisoformat(key) for key in context.partition_keys]


def fail_refused_days(
    assets: Sequence[str],
    published: Sequence[dict],
    refused: Sequence[Refusal],
    checks: Sequence[dg.AssetCheckResult],
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckResult]:
    """Nothing when no day was refused. Otherwise report the days that were published (their
    rows are in the warehouse) one partition at a time, and the checks' results, then fail the
    step naming each refused day and its check: a refused day is never reported materialized,
    and keeps the rows it had before (none was written)."""
    if not refused:
        return
    for row in published:
        for key in assets:
            yield dg.AssetMaterialization(key, partition=row["ds"])
    yield from checks
    days = sorted({r.day for r in refused})
    raise dg.Failure(
        description=f"{', '.join(assets)}: {len(days)} day(s) not published, each keeps the rows "
        f"it had ({len(published)} published): " + "; ".join(map(str, refused)),
        metadata={"refused": [str(r) for r in refused], "published": [r["ds"] for r in published]},
        allow_retries=False,
    )


def source_log_row(source: str, landed: LandedDay) -> pl.DataFrame:
    """What the day's landing records, in the same transaction as its rows: the day is landed
    (empty days included) exactly when this row exists."""
    counts = landed.counts
    return pl.DataFrame(
        {
            "source": [source],
            "landed_at": [dt.datetime.now(dt.UTC).replace(tzinfo=None)],
            **{key: [int(counts[key])] for key in ("rows_in", "kept", "dropped", "quarantined")},
            "content_sha256": [
                frame_digest(landed.attempts, landed.allocations, landed.hardware_specs)
            ],
        }
    )


def land_sources(
    context: dg.AssetExecutionContext, source: SourceResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Land each day's three sources; bad rows go to the quarantine table with their reason."""
    record_worker(context)
    adapter = source.source()
    per_day, refused = [], []
    with warehouse.open() as wh:
        for i, day in enumerate(partition_days(context), start=1):
            landed = land_day(adapter.read_day(day), day)
            found = refusals(day, landing_audit(landed.counts))
            if found:  # audited before publishing: the day keeps its old rows
                refused += found
                context.log.error(f"{found[0]}: not landed")
                wh.replace_partitions(day, {"landing_refusals": refusal_row(found[0].problem)})
                continue
            wh.replace_partitions(
                day,
                {
                    "job_attempts": landed.attempts,
                    "allocations": landed.allocations,
                    "hardware_specs": landed.hardware_specs,
                    "quarantine": landed.quarantine,
                    "source_log": source_log_row(adapter.description, landed),
                    "landing_refusals": refusal_row(None),  # a refusal ends when the day lands
                },
            )
            per_day.append({"ds": day.isoformat(), **landed.counts})
            context.log.info(f"{day} ({i}/{len(context.partition_keys)}): {landed.counts}")
    check = dg.AssetCheckResult(
        check_name="attempts_landed",
        asset_key="job_attempts",
        passed=not refused,
        metadata={"days_refused": str([f"{r.day}: {r.problem}" for r in refused])},
    )
    yield from fail_refused_days(SOURCE_ASSETS, per_day, refused, [check])
    totals = {k: sum(r[k] for r in per_day) for k in ("rows_in", "kept", "dropped", "quarantined")}
    yield dg.MaterializeResult(
        asset_key="job_attempts",
        metadata={**totals, "source": adapter.description, "per_day": table_metadata(per_day)},
    )
    yield dg.MaterializeResult(
        asset_key="allocations", metadata={"rows": sum(r["allocations"] for r in per_day)}
    )
    yield dg.MaterializeResult(
        asset_key="hardware_specs",
        metadata={"hardware_types": per_day[-1]["hardware_types"] if per_day else 0},
    )
    yield check


def build_snapshots(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Job-family history as of the end of each day, over the last ``HISTORY_LOOKBACK_DAYS``."""
    per_day, refused = [], []
    with warehouse.open() as wh:
        for day in partition_days(context):
            first = day - dt.timedelta(days=HISTORY_LOOKBACK_DAYS - 1)
            with wh.session():  # the landing checked and the attempts read in one state
                if wh.count("source_log", day) == 0:
                    raise dg.Failure(f"the sources of {day} have not landed: materialize them")
                rows = wh.read("job_attempts", first, day, columns=SNAPSHOT_INPUT_COLUMNS)
            snapshot = history_snapshot(rows, as_of=day)
            found = refusals(day, snapshot_audit(snapshot, day))
            if found:  # audited before publishing: the day keeps its old rows
                refused += found
                context.log.error(f"{found[0]}: not published")
                continue
            wh.replace_partition("history_snapshot", day, snapshot.with_columns(ds=pl.lit(day)))
            families = snapshot.filter(pl.col("hardware_type").is_null()).height
            per_day.append({"ds": day.isoformat(), "families": families, "rows": snapshot.height})
    check = dg.AssetCheckResult(
        check_name="snapshot_as_of_its_day",
        asset_key="history_snapshot",
        passed=not refused,
        metadata={"problems": str([f"{r.day}: {r.problem}" for r in refused])},
    )
    yield from fail_refused_days(["history_snapshot"], per_day, refused, [check])
    yield dg.MaterializeResult(
        metadata={
            "families_last_day": per_day[-1]["families"] if per_day else 0,
            "per_day": table_metadata(per_day),
        }
    )
    yield check


def publish_feature_tables(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """The ``feature_table`` asset's body: build each day's table (one row per measured attempt:
    ids, the label ln q and the shared feature list), audit it, and publish it. The features
    themselves come from serving's feature extraction (``build_features``), through
    ``build_feature_table``."""
    per_day, skewed, refused = [], [], []
    with warehouse.open() as wh:
        for day in partition_days(context):
            with wh.session():  # one state of the day: a re-landing waits, never mixes in
                if wh.count("source_log", day) == 0:
                    raise dg.Failure(f"the sources of {day} have not landed: materialize them")
                attempts = wh.read("job_attempts", day, day)
                allocations = wh.read("allocations", day, day)
                specs = wh.read("hardware_specs", day, day).drop("ds")
                snapshot = _snapshot_before(wh, day)
            table = build_feature_table(attempts, allocations, specs, snapshot)
            # the serving path's features for a sample of the day's launches: reported, not
            # blocking (the rows are right; it is serving that would differ)
            try:
                found = serving_skew(attempts, table, specs, snapshot)
            except Exception as exc:  # a check that cannot run fails, it never stops the day
                context.log.warning(f"train_serve_skew {day}: could not run: {exc!r}")
                found = [{"feature": "(the check could not run)", "example": repr(exc)}]
            skewed += [{"ds": day.isoformat(), **entry} for entry in found]
            found = refusals(day, feature_audit(table, attempts.height))
            if found:  # audited before publishing: the day keeps its old rows
                refused += found
                context.log.error(f"feature_table: not published, {'; '.join(map(str, found))}")
                continue
            wh.replace_partition("feature_table", day, table)
            cold = float(table["hist_cold_start"].mean() or 0.0)
            per_day.append({"ds": day.isoformat(), "rows": table.height, "cold_start": cold})
            context.log.info(f"feature_table {day}: {table.height} rows, cold start {cold:.1%}")
    failed = {n: [f"{r.day}: {r.problem}" for r in refused if r.check == n] for n in FEATURE_CHECKS}
    checks = [
        dg.AssetCheckResult(
            check_name=n, asset_key="feature_table", passed=not f, metadata={"failed": str(f)}
        )
        for n, f in failed.items()
    ]
    checks.append(skew_check(skewed, len(context.partition_keys)))
    yield from fail_refused_days(["feature_table"], per_day, refused, checks)
    yield dg.MaterializeResult(
        metadata={
            "rows": sum(r["rows"] for r in per_day),
            "features": len(FEATURE_TABLE_COLUMNS),
            "per_day": table_metadata(per_day),
        }
    )
    yield from checks


def skew_check(skewed: list[dict], days: int) -> dg.AssetCheckResult:
    """The train/serve skew of the days built: reported (a warning's worth), never blocking."""
    return dg.AssetCheckResult(
        check_name="train_serve_skew",
        asset_key="feature_table",
        passed=not skewed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "launches_per_day": SKEW_SAMPLE,
            "days": days,
            "skewed_features": table_metadata(skewed) if skewed else "none",
        },
    )


def _snapshot_before(wh, day: dt.date) -> pl.DataFrame:
    """The snapshot as of ``day - 1``; empty only when no earlier day of attempts exists at all."""
    previous = day - dt.timedelta(days=1)
    if wh.count("history_snapshot", previous):
        return wh.read("history_snapshot", previous, previous).drop("ds")
    # no snapshot rows: fine when the lookback before the day holds no attempt (days with no
    # launches), missing when it does
    first = previous - dt.timedelta(days=HISTORY_LOOKBACK_DAYS - 1)
    earlier = wh.has("job_attempts") and wh.read("job_attempts", first, previous, ["ds"]).height
    if earlier:
        raise dg.Failure(
            f"history_snapshot for {previous} is missing but job_attempts has earlier days: "
            "materialize history_snapshot for the day before first"
        )
    return empty_snapshot()


@beta_parameters_accepted
def data_assets(partitions: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    """The three data assets over ``partitions``: sources, history snapshot, feature table."""

    @dg.multi_asset(
        name="source_tables",
        specs=[
            dg.AssetSpec("job_attempts", description="Validated job attempts with a label."),
            dg.AssetSpec("allocations", description="Allocation logs: hosts and devices."),
            dg.AssetSpec("hardware_specs", description="The hardware spec table as of each day."),
        ],
        check_specs=[
            dg.AssetCheckSpec(
                "attempts_landed",
                asset="job_attempts",
                blocking=True,
                description="No day with rows lost them all; quarantine held under half. A day "
                "that fails is not published.",
            )
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="sources",
    )
    def source_tables(
        context: dg.AssetExecutionContext, source: SourceResource, warehouse: WarehouseResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """Land each day's three sources; bad rows go to the quarantine table with their
        reason."""
        yield from land_sources(context, source, warehouse)

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
                description="No statistic from after the snapshot's day; size within the cap.",
            )
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="history",
    )
    def history_snapshot_asset(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """Job-family history as of the end of each day, over the last 90 days."""
        yield from build_snapshots(context, warehouse)

    @dg.asset(
        name="feature_table",
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
            *(
                dg.AssetCheckSpec(name, asset="feature_table", blocking=True)
                for name in FEATURE_CHECKS
            ),
            dg.AssetCheckSpec(
                "train_serve_skew",
                asset="feature_table",
                description="For a sample of each day's launches, the features serving computes "
                "from the launch, the spec table and the snapshot of the day before equal the "
                "table's rows.",
            ),
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        group_name="features",
    )
    def feature_table(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """One row per measured attempt: ids, the label ln q and the shared feature list."""
        yield from publish_feature_tables(context, warehouse)

    return [source_tables, history_snapshot_asset, feature_table]


DATA_ASSET_KEYS = [
    dg.AssetKey(name)
    for name in (
        "job_attempts",
        "allocations",
        "hardware_specs",
        "history_snapshot",
        "feature_table",
    )
]
