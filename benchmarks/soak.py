"""Night after night, unattended: the pipeline driven as its schedule drives it, for many nights.

A ``files:`` source receives one simulated day at a time. Each night the real Dagster instance
(a ``DAGSTER_HOME`` of its own, with the project's ``dagster.yaml``) evaluates
``nightly_schedule`` through Dagster's own API (``build_schedule_context`` /
``evaluate_tick``) at 02:00, and every run it asks for is executed as Dagster's job with the
tags the schedule gave it, as the daemon would launch it. Along the way:

- a day with no launches (its files arrive, empty);
- a day that arrives after its tick (the tick waits; the next one catches up);
- a day with 30% broken rows (quarantined with their reasons);
- a run killed with SIGKILL in the middle of training (a separate process), then resumed by
  the next evaluation of the tick;
- a backfill of an old week, asked to promote (it must never move the alias backwards);
- a rollback by a person;
- two runs of the same night launched at once (two processes);
- with ``--ui-every-night``, each other night runs in a process of its own, as the daemon
  launches it, and once it trains an earlier day is materialized again, as from the UI.

It prints one JSON line: nights expected and trained, nights missed and trained twice, every
row sent accounted for (landed, quarantined, dropped with its reason, lost), the alias's moves
and whether any skipped the gate, whether the promotion history is complete, and the wall time
per night.

    .venv/bin/python benchmarks/soak.py --nights 40 --json [--ui-every-night]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

PROJECT = Path(__file__).resolve().parents[1]
SCHEDULE_TAG = {"dagster/schedule_name": "nightly_schedule"}
FIRST_DAY = dt.date(2026, 1, 1)
MIN_WINDOW = 7


def scenario_nights(nights: int) -> dict[str, int]:
    """Which night (1-based, among the ``nights``) each event happens on, spread over the run."""

    def at(fraction: float) -> int:
        return max(1, min(nights, round(fraction * nights)))

    return {
        "empty": at(0.15),
        "late": at(0.30),
        "broken": at(0.45),
        "kill": at(0.55),
        "backfill": at(0.70),
        "rollback": at(0.80),
        "concurrent": at(0.90),
    }


def write_day(logs: Path, source, day: dt.date, kind: str) -> dict[str, int]:
    """Deliver one day's files; returns the attempt rows sent."""
    raw = source.read_day(day)
    attempts = raw.attempts.with_columns(pl.col(pl.List(pl.String)).list.join(";"))
    allocations = raw.allocations
    if kind == "empty":
        attempts, allocations = attempts.clear(), allocations.clear()
    attempts = attempts.cast({c: pl.String for c in attempts.columns})
    if kind == "broken":  # 30% of rows break the contract: a batch size that is not positive
        broken = pl.int_range(pl.len()) % 10 < 3
        attempts = attempts.with_columns(
            batch_size=pl.when(broken).then(pl.lit("-5")).otherwise(pl.col("batch_size"))
        )
    for name, frame in (("job_attempts", attempts), ("allocations", allocations)):
        folder = logs / name
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{day.isoformat()}.csv.partial"
        frame.write_csv(partial)
        partial.replace(folder / f"{day.isoformat()}.csv")  # a day arrives whole
    if not (logs / "hardware_specs.parquet").exists():
        raw.hardware_specs.write_parquet(logs / "hardware_specs.parquet")
    return {"rows": attempts.height}


RUN_SCRIPT = """
import json, sys
import dagster as dg
request = json.loads(sys.argv[1])
# rebuilt by name in every process of the run: the definitions' executor runs it, each step in a
# process of its own under $LEAP_MAX_CONCURRENT_STEPS > 1, as the daemon's run worker does
job = dg.build_reconstructable_job(
    "leap_pipeline.orchestration.definitions", "installed_job", reconstructable_args=("nightly",)
)
with dg.execute_job(
    job, dg.DagsterInstance.get(), tags=request["tags"], run_config=request["run_config"],
    asset_selection=[dg.AssetKey(k) for k in request["assets"]] if request["assets"] else None,
) as result:
    sys.exit(0 if result.success else 1)
"""


