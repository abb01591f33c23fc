"""leap_serving.Ranker: hand-checked rankings, every failure as a reason, parity, reloads."""

import datetime as dt
import json
import re
import threading

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling import registry
from leap_pipeline.modeling.night_store import save_trained
from leap_pipeline.modeling.selection import fit_models
from leap_pipeline.orchestration.definitions import materialize_days
from leap_pipeline.settings import MODEL_NAME_ENV
from leap_serving.decide.launch_fields import check_job
from leap_serving.decide.ranker import Ranker
from leap_serving.decide.results import Ranking
from leap_serving.launch.features import FEATURE_COLUMNS, expand_candidates, launch_matrix
from leap_serving.launch.rows import CandidateRows
from leap_serving.model.compiled import CompiledCascade

SOURCE = "simulator:seed=3,scale=0.02"
FIRST, NIGHT = dt.date(2026, 1, 1), dt.date(2026, 1, 10)
TOMORROW = NIGHT + dt.timedelta(days=1)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A model trained on days 1-9 and shipping the snapshot of day 10, plus day 11's rows."""
    root = tmp_path_factory.mktemp("served")
    warehouse = root / "leap.duckdb"
    materialize_days(FIRST, TOMORROW, source=SOURCE, warehouse=str(warehouse), log_level="WARNING")
    with open_warehouse(warehouse, read_only=True) as wh:
        models = fit_models(wh.read("feature_table", FIRST, NIGHT - dt.timedelta(days=1)), NIGHT)
        snapshot = wh.read("history_snapshot", NIGHT, NIGHT).drop("ds")
        specs = wh.read("hardware_specs", NIGHT, NIGHT).drop("ds")
        tomorrow = wh.read("job_attempts", TOMORROW, TOMORROW).sort("attempt_id")
        features = wh.read("feature_table", TOMORROW, TOMORROW).sort("attempt_id")
    save_trained(models, root / "models", snapshot, specs, "fast")
    return {"folder": root / "models" / "cascade", "root": root, "models": models,
            "attempts": tomorrow, "features": features}  # fmt: skip


@pytest.fixture(scope="module")
def ranker(served):
    return Ranker(str(served["folder"]), check_interval_s=float("inf"), wait=True)


def _job(served, i=0) -> tuple[dict, list[str]]:
    row = served["attempts"].row(i, named=True)
    candidates = row.pop("candidate_hardware")
    row.pop("family")  # the pipeline's column; a launcher sends only the job name
    return row, candidates


def _with_predictions(ranker, monkeypatch, throughput: dict[str, float]):
    """Make the model predict the given throughput per hardware type (hand-checked cases)."""
    compiled = ranker._loaded.compiled
    real = compiled.predict

    def predict(X):
        _, bins, probability = real(X)
        return np.log(np.array(order.pop(0))), bins, probability

    order = []
    original = ranker._score

    def score(prepared, loaded, results):
        for _, _, types, _ in prepared:
            order.append([throughput[t] for t in types])
        return original(prepared, loaded, results)

    monkeypatch.setattr(compiled, "predict", predict)
    monkeypatch.setattr(ranker, "_score", score)


def _cost(ranker, hardware_type, trainers, requested=None):
    spec = ranker._loaded.specs[hardware_type]
    host = spec["devices_per_host"]
    per_host = host if requested is None else min(requested, host)
    return spec["hourly_cost_usd"] * per_host * trainers


def test_a_cheaper_type_predicted_nearly_as_fast_wins(ranker, served, monkeypatch):
    job, _ = _job(served)
    job["embedding_sharding"] = "row"  # its tables fit a 24 GB device only sharded (memory fit)
    cheap, dear = "A10G", "A100-80GB"  # non-premium, the first much cheaper per hour
    assert _cost(ranker, cheap, 1) < _cost(ranker, dear, 1) * 0.8
    _with_predictions(ranker, monkeypatch, {cheap: 950.0, dear: 1000.0})
    result = ranker.rank(job, [dear, cheap])
    assert result.preference_list == [cheap, dear]
    best = result.ranking[0]
    trainers = job["num_trainers"]
    requested = job["requested_devices_per_host"]
    assert best.cost_per_hour == pytest.approx(_cost(ranker, cheap, trainers, requested))
    assert best.throughput_per_cost == pytest.approx(950.0 * 3600 / best.cost_per_hour)
    assert [c.rank for c in result.ranking] == [1, 2]


