"""The daily-partitioned data assets: thin wrappers over the pure modules and the warehouse.

Each asset handles every partition of its run (``BackfillPolicy.single_run``), so a backfill of many
days is one run, from the UI or with ``dagster asset materialize --partition-range``. Each day is
written, audited, then published: the day's rows are built and checked in memory, and only a day
that passes its audit replaces its partition (in one transaction), so a failed check never leaves
rows a later step or another run could read. The checks report every day of the run.

The assets are built by ``data_assets(partitions)``: the partitions come from the installation's
calendar (``calendar.py``) when the definitions load, never from the environment at import.
"""

import datetime as dt
import hashlib
import os
from collections.abc import Iterator

import dagster as dg
import polars as pl

from leap_pipeline.data.feature_table import (
    FEATURE_TABLE_COLUMNS,
    HISTORY_LOOKBACK_DAYS,
    LandedDay,
    build_feature_table,
    empty_snapshot,
    land_day,
)
from leap_pipeline.data.serving_skew import SKEW_SAMPLE, serving_skew
from leap_pipeline.orchestration.metadata import table_metadata
from leap_pipeline.orchestration.partitions import PID_TAG, process_identity
from leap_pipeline.orchestration.resources import SourceResource, WarehouseResource
from leap_serving.features import ALWAYS_PRESENT_FEATURES
from leap_serving.history import MAX_SNAPSHOT_FAMILIES, SNAPSHOT_INPUT_COLUMNS, history_snapshot

SINGLE_RUN = dg.BackfillPolicy.single_run()
FEATURE_CHECKS = (
    "columns_are_the_feature_list",
    "one_row_per_kept_attempt",
    "required_features_present",
    "history_from_earlier_days",
)


def partition_days(context: dg.AssetExecutionContext) -> list[dt.date]:
    return [dt.date.fromisoformat(key) for key in context.partition_keys]


def record_worker(context: dg.AssetExecutionContext) -> None:
    """Tag the run with the process running it (its id and start time, so a reused id is not
    taken for it), so a tick can tell a run killed outright (which never reports its end) from
    one still working."""
    worker = process_identity(os.getpid())
    if context.run.tags.get(PID_TAG) != worker:
        context.instance.add_run_tags(context.run.run_id, {PID_TAG: worker})


def content_sha256(*frames: pl.DataFrame) -> str:
    """A digest of the frames' schemas and rows, in order: equal for a day landed twice from the
    same files, different when a row changed."""
    digest = hashlib.sha256()
    for frame in frames:
        digest.update(repr(list(frame.schema.items())).encode())
        digest.update(frame.hash_rows(seed=0).to_numpy().tobytes())
    return digest.hexdigest()


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
                content_sha256(landed.attempts, landed.allocations, landed.hardware_specs)
            ],
        }
    )


def refusal_row(reason: str | None) -> pl.DataFrame:
    """The day's refusal record: one row saying why, or none (the day landed)."""
    rows = [] if reason is None else [reason]
    at = [] if reason is None else [dt.datetime.now(dt.UTC).replace(tzinfo=None)]
    return pl.DataFrame(
        {"reason": rows, "refused_at": at},
        schema={"reason": pl.String, "refused_at": pl.Datetime("us")},
    )


def landing_audit(counts: dict[str, int]) -> str | None:
    """Why a landed day must not be published, or None: a day with rows that kept none, or one
    that quarantined more than half of them. A day with no launches is fine."""
    if counts["rows_in"] and counts["kept"] == 0:
        return f"all {counts['rows_in']} rows rejected"
    if counts["quarantined"] * 2 > counts["rows_in"]:
        return f"{counts['quarantined']} of {counts['rows_in']} rows quarantined"
    return None


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
            problem = landing_audit(landed.counts)
            if problem is not None:  # audited before publishing: the day keeps its old rows
                refused.append(f"{day}: {problem}")
                context.log.error(f"{day}: not landed, {problem}")
                wh.replace_partitions(day, {"landing_refusals": refusal_row(problem)})
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
    yield dg.AssetCheckResult(
        check_name="attempts_landed",
        asset_key="job_attempts",
        passed=not refused,
        metadata={"days_refused": str(refused)},
    )


