"""Nightly training, next-day evaluation, the registry and the production pointer."""

import dataclasses
import datetime as dt
import json
import re
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling import alias_records, registry
from leap_pipeline.modeling.evaluation import evaluate, frequency_band
from leap_pipeline.modeling.night_store import load_trained, models_folder
from leap_pipeline.modeling.selection import (
    check_window,
    fit_models,
    training_window,
    window_lookup,
)
from leap_pipeline.modeling.training import IncompleteWindow, night_inputs, run_night, window_gaps
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.orchestration.runs import night_record
from leap_pipeline.settings import MIN_SUPPORT, GateSettings, RegistrySettings, TrainingSettings
from leap_serving.registry import registered

SOURCE = "simulator:seed=3,scale=0.02"
FIRST = dt.date(2026, 1, 1)
NIGHT = dt.date(2026, 1, 10)
MARKER = "marker_model_type_on_the_evaluation_day"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Ten days of a small fleet in a fresh warehouse and MLflow store."""
    root = tmp_path_factory.mktemp("fleet")
    warehouse, store = root / "leap.duckdb", root / "mlflow"
    materialize_days(FIRST, NIGHT, source=SOURCE, warehouse=str(warehouse), log_level="WARNING")
    registry.configure_tracking(store)
    return {"warehouse": warehouse, "store": store}


# the tests whose nights fit their own models, whatever fitted the same window before
FIT_FOR_REAL = ("test_evaluation_never_sees_a_training_day",)


@pytest.fixture(scope="module")
def _fitted() -> dict[tuple, object]:
    """The module's fitted nights, by window: let go with the module."""
    return {}


@pytest.fixture(autouse=True)
def _one_fit_per_window(request, monkeypatch, _fitted):
    """The nights here fit each window once. Their tests are about the pointer, the registry and
    the gate, and make new versions of one night by changing its lookup setting: each such
    night is a new version, fingerprint, run and evaluation, but its estimators are the ones
    fitted on that window before (about 2 s a night, fifteen nights), with its own lookup table
    (``selection.window_lookup``). The tests of ``FIT_FOR_REAL`` and tests/test_cascade.py fit
    for real."""
    if request.node.originalname in FIT_FOR_REAL:
        return
    from leap_pipeline.modeling import training

    fit = training.fit_models

    def fit_once(window, day, profile="fast", random_state=0, lookup_min_support=MIN_SUPPORT, **kw):
        rows = hash(tuple(window.hash_rows().to_list()))
        key = (rows, day, profile, random_state, json.dumps(kw, sort_keys=True))
        if key not in _fitted:
            _fitted[key] = fit(window, day, profile=profile, random_state=random_state, **kw)
        return dataclasses.replace(_fitted[key], lookup=window_lookup(window, lookup_min_support))

    monkeypatch.setattr(training, "fit_models", fit_once)


def _train(fleet, **training):
    return materialize_days(
        NIGHT, NIGHT, job_name="training", warehouse=str(fleet["warehouse"]),
        mlflow_store=str(fleet["store"]),
        # a floor this small fleet clears on any night, and the quick profile: these tests are
        # about the pointer, not accuracy
        training={"profile": "quick", "lookup_min_support": 2, "gate_floor": 0.1, **training},
        log_level="WARNING", raise_on_error=False,
    )  # fmt: skip


def test_the_window_is_the_days_before_the_evaluation_day():
    assert training_window(dt.date(2026, 3, 31)) == (dt.date(2026, 3, 1), dt.date(2026, 3, 30))
    assert training_window(dt.date(2026, 3, 31), 7)[0] == dt.date(2026, 3, 24)