def test_premium_stays_only_when_it_pays_for_itself(ranker, served, monkeypatch):
    job, _ = _job(served)
    job["embedding_sharding"] = "row"  # its tables fit an 80 GB device only sharded (memory fit)
    base, premium = "H100-SXM", "MI325X"
    price_ratio = _cost(ranker, premium, 1) / _cost(ranker, base, 1)
    # twice as fast at about 1.5x the price: more samples per dollar, so it stays
    assert 1.3 < price_ratio < 1.6
    _with_predictions(ranker, monkeypatch, {base: 1000.0, premium: 2000.0})
    kept = ranker.rank(job, [base, premium])
    assert kept.preference_list == [premium, base] and not kept.removed
    # only 10% faster: fewer samples per dollar, removed with the reason
    _with_predictions(ranker, monkeypatch, {base: 1000.0, premium: 1100.0})
    removed = ranker.rank(job, [base, premium])
    assert removed.preference_list == [base]
    assert removed.removed[0].hardware_type == premium
    assert "premium type removed" in removed.removed[0].removed_reason
    assert removed.removed[0].rank is None


@pytest.mark.parametrize(
    ("change", "candidates", "reason"),
    [
        ({"num_trainers": None}, None, "job.num_trainers is missing"),
        ({"batch_size": -4}, None, "job.batch_size=-4 must be positive"),
        ({"batch_size": "many"}, None, "job.batch_size='many' is not a valid Int64"),
        ({"num_readers": float("nan")}, None, "is not a finite number"),
        ({"precision": 16}, None, "job.precision=16 is not a valid String"),
        ({"ds": "yesterday"}, None, "job.ds='yesterday' is not a date"),
        ({"ds": "2026-01-10"}, None, "is not after the model's history snapshot"),
        ({}, [], "no candidate hardware types"),
        ({}, ["TPU-v9"], "unknown hardware type(s) ['TPU-v9']"),
        ({}, "A10G", "candidates must be a list"),
        ({}, [3], "candidate 3 is not a hardware type name"),
    ],
)
def test_every_failure_is_an_empty_list_with_its_reason(ranker, served, change, candidates, reason):
    job, default = _job(served)
    result = ranker.rank({**job, **change}, default if candidates is None else candidates)
    assert result.ranking == [] and reason in result.reason


def test_a_job_that_is_not_a_mapping_and_a_model_that_cannot_load(ranker, tmp_path):
    assert "must be a mapping" in ranker.rank(None, ["A10G"]).reason
    broken = Ranker(str(tmp_path / "nothing-here"), check_interval_s=float("inf"), wait=True)
    result = broken.rank({"job_name": "x"}, ["A10G"])
    assert result.ranking == [] and "cannot be loaded" in result.reason


def test_unknown_fields_are_ignored_and_reported(ranker, served):
    job, candidates = _job(served)
    result = ranker.rank({**job, "team": "ads", "priority": 3}, candidates)
    assert result.reason is None and result.ranking
    assert result.ignored_fields == ["priority", "team"]


def test_switched_off_model_types_get_an_empty_list(served, tmp_path):
    job, candidates = _job(served)
    switches = tmp_path / "switches.json"
    ranker = Ranker(
        str(served["folder"]), switches_path=switches, check_interval_s=float("inf"), wait=True
    )
    assert ranker.rank(job, candidates).ranking
    switches.write_text(json.dumps({"model_types": {job["model_type"]: False}}))
    off = ranker.rank(job, candidates)
    assert off.ranking == [] and "switched off" in off.reason
    switches.write_text("{not json")  # a broken file keeps the last good switches
    assert ranker.rank(job, candidates).ranking == []
    switches.write_text(json.dumps({"default": True}))
    assert ranker.rank(job, candidates).ranking
    # "false" as a string is not a boolean (bool("false") is True): the file is refused and
    # the last good switches stay, until the file says false as JSON does
    switches.write_text(json.dumps({"default": "false"}))
    assert ranker.rank(job, candidates).ranking
    switches.write_text(json.dumps({"model_types": {job["model_type"]: "false"}}))
    assert ranker.rank(job, candidates).ranking
    switches.write_text(json.dumps({"default": False}))
    assert ranker.rank(job, candidates).ranking == []


