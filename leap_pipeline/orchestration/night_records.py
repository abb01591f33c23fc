"""The model assets' per-night records, handed from one asset to the next by an IO manager.

A record is small (the trained night's folder, the registered version, the gate's decision, the
evaluation's summary). Each run's record of a partition is a JSON object stored on its own under
``<data>/records/<asset>/<day>/<run id>.json`` (written atomically, never overwritten), so a
backfill of N days writes N small files and the event log keeps one path per materialization,
whatever the backfill's size.

An input reads the record of the run of that partition's latest materialization: an asset
materialized alone uses what its upstream last recorded for that day, or fails saying which asset
and day to materialize first. A run killed between writing its file and recording its
materialization, or two runs writing the same day at once, leave files no input reads: only the
event log says which run's record counts. Materializations made before records were files carry
the record in their metadata, which is read as before.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dagster as dg

from leap_pipeline.orchestration.calendar import data_folder
from leap_serving.model.publish import write_atomic

RECORDS_FOLDER = "records"


def records_root(root: str | Path = "") -> Path:
    """Where records live: ``root``, else ``records`` under the install's data folder."""
    return Path(root) if root else data_folder() / RECORDS_FOLDER


def record_path(asset: str, day: str, run_id: str, root: str | Path = "") -> Path:
    return records_root(root) / asset / day / f"{run_id}.json"


def stored_record(asset: str, day: str | dt.date, run_id: str, root: str | Path = "") -> dict:
    """The record ``run_id`` wrote for ``asset`` on ``day``; ``KeyError`` when that run did not."""
    path = record_path(asset, str(day), run_id, root)
    if not path.is_file():
        raise KeyError(f"run {run_id} recorded no {asset} for {day}")
    return json.loads(path.read_text())["record"]


class NightRecords(dg.ConfigurableIOManager):
    """Stores each model asset's per-day record as a file; loads a day's record back only when
    the partition's latest materialization wrote it."""

    root: str = ""  # empty: ``<data>/records``

    def handle_output(self, context: dg.OutputContext, obj: dict[str, dict]) -> None:
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        asset = context.asset_key.to_user_string()
        missing = sorted(set(keys) - set(obj))
        if missing:
            raise dg.Failure(f"{asset} recorded no result for {missing}")
        for key in keys:
            payload = {"run_id": context.run_id, "asset": asset, "day": key, "record": obj[key]}
            write_atomic(
                record_path(asset, key, context.run_id, self.root),
                json.dumps(payload, indent=1, default=str),
            )
        context.add_output_metadata(
            {"records": dg.MetadataValue.path(str(records_root(self.root) / asset))}
        )

    def load_input(self, context: dg.InputContext) -> dict[str, dict]:
        upstream = context.asset_key.to_user_string()
        records = {}
        for key in context.asset_partition_keys:
            found = context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[key]),
                limit=1,
            ).records
            try:
                if not found:
                    raise KeyError(key)
                legacy = found[0].asset_materialization.metadata.get("records")
                if legacy is not None and isinstance(legacy.value, dict) and key in legacy.value:
                    records[key] = legacy.value[key]  # recorded before records were files
                else:
                    records[key] = stored_record(upstream, key, found[0].run_id, self.root)
            except KeyError:
                raise dg.Failure(
                    f"{upstream} has no recorded result for {key} in this Dagster instance: "
                    f"materialize {upstream} for {key} first"
                ) from None
        return records