def test_evaluation_never_sees_a_training_day(fleet):
    """Plant a marker row on the evaluation day: training must not see it, evaluation must."""
    with open_warehouse(fleet["warehouse"]) as wh:
        day_rows = wh.read("feature_table", NIGHT, NIGHT)
        marker = day_rows.head(1).with_columns(
            attempt_id=pl.lit("marker"), model_type=pl.lit(MARKER)
        )
        wh.replace_partition("feature_table", NIGHT, pl.concat([day_rows, marker]))
        try:
            night = run_night(wh, NIGHT, TrainingSettings(lookup_min_support=2))
        finally:
            wh.replace_partition("feature_table", NIGHT, day_rows)
        window_rows = wh.read("feature_table", FIRST, NIGHT - dt.timedelta(days=1)).height
    models, rows = night.models, night.rows
    assert models.window == (FIRST, NIGHT - dt.timedelta(days=1))
    assert models.training_rows == window_rows == night.window.height
    assert MARKER not in models.model_type_ranks["model_type"].to_list()
    assert "marker" in night.evaluation["scored"]["attempt_id"].to_list()
    assert (
        frequency_band(rows.filter(pl.col("attempt_id") == "marker"), models.model_type_ranks)[0]
        == "tail"
    )  # never seen in training
    with pytest.raises(ValueError, match="overlap the training window"):
        evaluate(models, rows.with_columns(ds=pl.lit(NIGHT - dt.timedelta(days=1))))


def test_a_window_reaching_the_day_or_too_short_is_refused(fleet):
    with open_warehouse(fleet["warehouse"], read_only=True) as wh:
        rows = wh.read("feature_table", FIRST, NIGHT)
    with pytest.raises(ValueError, match="not before"):
        check_window(rows, NIGHT)
    with pytest.raises(ValueError, match="at least 7"):
        fit_models(rows.filter(pl.col("ds") < FIRST + dt.timedelta(days=3)), NIGHT)


def test_a_day_whose_landing_stopped_before_its_features_is_no_night_without_attempts(
    fleet, tmp_path
):
    """Day D landed its sources, then stopped before its feature table: the night read no row
    and was skipped as "no measured attempt", a success. It is an incomplete night now, waited
    for and then refused like a window day, naming D."""
    import shutil

    path = tmp_path / "leap.duckdb"
    shutil.copy(fleet["warehouse"], path)
    with open_warehouse(path) as wh:
        wh.replace_partition("feature_table", NIGHT, wh.read("feature_table", NIGHT, NIGHT).head(0))
        assert wh.count("source_log", NIGHT) > 0
        with pytest.raises(IncompleteWindow, match=f"or the day itself.*{NIGHT}") as refused:
            night_inputs(wh, NIGHT, TrainingSettings(profile="quick"), first_day=FIRST)
        assert refused.value.missing == [NIGHT]