@pytest.mark.parametrize(
    ("text", "field"),
    [('{"default": "false"}', "default"), ('{"model_types": {"m": 0}}', "model_types.'m'"),
     ('{"model_types": []}', "model_types"), ('[true]', "not an object"),
     ('{"defualt": false}', "not an object")],
)  # fmt: skip
def test_a_switches_file_that_is_not_booleans_is_refused_naming_the_field(text, field):
    from leap_serving.decide.switches import read_switches

    with pytest.raises(ValueError, match=re.escape(field)):
        read_switches(text)


def test_served_features_equal_the_training_features(ranker, served):
    """Rank tomorrow's attempts on the types they ran on: the serving path's feature rows are
    the feature table's, byte for byte, and so are the predictions."""
    attempts, stored = served["attempts"].head(30), served["features"].head(30)
    loaded = ranker._loaded
    captured = []
    real = loaded.compiled.predict

    def spy(X):
        captured.append(X.copy())
        return real(X)

    loaded.compiled.predict = spy
    try:
        for i in range(attempts.height):
            row = attempts.row(i, named=True)
            ranker.rank({k: v for k, v in row.items() if k != "candidate_hardware"},
                        [row["hardware_type"]])  # fmt: skip
    finally:
        del loaded.compiled.predict
    served_rows = np.vstack(captured)
    trained_rows = stored.select(FEATURE_COLUMNS).to_numpy()
    assert served_rows.tobytes() == trained_rows.tobytes()
    direct = served["models"].cascade.predict(trained_rows)
    assert np.array_equal(
        CompiledCascade(served["models"].cascade).predict(trained_rows)[0], direct
    )


def test_candidate_rows_extract_what_a_frame_of_the_same_launches_does(ranker, served):
    """Serving reads the launches' fields without a frame (``CandidateRows``): several launches
    in one call, optional fields missing, give the frame path's matrix byte for byte."""
    loaded = ranker._loaded
    launches = []
    for i, dropped in [(0, ()), (1, ("num_readers", "optimizer", "package_version")),
                       (2, ("model_definition", "hash_size", "precision")), (3, ())]:  # fmt: skip
        job, candidates = _job(served, i)
        job = {k: v for k, v in job.items() if k not in dropped}
        launch, types, _ = check_job(job, candidates, loaded, None)
        launches.append((launch, types))
    frame = pl.concat([expand_candidates(launch, types) for launch, types in launches])
    model = loaded.model
    from_frame = launch_matrix(frame, model.spec_table, model.history_index)
    from_rows = launch_matrix(CandidateRows(launches), model.spec_table, model.history_index)
    assert from_rows.shape == (frame.height, len(FEATURE_COLUMNS))
    assert np.isnan(from_rows).any()  # the dropped fields are missing, not zero
    assert from_rows.tobytes() == from_frame.tobytes()


def test_batch_form_equals_one_at_a_time(ranker, served):
    jobs = [_job(served, i) for i in range(6)]
    jobs.append(({"job_name": "broken"}, ["A10G"]))
    batch = ranker.rank_many(jobs)
    single = [ranker.rank(job, candidates) for job, candidates in jobs]
    assert [r.to_dict() for r in batch] == [r.to_dict() for r in single]
    assert batch[-1].ranking == [] and batch[0].ranking


_values = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**12), st.floats(allow_nan=True),
    st.text(max_size=12), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip
_fields = st.sampled_from(
    ["job_name", "model_type", "num_trainers", "batch_size", "num_readers", "precision",
     "hash_size", "seq_len", "model_definition", "ds", "activation_checkpointing", "extra"]
)  # fmt: skip


@pytest.mark.parametrize(
    "text", ["--5", "²", "-", "5-", "1e3", "0x10", "٣", "7" * 5000, "9223372036854775808"]
)
def test_a_malformed_integer_is_refused_naming_the_field_not_a_bug(ranker, served, text):
    job, candidates = _job(served)
    result = ranker.rank({**job, "num_trainers": text}, candidates)
    assert result.ranking == [] and result.reason_code != "internal_error", result.reason
    assert "num_trainers" in result.reason


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    changes=st.dictionaries(_fields, _values, max_size=5),
    candidates=st.one_of(
        st.none(), st.text(max_size=5), st.lists(st.one_of(st.text(max_size=8), st.integers(),
        st.sampled_from(["A10G", "H200", "T4", "MI300X"])), max_size=6),
    ),
    as_mapping=st.booleans(),
)  # fmt: skip
def test_rank_never_raises_on_malformed_input(ranker, served, changes, candidates, as_mapping):
    job, _ = _job(served)
    job = {**job, **changes} if as_mapping else list(changes.items())
    result = ranker.rank(job, candidates)
    assert isinstance(result, Ranking)
    assert result.reason_code != "internal_error", result.reason  # a refusal, never a bug
    assert (result.reason is None) == bool(result.ranking)
    for c in result.ranking:
        assert np.isfinite(c.predicted_throughput) and c.throughput_per_cost > 0