class Soak:
    def __init__(
        self, root: Path, scale: float, seed: int, profile: str, keep: int, log,
        service_env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.root, self.log = root, log
        self.data = root / "data"
        self.logs = root / "logs"
        self.keep = keep
        from leap_pipeline.app.ui import ui_environment
        from leap_pipeline.data.sources import SimulatorSource
        from leap_pipeline.orchestration.calendar import Calendar
        from leap_pipeline.orchestration.instance import DAGSTER_YAML

        # the environment `leap ui` gives the UI, the daemon and its runs, on the soak's folder
        os.environ.update(ui_environment(self.data))
        # on the service topology: Dagster's instance on Postgres, MLflow's server over HTTP
        os.environ.update(service_env or {})
        for folder in ("dagster", "mlflow"):
            (self.data / folder).mkdir(parents=True, exist_ok=True)
        (self.data / "dagster" / "dagster.yaml").write_text(DAGSTER_YAML)
        self.calendar = Calendar(first_day=FIRST_DAY, source=f"files:{self.logs}")
        self.calendar.save(self.data)
        self.simulator = SimulatorSource(seed=seed, scale=scale)
        self.run_config = {
            "resources": {
                "training": {
                    "config": {"profile": profile, "lookup_min_support": 2, "keep_versions": keep}
                }
            },
            "loggers": {"console": {"config": {"log_level": "ERROR"}}},
        }
        self.rows_sent = 0
        import dagster as dg

        from leap_pipeline.orchestration.definitions import build_definitions

        self.dg = dg
        self.defs = build_definitions(self.calendar)
        self.instance = dg.DagsterInstance.get()
        self.runs = 0
        self.ui = {"materialized": 0, "failed": 0, "while_training": 0, "night_runs_failed": 0}

    # -- the schedule, as the daemon runs it -------------------------------------------------------

    def tick(self, day: dt.date):
        """Evaluate the schedule for ``day``'s night at 02:00 the day after."""
        dg = self.dg
        at = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(2), tzinfo=dt.UTC)
        context = dg.build_schedule_context(
            instance=self.instance, scheduled_execution_time=at,
            resources=self.defs.resources, repository_def=self.defs.get_repository_def(),
        )  # fmt: skip
        result = self.defs.get_schedule_def("nightly_schedule").evaluate_tick(context)
        return list(result.run_requests or []), result.skip_message

    def request_payload(self, request) -> dict:
        return {
            "tags": {**request.tags, **SCHEDULE_TAG, "dagster/run_key": request.run_key},
            "assets": [k.to_user_string() for k in request.asset_selection or []],
            "run_config": self.run_config,
        }

    def launch(self, request) -> bool:
        """Run what the schedule asked for, in this process, as Dagster's job."""
        payload = self.request_payload(request)
        job = self.defs.resolve_job_def("nightly")
        from leap_pipeline.orchestration.runs import signal_handlers_kept

        with signal_handlers_kept():
            result = job.execute_in_process(
                instance=self.instance,
                tags=payload["tags"],
                asset_selection=[self.dg.AssetKey(k) for k in payload["assets"]] or None,
                run_config=self.run_config,
                raise_on_error=False,
            )
        self.runs += 1
        return result.success

    def spawn(self, request) -> subprocess.Popen:
        """The same run in a process of its own (to kill it, or to race another)."""
        return subprocess.Popen(
            [sys.executable, "-c", RUN_SCRIPT, json.dumps(self.request_payload(request))],
            env=os.environ.copy(), cwd=self.root,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def run_tick(self, day: dt.date) -> str:
        requests, skipped = self.tick(day)
        for request in requests:
            if not self.launch(request):
                return f"run {request.run_key} failed"
        return skipped or ", ".join(r.run_key for r in requests)

    # -- the events -----------------------------------------------------------------------------

    def kill_in_training(self, day: dt.date) -> str:
        """Launch the night in its own process and SIGKILL it once its training has started,
        then let the schedule take the night again."""
        requests, skipped = self.tick(day)
        nightly = [r for r in requests if r.asset_selection is None]
        for request in requests:
            if request.asset_selection is not None:
                self.launch(request)
        if not nightly:
            return f"nothing to kill ({skipped})"
        process = self.spawn(nightly[0])
        self._wait_for_training(process)
        time.sleep(0.5)
        killed = process.poll() is None
        process.send_signal(signal.SIGKILL)
        process.wait()
        again = self.run_tick(day)  # the next evaluation finds the night untrained
        return f"killed mid-training: {killed}; resumed: {again}"

    def night_beside_the_ui(self, day: dt.date, fault=None) -> str:
        """The night in its own process, as the daemon launches it; once it trains, the day
        three days before is materialized again in this process, as a person does from the
        UI. Both must succeed: each holds the warehouse for one operation at a time."""
        from leap_pipeline.orchestration.runs import run_days

        requests, skipped = self.tick(day)
        for request in requests:
            if request.asset_selection is not None and not self.launch(request):
                return f"run {request.run_key} failed"
        nightly = [r for r in requests if r.asset_selection is None]
        if not nightly:
            return skipped or "no night to run"
        process = self.spawn(nightly[0])
        self._wait_for_training(process)
        hit = f" | {fault()} while it trained" if fault is not None else ""
        earlier = day - dt.timedelta(days=3)
        job = self.defs.resolve_job_def("daily_pipeline")
        landed = run_days(job, earlier, earlier, log_level="ERROR", raise_on_error=False)
        during = process.poll() is None  # the night still trained when the landing ended
        code = process.wait()
        for request in nightly[1:]:  # a catch-up tick may ask for more than one night
            self.launch(request)
        self.runs += 2
        self.ui["materialized"] += 1
        self.ui["failed"] += not landed.success
        self.ui["while_training"] += during
        self.ui["night_runs_failed"] += code != 0
        state = "ok" if landed.success else "FAILED"
        return (
            f"{nightly[0].run_key} in its own process (exit {code}); {earlier} materialized "
            f"meanwhile: {state}, {'while the night trained' if during else 'after it ended'}"
            f"{hit}"
        )

    def failed_runs(self) -> dict:
        """Every run the instance marked failed, with the first line of its first error; those
        that failed for a lock (the warehouse's, a night's, the alias's) counted apart."""
        dg = self.dg
        records = self.instance.get_run_records(
            dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE])
        )
        reasons = []
        for record in records:
            events = self.instance.all_logs(
                record.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE
            )
            errors = [e.dagster_event.event_specific_data.error for e in events]
            message = errors[0].message.splitlines()[0] if errors and errors[0] else "(no step)"
            reasons.append(f"{record.dagster_run.tags.get('dagster/run_key', '')}: {message}")
        locked = [r for r in reasons if "lock" in r.lower() or "did not let go" in r]
        return {"runs_failed": len(reasons), "runs_failed_for_a_lock": len(locked),
                "runs_failed_reasons": reasons}  # fmt: skip

    def _wait_for_training(self, process: subprocess.Popen, timeout_s: float = 600) -> None:
        """Until the run in ``process`` starts training (or ends, or ``timeout_s`` passes)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            if self._training_started():
                return
            time.sleep(0.2)

    def _training_started(self) -> bool:
        records = self.instance.get_run_records(
            self.dg.RunsFilter(statuses=[self.dg.DagsterRunStatus.STARTED]), limit=5
        )
        for record in records:
            for event in self.instance.all_logs(
                record.dagster_run.run_id, of_type=self.dg.DagsterEventType.STEP_START
            ):
                if event.step_key == "cascade_model":
                    return True
        return False

    def concurrent(self, day: dt.date) -> str:
        """Two processes launch the same night at once."""
        requests, skipped = self.tick(day)
        for request in requests:
            if request.asset_selection is not None:
                self.launch(request)
        nightly = [r for r in requests if r.asset_selection is None]
        if not nightly:
            return f"nothing to race ({skipped})"
        first, second = self.spawn(nightly[0]), self.spawn(nightly[0])
        codes = (first.wait(), second.wait())
        return f"two runs at once, exit codes {codes}"

    def backfill(self, first: dt.date, last: dt.date) -> str:
        """A person backfills an old week and asks for promotion."""
        from leap_pipeline.orchestration.runs import run_days

        config = dict(self.run_config["resources"]["training"]["config"], promote=True)
        result = run_days(
            self.defs.resolve_job_def("nightly"), first, last,
            training=config, log_level="ERROR", raise_on_error=False,
        )  # fmt: skip
        return f"backfill {first}..{last}: {'ok' if result.success else 'failed'}"

    def rollback(self) -> str:
        from leap_pipeline.modeling import registry

        registry.configure_tracking()
        history = registry.promotion_history()
        if not history or history[-1]["from_version"] is None:
            return "nothing to roll back"
        target = history[-1]["from_version"]
        registry.promote(target, reason="soak: a person rolls back", actor="soak operator")
        return f"rolled back to version {target}"

    # -- the figures ---------------------------------------------------------------------------

    def figures(self, expected: list[dt.date]) -> dict:
        import mlflow

        from leap_pipeline.data.warehouse import open_warehouse
        from leap_pipeline.modeling import registry

        registry.configure_tracking()
        # a registration is a live version, or one retention retired (recorded on its run)
        client = registry.MlflowClient()
        live = {v.run_id for v in client.search_model_versions(f"name='{registry.model_name()}'")}
        runs = mlflow.search_runs(experiment_names=[registry.EXPERIMENT])
        retired_column = f"tags.{registry.RETIRED_TAG}"
        registered = runs["run_id"].isin(live)
        if retired_column in runs.columns:
            registered |= runs[retired_column].notna()
        registrations = runs[registered]["tags.evaluation_day"].value_counts().to_dict()
        trained = [d for d in expected if registrations.get(d.isoformat(), 0) >= 1]
        twice = [d for d in expected if registrations.get(d.isoformat(), 0) > 1]
        with open_warehouse(self.data / "leap.duckdb", read_only=True) as wh:
            log = wh.read("source_log")
            quarantined = wh.read("quarantine", columns=["reason"]).height
        landed, dropped = int(log["kept"].sum()), int(log["dropped"].sum())
        history = registry.promotion_history()
        existing = {
            str(v.version) for v in client.search_model_versions(f"name='{registry.model_name()}'")
        }
        pipeline_moves = [m for m in history if str(m["by"]).startswith("dagster run")]
        without_gate = 0
        for move in pipeline_moves:
            version = client.get_model_version(registry.model_name(), move["to_version"])
            if version.tags.get("gate") != "passed":
                without_gate += 1
        chained = all(
            later["from_version"] == earlier["to_version"]
            for earlier, later in itertools.pairwise(history)
        )
        named = {m["to_version"] for m in history} | {m["from_version"] for m in history}
        backwards = 0
        for earlier, later in itertools.pairwise(pipeline_moves):
            a = client.get_model_version(registry.model_name(), earlier["to_version"])
            b = client.get_model_version(registry.model_name(), later["to_version"])
            backwards += b.tags["evaluation_day"] < a.tags["evaluation_day"]
        return {
            "nights_expected": len(expected),
            "nights_trained": len(trained),
            "nights_missed": len(expected) - len(trained),
            "nights_trained_twice": len(twice),
            "rows_sent": self.rows_sent,
            "rows_landed": landed,
            "rows_quarantined": quarantined,
            "rows_dropped": dropped,
            "rows_dropped_reason": "no throughput measured (the attempt did not finish)",
            "rows_lost": self.rows_sent - landed - quarantined - dropped,
            "alias_moves": len(history),
            "alias_moves_by_pipeline": len(pipeline_moves),
            "alias_moves_without_gate": without_gate,
            "alias_moves_backwards_by_pipeline": backwards,
            "history_complete": chained and (named - {None}) <= existing,
            "versions_kept": len(existing),
            "runs": self.runs,
            **self.failed_runs(),
            "ui_materializations": self.ui,
        }


def soak(
    nights: int, scale: float, seed: int, profile: str, keep: int, root: Path, log=print,
    ui_every_night: bool = False, topology: str = "embedded",
):  # fmt: skip
    service = None
    if topology == "service":  # leap up first, on the soak's calendar; every night beside the UI
        import importlib.util

        from leap_pipeline.orchestration.calendar import Calendar

        spec = importlib.util.spec_from_file_location("soak_service", PROJECT / "benchmarks" /
                                                      "soak_service.py")  # fmt: skip
        topologies = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(topologies)
        ui_every_night = True
        Calendar(first_day=FIRST_DAY, source=f"files:{root / 'logs'}").save(root / "data")
        service = topologies.ServiceTopology(root / "data", log)
    try:
        figures = _soak(nights, scale, seed, profile, keep, root, log, ui_every_night, service)
    finally:
        if service is not None:
            log(f"leap up stopped with code {service.stop()}")
    return figures


def _soak(nights, scale, seed, profile, keep, root, log, ui_every_night, service):
    driver = Soak(root, scale, seed, profile, keep, log, service.env if service else None)
    events = scenario_nights(nights)
    first_night = FIRST_DAY + dt.timedelta(days=MIN_WINDOW)
    night_of = {name: first_night + dt.timedelta(days=i - 1) for name, i in events.items()}
    last = first_night + dt.timedelta(days=nights - 1)
    faults = {}
    if service is not None:  # each on an ordinary night (one that trains beside the UI)
        taken = {night_of[k] for k in ("late", "kill", "concurrent")}
        for fraction, fault in (
            (0.2, service.kill_postmaster),
            (0.35, service.restart_postgres),
            (0.5, service.kill_daemon),
            (0.65, service.kill_mlflow),
            (0.8, service.kill_webserver),
        ):
            night = first_night + dt.timedelta(days=max(1, round(fraction * nights)) - 1)
            while night in taken:
                night += dt.timedelta(days=1)
            faults[night] = fault
            taken.add(night)
    expected = []
    started = time.perf_counter()
    late_pending = None
    day = FIRST_DAY
    while day <= last:
        kinds = {night_of["empty"]: "empty", night_of["broken"]: "broken"}
        kind = kinds.get(day, "")
        if day == night_of["late"]:
            late_pending = day  # its tick comes first
        else:
            driver.rows_sent += write_day(driver.logs, driver.simulator, day, kind)["rows"]
        if day >= first_night and kind != "empty":
            expected.append(day)
        if day == night_of["kill"]:
            note = driver.kill_in_training(day)
        elif day == night_of["concurrent"]:
            note = driver.concurrent(day)
        elif ui_every_night and day >= first_night:
            note = driver.night_beside_the_ui(day, faults.get(day))
        else:
            note = driver.run_tick(day)
        if late_pending is not None and day == late_pending:
            driver.rows_sent += write_day(driver.logs, driver.simulator, day, "")["rows"]
            note += " | the day arrived after its tick"
            late_pending = None
        if day == night_of["backfill"]:
            note += " | " + driver.backfill(first_night, first_night + dt.timedelta(days=6))
        if day == night_of["rollback"]:
            note += " | " + driver.rollback()
        log(f"{day}: {note}")
        day += dt.timedelta(days=1)
    # the night after the last: the tick that picks up anything still pending
    log(f"{last + dt.timedelta(days=1)} tick: {driver.run_tick(last)}")
    figures = driver.figures(expected)
    figures["wall_s_per_night"] = round((time.perf_counter() - started) / nights, 1)
    figures["events"] = {k: v.isoformat() for k, v in night_of.items()}
    if service is not None:
        figures["topology"] = "service"
        figures["faults"] = {
            **service.faults,
            "servers_restarted": service.restarts_seen(),
            "leap_up_stopped_itself": service.process.poll() is not None,
        }
        figures["events"] |= {f.__name__: d.isoformat() for d, f in faults.items()}
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=40)
    parser.add_argument("--scale", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default="quick", choices=("quick", "fast", "paper"))
    parser.add_argument("--keep-versions", type=int, default=10)
    parser.add_argument("--root", default="", help="folder for the run (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument(
        "--topology", choices=("embedded", "service"), default="embedded",
        help="service: on leap up (Postgres, an MLflow server), with its faults",
    )  # fmt: skip
    parser.add_argument(
        "--ui-every-night", action="store_true",
        help="each night in its own process, an earlier day materialized beside it",
    )  # fmt: skip
    parser.add_argument(
        "--steps", type=int, default=1,
        help="LEAP_MAX_CONCURRENT_STEPS of every run (and of leap up): above 1, the nights run "
        "in their own processes each step in a process of its own",
    )  # fmt: skip
    args = parser.parse_args(argv)
    os.environ["LEAP_MAX_CONCURRENT_STEPS"] = str(args.steps)
    if args.nights < 10:
        parser.error(f"--nights={args.nights}: at least 10, so every event has its own night")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root or tmp).resolve()
        root.mkdir(parents=True, exist_ok=True)
        figures = soak(
            args.nights, args.scale, args.seed, args.profile, args.keep_versions, root,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            ui_every_night=args.ui_every_night, topology=args.topology,
        )  # fmt: skip
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