def test_a_night_whose_window_is_still_landing_is_refused_and_registers_nothing(fleet, tmp_path):
    """Runs overlap: a night may start while another run still lands its window. The night
    checks its window when it reads it: a day with no feature table (and not a day landed
    with no attempt) makes it wait, then fail having registered nothing."""
    import shutil

    path = tmp_path / "leap.duckdb"
    shutil.copy(fleet["warehouse"], path)
    gap = FIRST + dt.timedelta(days=4)
    settings = TrainingSettings(profile="quick")
    with open_warehouse(path) as wh:
        assert window_gaps(wh, FIRST, NIGHT - dt.timedelta(days=1)) == []
        wh.replace_partition("feature_table", gap, wh.read("feature_table", gap, gap).head(0))
        assert window_gaps(wh, FIRST, NIGHT - dt.timedelta(days=1)) == [gap]
        with pytest.raises(IncompleteWindow, match=f"1 day\\(s\\) of its window .*{gap}"):
            night_inputs(wh, NIGHT, settings, first_day=FIRST)
        # the days before the calendar's first are no part of the window
        assert night_inputs(wh, NIGHT, settings, first_day=gap + dt.timedelta(days=1)).rows.height
    store = tmp_path / "mlflow"
    result = materialize_days(
        NIGHT, NIGHT, job_name="training", warehouse=str(path), mlflow_store=str(store),
        training={"profile": "quick", "window_wait_s": 0, "promote": True},
        log_level="CRITICAL", raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert f"({gap})" in str(failure.event_specific_data.error) and "nothing registered" in str(
        failure.event_specific_data.error
    )
    registry.configure_tracking(store)
    try:
        assert registry.registered_nights() == {}
    finally:
        registry.configure_tracking(fleet["store"])


def test_the_gate():
    assert registry.evaluation_gate(0.5, None, floor=0.3, margin=0.02).passed
    below_floor = registry.evaluation_gate(0.2, None, floor=0.3, margin=0.02)
    assert not below_floor.passed and "below the floor" in below_floor.reason
    worse = registry.evaluation_gate(0.5, 0.53, floor=0.3, margin=0.02)
    assert not worse.passed and "below production" in worse.reason
    assert registry.evaluation_gate(0.52, 0.53, floor=0.3, margin=0.02).passed


def test_pointer_moves_only_when_asked_and_the_gate_passes_and_rollback_works(fleet):
    # a test run registers a version but leaves the pointer alone
    result = _train(fleet, run_kind="test")
    assert result.success
    assert registry.production_version() is None
    first = night_record(result, "model_evaluation", NIGHT)
    assert not first["reused_version"]
    # the same night on the same inputs, asked to promote: its version is reused, not repeated
    promoted = _train(fleet, promote=True)
    assert promoted.success
    again = night_record(promoted, "model_evaluation", NIGHT)
    assert again["reused_version"] and again["version"] == first["version"]
    assert str(registry.production_version().version) == first["version"]
    assert len(registry.registered_nights()[NIGHT.isoformat()]) == 1
    # other settings make other inputs: a new version of the night, promoted over the first
    # (production evaluated on this very day is not its comparison)
    changed = _train(fleet, promote=True, lookup_min_support=3)
    second = night_record(changed, "model_evaluation", NIGHT)
    assert second["version"] != first["version"] and "not compared" in second["gate_reason"]
    assert str(registry.production_version().version) == second["version"]
    # a failed gate blocks promotion, even when asked
    failed = _train(fleet, promote=True, gate_floor=0.99, lookup_min_support=4)
    gate = [e for e in failed.get_asset_check_evaluations() if e.check_name == "evaluation_gate"]
    assert len(gate) == 1 and not gate[0].passed
    # every slice of the real night is judged and shown (a warning never blocks the run)
    (slices,) = [e for e in failed.get_asset_check_evaluations() if e.check_name == "slice_quality"]
    assert {"bar", "below", "slices"} <= set(slices.metadata)
    assert str(registry.production_version().version) == second["version"]
    # rollback: one command, recorded
    registry.promote(first["version"], reason="rollback test", actor="pytest")
    assert str(registry.production_version().version) == first["version"]
    moves = registry.promotion_history()
    assert [(m["from_version"], m["to_version"]) for m in moves][-3:] == [
        (None, first["version"]),
        (first["version"], second["version"]),
        (second["version"], first["version"]),
    ]
    assert moves[-1]["by"] == "pytest" and moves[-1]["reason"] == "rollback test"
    with pytest.raises(ValueError, match="version='999'"):
        registry.promote("999", reason="no such version")


def test_a_rollback_pinned_survives_the_next_passing_night_until_unpinned(fleet):
    """A person's rollback pins the alias: a later night that passes its gate registers but
    leaves production where the rollback put it, saying why, until someone unpins."""
    first = _train(fleet, promote=True, lookup_min_support=5)
    older = night_record(first, "model_evaluation", NIGHT)["version"]
    before = _train(fleet, promote=True, lookup_min_support=6)
    assert before.success
    newest = night_record(before, "model_evaluation", NIGHT)["version"]
    assert str(registry.production_version().version) == newest != older
    registry.promote(older, reason="rollback: a bad night", actor="pytest")
    alias_records.pin(older, reason="rollback: a bad night", actor="pytest")
    try:
        assert alias_records.pinned()["version"] == older
        passing = _train(fleet, promote=True, lookup_min_support=7)
        record = night_record(passing, "model_evaluation", NIGHT)
        assert record["gate_passed"] and record["version"] not in (older, newest)
        assert str(registry.production_version().version) == older
        (decision,) = [
            m.metadata["decision"].value
            for m in passing.asset_materializations_for_node("production_model")
        ]
        assert decision.startswith(f"not promoted: production is pinned to version {older}")
        from leap_serving.registry.registered import last_night

        assert last_night(registry.model_uri()) | {"at": None} == {
            "day": NIGHT.isoformat(), "outcome": "held", "note": decision, "at": None}  # fmt: skip
        assert alias_records.unpin()["version"] == older and alias_records.pinned() is None
        moved = _train(fleet, promote=True, lookup_min_support=7)
        assert moved.success
        assert str(registry.production_version().version) == record["version"]
    finally:
        alias_records.unpin()


def test_a_backfill_of_an_older_night_never_moves_the_alias_backwards(fleet):
    """With production on night 10, an older night run again and asked to promote passes its
    own gate (production saw its day, so it is not the comparison) but leaves the alias."""
    assert _train(fleet, promote=True).success
    current = registry.production_version()
    assert current.tags["evaluation_day"] == NIGHT.isoformat()
    older = NIGHT - dt.timedelta(days=1)
    result = materialize_days(
        older, older, job_name="training", warehouse=str(fleet["warehouse"]),
        mlflow_store=str(fleet["store"]),
        training={"profile": "quick", "lookup_min_support": 2, "gate_floor": 0.1,
                  "promote": True},
        log_level="WARNING",
    )  # fmt: skip
    record = night_record(result, "model_evaluation", older)
    assert record["gate_passed"] and "not compared" in record["gate_reason"]
    assert str(registry.production_version().version) == str(current.version)
    (decision,) = [
        m.metadata["decision"].value
        for m in result.asset_materializations_for_node("production_model")
    ]
    assert "never moves the alias backwards" in decision


def test_retention_keeps_production_and_every_version_a_move_names(fleet):
    for support in (5, 6, 7):  # three new versions of the night (other inputs each)
        assert _train(fleet, run_kind="test", lookup_min_support=support).success
    client = registry.MlflowClient()
    versions = client.search_model_versions(f"name='{registry.model_name()}'")
    oldest = min(int(v.version) for v in versions)
    registry.promote(str(oldest), reason="retention test", actor="pytest")
    history = registry.promotion_history()
    named = {m["to_version"] for m in history} | {m["from_version"] for m in history} - {None}
    nights = {
        str(v.version): (
            dt.date.fromisoformat(v.tags["evaluation_day"]),
            v.tags["night_fingerprint"],
        )
        for v in versions
    }
    deleted = registry.enforce_retention(keep=1)
    assert deleted  # versions no move names went ...
    assert not named & set(deleted)  # ... but every version a move names stays
    assert str(registry.production_version().version) == str(oldest)
    assert registry.promotion_history() == history  # the audit survives retention
    # a retired night is remembered on its run, so a backfill does not register it again
    for version in deleted:
        assert registry.registered_before(*nights[version]) is not None
    assert registry.registered_before(NIGHT, "0" * 64) is None
    for version in named:  # and a rollback reaches each of them
        registry.promote(version, reason="rollback after retention", actor="pytest")
    registry.promote(str(oldest), reason="back", actor="pytest")


def test_the_registered_model_predicts_the_same_in_a_fresh_process(fleet, tmp_path):
    assert _train(fleet, promote=True).success
    folder = models_folder(fleet["warehouse"], NIGHT)
    _, published = load_trained(folder)
    with open_warehouse(fleet["warehouse"], read_only=True) as wh:
        launches = wh.read("job_attempts", NIGHT, NIGHT).head(20)
    launches = launches.with_columns(ds=pl.lit(NIGHT + dt.timedelta(days=1)))
    launches.write_parquet(tmp_path / "launches.parquet")
    expected = published.predict(launches)["predicted_throughput"].to_numpy()
    script = f"""
import sys, mlflow, polars as pl
mlflow.set_tracking_uri({registry.mlflow.get_tracking_uri()!r})
model = mlflow.pyfunc.load_model("models:/{registry.model_name()}@production")
launches = pl.read_parquet({str(tmp_path / "launches.parquet")!r})
predicted = model.predict(launches.to_pandas())["predicted_throughput"].to_numpy()
pl.DataFrame({{"p": predicted}}).write_parquet({str(tmp_path / "predicted.parquet")!r})
assert not any(m.split(".")[0] in ("leap_pipeline", "dagster") for m in sys.modules), "imports"
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    got = pl.read_parquet(tmp_path / "predicted.parquet")["p"].to_numpy()
    np.testing.assert_array_equal(got, expected)


def test_an_asset_materialized_alone_uses_its_upstreams_record_or_says_what_to_run(
    fleet, tmp_path, monkeypatch
):
    """The model assets hand a night over through an IO manager (``NightRecords``): production_model
    alone acts on what model_evaluation recorded for that day in this instance, never on files
    an older run left, and without such a record it fails saying what to materialize."""
    import dagster as dg

    from leap_pipeline.orchestration.calendar import Calendar
    from leap_pipeline.orchestration.definitions import build_definitions
    from leap_pipeline.orchestration.instance import DAGSTER_YAML

    defs = build_definitions(Calendar(first_day=FIRST))

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text(DAGSTER_YAML)

    def production_alone():
        return defs.resolve_implicit_global_asset_job_def().execute_in_process(
            asset_selection=[dg.AssetKey("production_model")],
            partition_key=NIGHT.isoformat(),
            run_config={"resources": {
                "warehouse": {"config": {"path": str(fleet["warehouse"])}},
                "mlflow_tracking": {"config": {"store": str(fleet["store"])}},
                "training": {"config": {"promote": True}},
            }},
            instance=dg.DagsterInstance.get(),
            raise_on_error=False,
        )  # fmt: skip

    # a fresh instance: whatever files earlier runs left, no record of model_evaluation
    alone = production_alone()
    assert not alone.success
    failure = next(e for e in alone.all_events if e.is_step_failure)
    message = failure.step_failure_data.error.message
    assert f"materialize model_evaluation for {NIGHT.isoformat()} first" in message
    # a test run records a new version without moving the pointer; alone, production_model
    # then promotes exactly that version
    trained = _train(fleet, run_kind="test")
    assert trained.success
    recorded = night_record(trained, "model_evaluation", NIGHT)
    assert production_alone().success
    assert str(registry.production_version().version) == recorded["version"]
    # model_evaluation alone registers what cascade_model recorded, and only if its files are
    # still what cascade_model published
    lookup = models_folder(fleet["warehouse"], NIGHT) / "lookup_entries.parquet"
    original = lookup.read_bytes()
    lookup.write_bytes(original + b"tampered")
    try:
        evaluation_alone = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            asset_selection=[dg.AssetKey("model_evaluation")],
            partition_key=NIGHT.isoformat(),
            run_config={"resources": {
                "warehouse": {"config": {"path": str(fleet["warehouse"])}},
                "mlflow_tracking": {"config": {"store": str(fleet["store"])}},
            }},
            instance=dg.DagsterInstance.get(),
            raise_on_error=False,
        )  # fmt: skip
    finally:
        lookup.write_bytes(original)
    assert not evaluation_alone.success
    failure = next(e for e in evaluation_alone.all_events if e.is_step_failure)
    message = failure.step_failure_data.error.message
    assert f"materialize cascade_model for {NIGHT} again" in message


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: TrainingSettings(profile="slow"), "profile='slow'"),
        (lambda: TrainingSettings(window_days=31), "window_days=31"),
        (lambda: TrainingSettings(n_jobs=0), "n_jobs=0"),
        (lambda: GateSettings(floor=1.5), "gate_floor=1.5"),
        (lambda: RegistrySettings(keep_versions=0), "keep_versions=0"),
    ],
)
def test_a_bad_setting_is_an_error_naming_the_field_and_value(make, names):
    with pytest.raises(ValueError, match=re.escape(names)):
        make()


def test_a_night_record_is_read_only_from_the_run_that_wrote_it(tmp_path):
    """Each run's record of a day is its own file: a record another run left (a crashed one, one
    racing this one) is never read for this run, and never overwritten by it."""
    from leap_pipeline.orchestration.night_records import record_path, stored_record
    from leap_serving.model.publish import write_atomic

    for run, version in (("old-run", "3"), ("new-run", "4")):
        payload = {"run_id": run, "record": {"version": version}}
        write_atomic(
            record_path("model_evaluation", "2026-02-01", run, tmp_path), json.dumps(payload)
        )
    assert stored_record("model_evaluation", "2026-02-01", "old-run", tmp_path) == {"version": "3"}
    assert stored_record("model_evaluation", "2026-02-01", "new-run", tmp_path) == {"version": "4"}
    with pytest.raises(KeyError, match="other-run recorded no model_evaluation"):
        stored_record("model_evaluation", "2026-02-01", "other-run", tmp_path)
    with pytest.raises(KeyError):
        stored_record("model_evaluation", "2026-02-02", "old-run", tmp_path)


def test_the_run_carries_every_hyperparameter_and_its_training_window(fleet):
    """Every fitted model's ``get_params()`` is on the MLflow run, prefixed by the model, beside
    the training window as the run's input dataset (named by its days, with the feature list as
    its schema); the materialization's records stay one path, whatever the number of days."""
    from leap_serving.launch.features import FEATURE_COLUMNS
    from leap_serving.model.cascade import BinnedCascade, make_single_gbdt_booster

    trained = _train(fleet, run_kind="test", window_days=8)
    assert trained.success
    record = night_record(trained, "model_evaluation", NIGHT)
    run = registry.MlflowClient().get_run(record["run_id"])
    params = run.data.params
    for prefix, names in (
        ("cascade", BinnedCascade().get_params()),
        ("published", BinnedCascade().get_params()),
        ("single_gbdt", make_single_gbdt_booster("quick").get_params()),
    ):
        missing = sorted(f"{prefix}.{n}" for n in names if f"{prefix}.{n}" not in params)
        assert missing == []
    assert params["profile"] == "quick" and int(params["lookup.entries"]) >= 0
    (dataset,) = [d.dataset for d in run.inputs.dataset_inputs]
    first, last = NIGHT - dt.timedelta(days=8), NIGHT - dt.timedelta(days=1)
    assert dataset.name.startswith(f"feature_table {first}..{last}")
    assert json.loads(dataset.schema)["mlflow_colspec"][0]["name"] == FEATURE_COLUMNS[0]
    records = trained.asset_materializations_for_node("model_evaluation")[-1].metadata["records"]
    assert str(records.value).endswith("model_evaluation")  # a folder, not the records