def test_the_ranker_follows_the_pointer(served, tmp_path, monkeypatch):
    versions = _two_registered_versions(served, tmp_path, monkeypatch, "leap-ranker-test")
    # no canary: a new version serves at once (the canary's own tests are further down)
    ranker = Ranker(
        registry.model_uri(), check_interval_s=float("inf"), wait=True, canary_launches=0
    )
    job, candidates = _job(served)
    assert ranker.rank(job, candidates).model_version == versions[0]
    assert ranker.reload() is False  # the pointer did not move: nothing to load
    registry.promote(versions[1], reason="test", actor="pytest")
    assert ranker.reload() is True
    assert ranker.rank(job, candidates).model_version == versions[1]


def test_the_constructor_returns_at_once_and_ranks_after_the_model_is_ready(served, monkeypatch):
    from leap_serving.model.published import LeapModel

    gate = threading.Event()
    real = LeapModel.load

    def slow_load(*args, **kwargs):
        gate.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(LeapModel, "load", slow_load)
    ranker = Ranker(str(served["folder"]), check_interval_s=float("inf"))
    job, candidates = _job(served)
    early = ranker.rank(job, candidates)
    assert early.ranking == [] and early.reason == "model loading"
    assert early.reason_code == "model_loading"
    gate.set()
    assert ranker.wait_ready(10)
    assert ranker.rank(job, candidates).ranking
    stats = ranker.stats()
    assert stats["answers"] == 2 and stats["ranked"] == 1
    assert stats["empty"] == {"model_loading": 1} and stats["models_loaded"] == 1


def test_a_folder_model_reloads_only_when_its_manifest_changes(served, tmp_path):
    folder = tmp_path / "night"
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "fast")
    ranker = Ranker(
        str(folder / "cascade"), check_interval_s=float("inf"), wait=True, canary_launches=0
    )
    assert ranker.reload() is False and ranker.reload() is False  # same manifest: no reload
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "fast")
    assert ranker.reload() is False  # published again byte for byte: the same model
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "paper")
    assert ranker.reload() is True  # a new publication (its metadata differs)
    assert ranker.stats()["models_loaded"] == 2


def test_a_refused_folder_keeps_the_model_being_served(served, tmp_path):
    folder = tmp_path / "night"
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "fast")
    ranker = Ranker(str(folder / "cascade"), check_interval_s=float("inf"), wait=True)
    job, candidates = _job(served)
    before = ranker.rank(job, candidates)
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "paper")
    snapshot = (folder / "cascade").resolve() / "history_snapshot.parquet"
    snapshot.write_bytes(snapshot.read_bytes()[:-10])  # a torn file behind a valid manifest
    assert ranker.reload() is False
    stats = ranker.stats()
    assert (
        stats["models_refused"] == 1
        and "history_snapshot.parquet has sha256" in (stats["load_error"])
    )
    assert ranker.rank(job, candidates).to_dict() == before.to_dict()


def test_a_bug_is_logged_with_its_traceback_and_counted(ranker, served, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(ranker, "_order", broken)
    job, candidates = _job(served)
    before = ranker.stats()["empty"].get("internal_error", 0)
    result = ranker.rank(job, candidates)
    assert result.reason_code == "internal_error" and "ZeroDivisionError" in result.reason
    assert ranker.stats()["empty"]["internal_error"] == before + 1
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)


def test_the_cost_counts_the_devices_the_oracle_and_routing_count(ranker, served):
    """One definition of a job's devices: the ranker's cost per hour over the type's hourly price
    is the oracle's device count for the same attempt and type, which the routing simulation
    charges."""
    from leap_pipeline.simulation import SimulatedFleet

    oracle = SimulatedFleet(seed=3, scale=0.02).oracle()
    attempts = served["attempts"].head(40)
    checked = partial = 0
    hosts = {t: s["devices_per_host"] for t, s in ranker._loaded.specs.items()}
    for row in attempts.iter_rows(named=True):
        job = {k: v for k, v in row.items() if k not in ("candidate_hardware", "family")}
        result = ranker.rank(job, row["candidate_hardware"])
        truth = oracle.true_medians([row["attempt_id"]], row["candidate_hardware"])
        devices = dict(zip(truth["hardware_type"], truth["devices"], strict=True))
        for c in result.ranking + result.removed:
            price = ranker._loaded.specs[c.hardware_type]["hourly_cost_usd"]
            assert c.cost_per_hour / price == pytest.approx(devices[c.hardware_type])
            checked += 1
        # a job asking for fewer devices than a host holds pays for what it asks for
        partial += row["requested_devices_per_host"] < max(
            hosts[t] for t in row["candidate_hardware"]
        )
    assert checked > 40 and partial > 0


