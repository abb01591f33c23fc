"""A writer for the fault-injection tests: waits for "go" on stdin, then publishes generation
after generation of one kind of output until it is killed, saying "wrote N" after each. Every
generation marks all of its parts with its number, so a reader can tell a whole version from a mix.

    python tests/fault_writer.py model|partition|import|report FOLDER FIRST_GENERATION
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import polars as pl

DAY = dt.date(2026, 1, 5)


def model_writer(folder: Path):
    import numpy as np

    from leap_pipeline.simulation import SimulatedFleet
    from leap_serving.launch.features import FEATURE_COLUMNS
    from leap_serving.launch.snapshot import SNAPSHOT_SCHEMA
    from leap_serving.model.cascade import BinnedCascade
    from leap_serving.model.model_file import dump_model, load_model
    from leap_serving.model.profiles import profile_params
    from leap_serving.model.published import LeapModel

    # fitted once, by the test's own writer, and read by each writer it then starts and kills:
    # a fit in every one of them was a second of each kill's start
    template = folder / "cascade-template"
    if template.exists():
        cascade = load_model(template, BinnedCascade, n_features=len(FEATURE_COLUMNS))
    else:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(600, len(FEATURE_COLUMNS)))
        cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": 2}).fit(X, X[:, 0])
        dump_model(cascade, template)
    specs = SimulatedFleet(seed=0, scale=0.01).hardware_specs()

    def write(generation: int) -> None:
        # the generation marks every price (plus one: a model prices nothing at 0)
        marked = specs.with_columns(hourly_cost_usd=pl.lit(float(generation) + 1.0))
        LeapModel(
            cascade, pl.DataFrame(schema=SNAPSHOT_SCHEMA), marked, {"generation": generation}
        ).save(folder / "model")

    return write


def partition_writer(folder: Path):
    from leap_pipeline.data.warehouse import open_warehouse

    def write(generation: int) -> None:
        rows = pl.DataFrame({"generation": [generation] * partition_rows(generation)})
        with open_warehouse(folder / "leap.duckdb", wait_s=0) as wh:
            wh.replace_partition("job_attempts", DAY, rows)

    return write


def import_writer(folder: Path):
    from leap_pipeline.data.importer import stage_import

    def write(generation: int) -> None:
        variant = folder / "inputs" / str(generation % 2)
        stage_import(
            variant / "attempts.csv",
            variant / "allocations.csv",
            variant / "hardware.csv",
            folder / "staging",
        )

    return write


def report_writer(folder: Path):
    from leap_serving.model.publish import write_atomic

    def write(generation: int) -> None:
        body = {"generation": generation, "padding": ["x" * 100] * (2000 + generation % 50)}
        write_atomic(folder / "report.json", json.dumps(body))

    return write


def partition_rows(generation: int) -> int:
    return 1000 + 137 * (generation % 11)


WRITERS = {
    "model": model_writer,
    "partition": partition_writer,
    "import": import_writer,
    "report": report_writer,
}


def main() -> None:
    kind, folder, first = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    write = WRITERS[kind](folder)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    generation = first
    while True:
        write(generation)
        print(f"wrote {generation}", flush=True)
        generation += 1


if __name__ == "__main__":
    main()