# -- the incumbent production model --------------------------------------------------------------


class _Log:
    def __init__(self):
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def test_the_alias_is_resolved_once_and_production_is_loaded_by_that_version(monkeypatch):
    """The version the alias named as the run started is the one loaded, by its number: a
    promotion meanwhile (the alias now naming version 4) cannot mix two versions."""
    from types import SimpleNamespace

    from leap_pipeline.orchestration import night_evaluation

    named = SimpleNamespace(version="3", tags={"evaluation_day": "2026-01-09"})
    monkeypatch.setattr(registry, "production_version", lambda *a, **k: named)
    loaded = []

    def load(uri, version=None):  # what the registry holds once the alias has moved on to 4
        loaded.append(version)
        return f"model {version or '4'}", version or "4"

    monkeypatch.setattr(registered, "load_registered", load)  # where the step reads it
    incumbent = night_evaluation.production_incumbent(_Log())
    assert loaded == ["3"]
    assert (incumbent.version, incumbent.model) == ("3", "model 3")
    assert incumbent.day == dt.date(2026, 1, 9) and not incumbent.unusable


def test_a_production_model_that_cannot_load_or_predict_is_no_incumbent(monkeypatch):
    """Any failure, not only ModelArtifactError, leaves no usable incumbent, logged with its
    reason: each night is gated on the floor alone, saying why."""
    from types import SimpleNamespace

    from leap_pipeline.orchestration import night_evaluation

    named = SimpleNamespace(version="3", tags={"evaluation_day": "2026-01-09"})
    monkeypatch.setattr(registry, "production_version", lambda *a, **k: named)

    def load(uri, version=None):
        raise TypeError("a crafted file's field")

    monkeypatch.setattr(registered, "load_registered", load)  # where the step reads it
    log = _Log()
    incumbent = night_evaluation.production_incumbent(log)
    assert incumbent.model is None and "version 3 cannot be loaded (TypeError" in log.warnings[0]
    gate = night_evaluation.night_gate(0.5, incumbent, NIGHT, None, 0.3, 0.02, log)
    assert gate.passed and gate.production_w20 is None
    assert "version 3 cannot be loaded" in gate.reason and "not compared" in gate.reason

    class Broken:
        def predict(self, features):
            raise IndexError("a split past the feature count")

    loads = night_evaluation.Incumbent("3", NIGHT - dt.timedelta(days=1), SimpleNamespace(
        cascade=Broken()))  # fmt: skip
    rows = pl.DataFrame({name: [1.0] for name in night_evaluation.FEATURE_COLUMNS})
    gate = night_evaluation.night_gate(0.5, loads, NIGHT, rows, 0.3, 0.02, log)
    assert gate.passed and "cannot predict" in gate.reason and "IndexError" in gate.reason