def _snapshot_and_specs(served):
    with open_warehouse(served["root"] / "leap.duckdb", read_only=True) as wh:
        return (
            wh.read("history_snapshot", NIGHT, NIGHT).drop("ds"),
            wh.read("hardware_specs", NIGHT, NIGHT).drop("ds"),
        )


def test_stats_say_how_old_the_model_is_and_which_libraries_changed(served, tmp_path, caplog):
    import importlib.metadata

    folder = tmp_path / "night"
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "fast")
    metadata = folder.resolve() / "cascade"
    ranker = Ranker(str(folder / "cascade"), check_interval_s=float("inf"), wait=True)
    stats = ranker.stats()
    expected_age = (dt.datetime.now(dt.UTC).date() - NIGHT).days
    assert stats["model_age_days"] == expected_age and stats["model_stale"] is True
    assert stats["dependency_drift"] == {}
    assert "days past its history snapshot" in caplog.text
    saved = json.loads((metadata.resolve() / "metadata.json").read_text())["package_versions"]
    assert saved["scikit-learn"] == importlib.metadata.version("scikit-learn")
    from leap_serving.model.published import dependency_drift

    drift = dependency_drift({"package_versions": {**saved, "numpy": "0.0.1"}})
    assert drift == {"numpy": ("0.0.1", importlib.metadata.version("numpy"))}


# an architecture far from the simulated fleet's recommenders: a 200-layer language model
FAR_ARCHITECTURE = json.dumps({"layers": [
    {"op": "transformer", "layers": 200, "d_model": 16384, "heads": 128, "ffn_mult": 4},
    {"op": "lm_head", "vocab": 256000},
]})  # fmt: skip


def test_a_novel_architecture_is_flagged_and_ranked_by_the_roofline_prior(ranker, served):
    job, candidates = _job(served)
    known = ranker.rank(job, candidates)
    assert known.novelty["novel"] is False and known.order == "model"
    assert known.novelty["nearest_model_type"] == job["model_type"]

    # 644B parameters fit a device only split 128 ways, with recomputation (memory fit)
    novel_job = {**job, "model_type": "never-seen", "model_definition": FAR_ARCHITECTURE,
                 "seq_len": 4096, "num_trainers": 16, "tensor_parallel": 8,
                 "pipeline_parallel": 16, "batch_size": 1,
                 "activation_checkpointing": True}  # fmt: skip
    novel = ranker.rank(novel_job, candidates)
    assert novel.reason is None and novel.order == "roofline_prior"
    assert novel.novelty["novel"] is True
    assert novel.novelty["distance"] > novel.novelty["threshold"]
    assert novel.novelty["nearest_model_type"] in served["models"].novelty.model_types
    assert "novel architecture" in novel.order_reason
    # best first by the prior's samples per dollar, whatever the model predicted
    prior = [c.roofline_throughput / c.cost_per_hour for c in novel.ranking]
    assert prior == sorted(prior, reverse=True)
    assert novel.to_dict()["order"] == "roofline_prior"