def build_snapshots(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Job-family history as of the end of each day, over the last ``HISTORY_LOOKBACK_DAYS``."""
    per_day, problems = [], []
    with warehouse.open() as wh:
        for day in partition_days(context):
            if wh.count("source_log", day) == 0:
                raise dg.Failure(f"the sources of {day} have not landed: materialize them first")
            first = day - dt.timedelta(days=HISTORY_LOOKBACK_DAYS - 1)
            rows = wh.read("job_attempts", first, day, columns=SNAPSHOT_INPUT_COLUMNS)
            snapshot = history_snapshot(rows, as_of=day)
            families = snapshot.filter(pl.col("hardware_type").is_null()).height
            found = []
            if snapshot.height and snapshot["last_ds"].max() > day:
                found.append(f"{day}: a statistic from {snapshot['last_ds'].max()}")
            if families > MAX_SNAPSHOT_FAMILIES:
                found.append(f"{day}: {families} families")
            problems += found
            if found:
                continue  # audited before publishing
            wh.replace_partition("history_snapshot", day, snapshot.with_columns(ds=pl.lit(day)))
            per_day.append({"ds": day.isoformat(), "families": families, "rows": snapshot.height})
    yield dg.MaterializeResult(
        metadata={
            "families_last_day": per_day[-1]["families"] if per_day else 0,
            "per_day": table_metadata(per_day),
        }
    )
    yield dg.AssetCheckResult(
        check_name="snapshot_as_of_its_day",
        passed=not problems,
        metadata={"problems": str(problems)},
    )


def feature_audit(table: pl.DataFrame, attempts: int) -> dict[str, str]:
    """The feature table checks on one day's rows before they are written: check -> problem."""
    failed = {}
    if table.columns != list(FEATURE_TABLE_COLUMNS):
        failed["columns_are_the_feature_list"] = "columns differ from the feature list"
    if table.height != attempts:
        failed["one_row_per_kept_attempt"] = f"{table.height} rows for {attempts} attempts"
    nulls = [
        c
        for c in (*ALWAYS_PRESENT_FEATURES, "log_q")
        if c in table.columns and table[c].null_count()
    ]
    if nulls:
        failed["required_features_present"] = f"nulls in {nulls}"
    if "hist_days_since_last" in table.columns and (table["hist_days_since_last"] < 1).any():
        failed["history_from_earlier_days"] = "a history statistic from the day itself"
    return failed


def build_features(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """One row per measured attempt: ids, the label ln q and the shared feature list."""
    per_day, skewed = [], []
    failures: dict[str, list[str]] = {name: [] for name in FEATURE_CHECKS}
    with warehouse.open() as wh:
        for day in partition_days(context):
            if wh.count("source_log", day) == 0:
                raise dg.Failure(f"the sources of {day} have not landed: materialize them first")
            attempts = wh.read("job_attempts", day, day)
            specs, snapshot = (
                wh.read("hardware_specs", day, day).drop("ds"),
                _snapshot_before(wh, day),
            )
            table = build_feature_table(attempts, wh.read("allocations", day, day), specs, snapshot)
            # the serving path's features for a sample of the day's launches: reported, not
            # blocking (the rows are right; it is serving that would differ)
            try:
                found = serving_skew(attempts, table, specs, snapshot)
            except Exception as exc:  # a check that cannot run fails, it never stops the day
                context.log.warning(f"train_serve_skew {day}: could not run: {exc!r}")
                found = [{"feature": "(the check could not run)", "example": repr(exc)}]
            skewed += [{"ds": day.isoformat(), **entry} for entry in found]
            failed = feature_audit(table, attempts.height)
            for name, problem in failed.items():
                failures[name].append(f"{day}: {problem}")
            if failed:
                context.log.error(f"feature_table {day}: not published, {failed}")
                continue  # audited before publishing: the day keeps its old rows
            wh.replace_partition("feature_table", day, table)
            cold = float(table["hist_cold_start"].mean() or 0.0)
            per_day.append({"ds": day.isoformat(), "rows": table.height, "cold_start": cold})
            context.log.info(f"feature_table {day}: {table.height} rows, cold start {cold:.1%}")
    yield dg.MaterializeResult(
        metadata={
            "rows": sum(r["rows"] for r in per_day),
            "features": len(FEATURE_TABLE_COLUMNS),
            "per_day": table_metadata(per_day),
        }
    )
    for name, failed in failures.items():
        yield dg.AssetCheckResult(
            check_name=name, passed=not failed, metadata={"failed": str(failed)}
        )
    yield dg.AssetCheckResult(
        check_name="train_serve_skew",
        passed=not skewed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "launches_per_day": SKEW_SAMPLE,
            "days": len(partition_days(context)),
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
        yield from build_features(context, warehouse)

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