def test_a_broken_production_model_does_not_hold_later_nights_back(fleet, monkeypatch):
    """With production failing to load (here with a plain ValueError), a night still registers
    a new version, passes the floor, says why production was not its comparison, and replaces
    it when promotion is asked for."""

    assert _train(fleet, promote=True).success  # a production version to break
    before = registry.production_version()
    assert before is not None

    def load(uri, version=None):
        raise ValueError("cascade.json: a field no check refused")

    monkeypatch.setattr(registered, "load_registered", load)  # where the step reads it
    result = _train(fleet, promote=True, lookup_min_support=11)
    assert result.success
    record = night_record(result, "model_evaluation", NIGHT)
    assert not record["reused_version"] and record["gate_passed"]
    broken = f"production version {before.version} cannot be loaded (ValueError"
    assert broken in record["gate_reason"]
    assert str(registry.production_version().version) == record["version"]


def test_the_slice_check_names_each_slice_below_the_bar_and_judges_none_too_small():
    """ML Test Score M6 and M7: every hardware type, frequency band and history group (the long
    tail and the cold starts among them) is held to the whole day's w20 minus the gap."""
    import dagster as dg

    from leap_pipeline.modeling.evaluation import SLICE_MAX_GAP, SLICE_MIN_ATTEMPTS
    from leap_pipeline.orchestration.night_checks import slice_check

    rows = [
        ("hardware_type", "T4", 400, 0.70), ("hardware_type", "H100-SXM", 300, 0.45),
        ("band", "head", 600, 0.75), ("band", "tail", 150, 0.40),
        ("history", "cold", SLICE_MIN_ATTEMPTS - 1, 0.05),  # too few to judge
        ("history", "known", 500, 0.72),
    ]  # fmt: skip
    breakdown = pl.DataFrame(
        [{"by": b, "group": g, "model": m, "attempts": float(n), "w20": w}
         for b, g, n, w in rows for m in ("published", "lookup")]
    )  # fmt: skip
    overall = 0.70
    check = slice_check(NIGHT, breakdown, overall)
    assert check.check_name == "slice_quality" and not check.passed
    assert check.severity == dg.AssetCheckSeverity.WARN
    below = str(check.metadata["below"].value)
    assert "band=tail" in below and "hardware_type=H100-SXM" in below  # 0.40, 0.45 < 0.50
    assert "cold" not in below and "T4" not in below
    assert overall - SLICE_MAX_GAP == pytest.approx(0.50)
    lifted = breakdown.with_columns(w20=pl.max_horizontal("w20", pl.lit(0.5)))
    assert slice_check(NIGHT, lifted, overall).passed