def test_every_candidate_carries_its_calibrated_interval(ranker, served):
    """The published model ships conformal intervals calibrated on its selection day; the
    Ranker serves them per candidate, and on the next day they cover about their level."""
    from leap_pipeline.modeling.evaluation import interval_scores
    from leap_serving.model.intervals import history_class

    intervals = served["models"].intervals
    assert intervals is not None and intervals.level == 0.8
    job, candidates = _job(served)
    result = ranker.rank(job, candidates)
    assert result.interval_level == 0.8 and result.to_dict()["interval_level"] == 0.8
    launch = CandidateRows([(job, [c.hardware_type for c in result.ranking])])
    loaded = ranker._loaded.model
    X = launch_matrix(launch, loaded.spec_table, loaded.history_index)
    width = intervals.half_width([c.hardware_type for c in result.ranking], X)
    for c, w in zip(result.ranking, width, strict=True):
        assert c.throughput_low < c.predicted_throughput < c.throughput_high
        assert np.log(c.throughput_high / c.predicted_throughput) == pytest.approx(w)
    # day 11, which neither the model nor its calibration saw: coverage near 80%, and a
    # family never seen gets a wider interval than one the fleet runs often
    features = served["features"]
    published = np.exp(served["models"].published.predict(
        features.select(FEATURE_COLUMNS).to_numpy()))  # fmt: skip
    scores = interval_scores(served["models"], features, published)
    assert 0.65 <= scores["coverage"] <= 0.95
    assert scores["width_median"] > 0
    classes = history_class(features.select(FEATURE_COLUMNS).to_numpy())
    assert sum(v["rows"] for v in scores["by_history"].values()) == features.height
    assert len(np.unique(classes)) >= 2
    widths = intervals.by_history  # a family with runs on the type is the best known
    assert len(widths) >= 2 and max(widths, key=widths.get) in ("cold", "new type")


def test_a_risk_aware_ranking_orders_by_the_intervals_lower_end(served, ranker):
    cautious = Ranker(str(served["folder"]), check_interval_s=float("inf"), wait=True,
                      rank_by="lower")  # fmt: skip
    job, candidates = _job(served)
    median, lower = ranker.rank(job, candidates), cautious.rank(job, candidates)
    assert median.order == "model" and lower.order == "model_lower"
    assert sorted(median.preference_list) == sorted(lower.preference_list)
    per_dollar = [c.throughput_low / c.cost_per_hour for c in lower.ranking]
    assert per_dollar == sorted(per_dollar, reverse=True)
    # the same candidates and values, only the order read differs
    by_type = {c.hardware_type: c for c in median.ranking}
    for c in lower.ranking:
        assert c.throughput_low == by_type[c.hardware_type].throughput_low
    with pytest.raises(ValueError, match="rank_by='lowest'"):
        Ranker(str(served["folder"]), rank_by="lowest")


def test_a_ranking_names_the_unmeasured_candidate_worth_one_trial_run(served, ranker):
    """Over a day's launches: a candidate named worth a trial is never the top one, never one
    the family has runs on, overlaps the top one's interval and carries its expected saving."""
    from leap_serving.decide.exploration import TRIAL_MIN_SAVING

    attempts = served["attempts"]
    jobs = [_job(served, i) for i in range(attempts.height)]
    rankings = ranker.rank_many(jobs, launch_date=TOMORROW)
    named = [r for r in rankings if r.worth_a_trial is not None]
    assert named, "no launch of a day had a candidate worth a trial"
    loaded = ranker._loaded.model
    for (job, _), r in zip(jobs, rankings, strict=True):
        trial = r.worth_a_trial
        if trial is None:
            continue
        assert r.to_dict()["worth_a_trial"] == trial
        top, candidate = (
            r.ranking[0],
            next(c for c in r.ranking if c.hardware_type == trial["hardware_type"]),
        )
        assert candidate.rank > 1 and trial["expected_saving"] >= TRIAL_MIN_SAVING
        assert candidate.throughput_high / candidate.cost_per_hour >= (
            top.throughput_low / top.cost_per_hour
        )
        X = launch_matrix(CandidateRows([(job, [candidate.hardware_type])]),
                          loaded.spec_table, loaded.history_index)  # fmt: skip
        assert X[0, FEATURE_COLUMNS.index("hist_hw_count")] == 0.0
        assert candidate.hardware_type in trial["reason"]


def test_the_expected_saving_of_a_trial_is_the_normal_expectation():
    from leap_serving.decide.exploration import Candidate, expected_saving, trial_run

    rng = np.random.default_rng(0)
    for mean, sd in ((-0.2, 0.3), (0.0, 0.1), (0.1, 0.5)):
        draws = rng.normal(mean, sd, size=400_000)
        by_sampling = np.maximum(0.0, 1.0 - np.exp(-draws)).mean()
        assert expected_saving(mean, sd) == pytest.approx(by_sampling, abs=2e-3)
    assert expected_saving(-0.1, 0.0) == 0.0
    top = Candidate("a", 100.0, 80.0, 125.0, measured=True)
    close = Candidate("b", 95.0, 76.0, 119.0, measured=False)
    known = Candidate("c", 98.0, 78.0, 122.0, measured=True)
    apart = Candidate("d", 50.0, 45.0, 55.0, measured=False)  # its best is below a's worst
    assert trial_run([top, close, known, apart], 0.8)["hardware_type"] == "b"
    assert trial_run([top, known, apart], 0.8) is None
    assert trial_run([top], 0.8) is None


def _two_registered_versions(served, tmp_path, monkeypatch, name) -> list[str]:
    """Two registry versions of the served model, the alias on the first."""
    monkeypatch.setenv(MODEL_NAME_ENV, name)
    registry.configure_tracking(tmp_path / "mlflow")
    versions = []
    for _ in range(2):
        _, version = registry.log_candidate(
            artifact_folder=served["folder"], day=NIGHT, window=served["models"].window,
            run_kind="test", params={}, metrics={"w20": 0.5}, files=[],
        )  # fmt: skip
        versions.append(version)
    registry.promote(versions[0], reason="test", actor="pytest")
    return versions


@pytest.mark.parametrize("k", [4, 0])
def test_a_new_version_serves_only_after_its_canary(served, tmp_path, monkeypatch, k):
    """canary_launches=k: after the pointer moves, the next k launches are answered by the
    version serving, exactly as they would be without a candidate, while the new one scores
    them in shadow; the launch after them is the new one's. k=0: it serves at once."""
    old, new = _two_registered_versions(served, tmp_path, monkeypatch, "leap-canary-test")
    ranker = Ranker(
        registry.model_uri(), check_interval_s=float("inf"), wait=True, canary_launches=k
    )
    jobs = [_job(served, i) for i in range(k + 2)]
    before = [ranker.rank(*job).to_dict() for job in jobs]
    assert {b["model_version"] for b in before} == {old} and all(b["ranking"] for b in before)
    assert ranker.stats()["canary"] is None  # the first model a Ranker loads serves at once
    registry.promote(new, reason="test", actor="pytest")
    assert ranker.reload() is (k == 0)
    if k:
        assert ranker.stats()["canary"] == {
            "version": new, "launches_seen": 0, "needed": k, "failures": 0
        }  # fmt: skip
        assert ranker.reload() is False  # on canary already: not loaded again
    for i, job in enumerate(jobs[:k]):
        # a launch refused for its input says nothing of the model: it does not count
        assert ranker.rank({"job_name": "broken"}, ["A10G"]).reason_code == "invalid_job"
        assert ranker.rank(*job).to_dict() == before[i]
        if i < k - 1:
            assert ranker.stats()["canary"]["launches_seen"] == i + 1
    after = ranker.rank(*jobs[k])
    assert after.to_dict() == {**before[k], "model_version": new}  # the same artifacts
    stats = ranker.stats()
    assert stats["canary"] is None and stats["model_version"] == new
    assert stats["models_loaded"] == 2 and stats["models_refused"] == 0
    assert stats["load_error"] is None


@pytest.mark.parametrize("failure", ["non-finite", "raises"])
def test_a_new_version_that_fails_its_canary_is_refused_and_the_old_one_keeps_serving(
    served, tmp_path, monkeypatch, failure
):
    """A night's model that predicts no finite throughput (or fails) on some launches: the
    callers never see it, and after its canary it is refused naming it and those launches."""
    from leap_serving.decide.results import shown

    old, new = _two_registered_versions(served, tmp_path, monkeypatch, "leap-canary-bad")
    k = 4
    ranker = Ranker(
        registry.model_uri(), check_interval_s=float("inf"), wait=True, canary_launches=k
    )
    jobs = [_job(served, i) for i in range(k + 2)]
    names = [shown(job["job_name"]) for job, _ in jobs]
    assert len(set(names)) == len(names)
    before = [ranker.rank(*job).to_dict() for job in jobs]
    registry.promote(new, reason="test", actor="pytest")
    assert ranker.reload() is False
    compiled = ranker._canary.loaded.compiled
    real = compiled.predict
    calls = []

    def broken(X):  # the first and third launches of the canary
        calls.append(len(X))
        log_q, bins, probability = real(X)
        if len(calls) % 2:
            if failure == "raises":
                raise FloatingPointError("a broken night")
            log_q = np.full_like(log_q, np.nan)
        return log_q, bins, probability

    monkeypatch.setattr(compiled, "predict", broken)
    for i, job in enumerate(jobs[:k]):
        assert ranker.rank(*job).to_dict() == before[i]  # the caller sees nothing of it
    assert len(calls) == k
    stats = ranker.stats()
    assert stats["canary"] is None and stats["model_version"] == old
    assert stats["models_refused"] == 1 and stats["models_loaded"] == 1
    error = stats["load_error"]
    assert f"version {new} refused by its canary" in error and f"2 of {k} launches" in error
    assert f"still serving version {old}" in error
    assert ("internal_error" if failure == "raises" else "prediction") in error
    assert names[0] in error and names[2] in error
    assert names[1] not in error and names[3] not in error
    # the old version keeps serving, and the refused one is not tried again while it is named
    assert [ranker.rank(*job).to_dict() for job in jobs[k:]] == before[k:]
    assert ranker.reload() is False and ranker.stats()["canary"] is None and len(calls) == k