@pytest.mark.parametrize(
    ("error_code", "message", "absent"),
    [
        ("RESOURCE_DOES_NOT_EXIST", "Registered Model with name=leap not found", True),
        ("INVALID_PARAMETER_VALUE", "Registered model alias production not found.", True),
        ("TEMPORARILY_UNAVAILABLE", "503 Service Unavailable", False),
        ("INTERNAL_ERROR", "API request failed: Max retries exceeded (read timeout)", False),
        ("UNAUTHENTICATED", "401 Unauthorized", False),
        ("PERMISSION_DENIED", "403 Forbidden", False),
        ("INVALID_PARAMETER_VALUE", "Invalid alias name", False),
    ],
)
def test_only_does_not_exist_reads_as_absent(monkeypatch, tmp_path, error_code, message, absent):
    """A registry read that fails with anything but "does not exist" raises instead of
    answering "no production model", "no pin" or "no night trained"."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import ErrorCode

    from leap_pipeline.modeling.registry_errors import RegistryUnavailable

    def failing(*args, **kwargs):
        raise MlflowException(message, error_code=ErrorCode.Value(error_code))

    # a store of its own: a client made with none would create ./mlflow.db in the checkout
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    for method in ("get_model_version_by_alias", "get_registered_model", "search_model_versions"):
        monkeypatch.setattr(MlflowClient, method, failing)
    reads = (registry.production_version, alias_records.pinned, registry.registered_nights)
    for read in reads:
        if absent:
            assert read() in (None, {})
        else:
            with pytest.raises(RegistryUnavailable, match=error_code):
                read()


def test_a_registry_blip_at_the_decision_never_undoes_a_pinned_rollback(fleet, monkeypatch):
    """The pin is read at the nightly decision; with the registry answering 503 there, the
    decision fails and the alias and the pin stay where a person put them (the pin used to read
    as absent, and the passing night moved the alias over the rollback)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import ErrorCode

    first = _train(fleet, promote=True, lookup_min_support=5)
    older = night_record(first, "model_evaluation", NIGHT)["version"]
    registry.promote(older, reason="rollback: a bad night", actor="pytest")
    alias_records.pin(older, reason="rollback: a bad night", actor="pytest")
    try:
        with monkeypatch.context() as blip:

            def unavailable(*args, **kwargs):
                raise MlflowException(
                    "503 Service Unavailable", ErrorCode.Value("TEMPORARILY_UNAVAILABLE")
                )

            blip.setattr(MlflowClient, "get_registered_model", unavailable)
            blipped = _train(fleet, promote=True, lookup_min_support=8)
        assert not blipped.success
        failures = [
            event.event_specific_data.error.to_string()
            for event in blipped.all_events
            if event.is_step_failure
        ]
        assert failures and all("RegistryUnavailable" in failure for failure in failures)
        assert str(registry.production_version().version) == older
        assert alias_records.pinned()["version"] == older
    finally:
        alias_records.unpin()