def test_a_canary_judged_from_many_threads_promotes_once(served, tmp_path, monkeypatch):
    """Launches from several threads during a canary: every launch it counts was answered by
    the old version, it is promoted once, and a thread never goes back to the old one."""
    old, new = _two_registered_versions(served, tmp_path, monkeypatch, "leap-canary-threads")
    k = 12
    ranker = Ranker(
        registry.model_uri(), check_interval_s=float("inf"), wait=True, canary_launches=k
    )
    registry.promote(new, reason="test", actor="pytest")
    assert ranker.reload() is False
    seen: dict[int, list] = {}
    errors = []

    def launch(t: int) -> None:
        try:
            seen[t] = [ranker.rank(*_job(served, (t + i) % 8)).model_version for i in range(8)]
        except Exception as exc:  # rank must never raise
            errors.append(exc)

    threads = [threading.Thread(target=launch, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and len(seen) == 4
    answers = [v for t in sorted(seen) for v in seen[t]]
    assert set(answers) <= {old, new} and answers.count(old) >= k
    for versions in seen.values():  # once promoted, for good
        assert versions == sorted(versions, key=lambda v: v == new)
    stats = ranker.stats()
    assert stats["model_version"] == new and stats["canary"] is None
    assert stats["models_loaded"] == 2 and stats["models_refused"] == 0
    assert ranker.rank(*_job(served)).model_version == new


def test_a_canary_ends_when_the_pointer_names_another_version(served, tmp_path):
    """A folder pointer is canaried too; rolled back during the canary, the candidate is dropped
    and never serves, and the version the pointer names again keeps serving."""
    folder = tmp_path / "night"
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "fast")
    ranker = Ranker(
        str(folder / "cascade"), check_interval_s=float("inf"), wait=True, canary_launches=3
    )
    serving = ranker._loaded
    job, candidates = _job(served)
    before = ranker.rank(job, candidates).to_dict()
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "paper")
    assert ranker.reload() is False
    candidate = ranker.stats()["canary"]["version"]
    assert candidate not in (None, serving.stamp)
    assert ranker.rank(job, candidates).to_dict() == before
    assert ranker.stats()["canary"]["launches_seen"] == 1
    save_trained(served["models"], folder, *_snapshot_and_specs(served), "fast")  # rolled back
    assert ranker.reload() is False
    assert ranker.stats()["canary"] is None
    for _ in range(3):
        assert ranker.rank(job, candidates).to_dict() == before
    assert ranker._loaded is serving and ranker.stats()["models_loaded"] == 1


def test_a_new_version_that_ranks_nothing_fails_its_canary_whatever_its_reason(
    served, tmp_path, monkeypatch
):
    """A version whose spec table lacks the launches' candidates answers every launch with an
    empty ranking that blames the launch (``invalid_candidates``), not the model: where the
    serving model ranked, that still fails the canary."""
    import dataclasses

    old, new = _two_registered_versions(served, tmp_path, monkeypatch, "leap-canary-empty")
    k = 3
    ranker = Ranker(
        registry.model_uri(), check_interval_s=float("inf"), wait=True, canary_launches=k
    )
    jobs = [_job(served, i) for i in range(k)]
    before = [ranker.rank(*job).to_dict() for job in jobs]
    registry.promote(new, reason="test", actor="pytest")
    assert ranker.reload() is False
    ranker._canary.loaded = dataclasses.replace(ranker._canary.loaded, specs={})
    for i, job in enumerate(jobs):
        assert ranker.rank(*job).to_dict() == before[i]
    stats = ranker.stats()
    assert stats["canary"] is None and stats["model_version"] == old
    assert stats["models_refused"] == 1
    assert "invalid_candidates" in stats["load_error"]
