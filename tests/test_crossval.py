"""Static evaluation on a small hand-built fleet in the data contract, and the Sia adapter."""

import datetime as dt
import json
import math
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from leap_pipeline.app.cli import main
from leap_pipeline.simulation import SimulatedFleet
from leap_pipeline.studies import selection
from leap_pipeline.studies.crossval import choose_ranking, folds, physics_predict
from leap_pipeline.studies.decisions import cells, decision_regrets, summarize

# the workplace's public data: where LEAP_PUBLIC_DATA says, or beside the project, or at its fixed
# place; the Sia and Lambda tests run when it is found
PUBLIC_PLACES = [
    *([Path(os.environ["LEAP_PUBLIC_DATA"])] if os.environ.get("LEAP_PUBLIC_DATA") else []),
    Path(__file__).parents[2] / "shared" / "data" / "public",
    Path("/work/shared/data/public"),
]
PUBLIC = next((p for p in PUBLIC_PLACES if p.exists()), Path("/nonexistent"))


def public_data(*names: str) -> Path:
    """The folder holding the public data sets ``names``. Without them a test skips, saying why,
    but fails in CI (.ci/run sets LEAP_CI=1): its machine has the data, so a skip would hide it."""
    missing = [name for name in names if not (PUBLIC / name).exists()]
    if missing:
        places = ", ".join(dict.fromkeys(str(p) for p in PUBLIC_PLACES))
        where = f"under {PUBLIC}" if PUBLIC.exists() else f"none of {places} exists"
        message = f"public data absent: {', '.join(missing)} ({where}; or set LEAP_PUBLIC_DATA)"
        if os.environ.get("LEAP_CI"):
            pytest.fail(f"{message}; CI (LEAP_CI) runs these tests on the data")
        pytest.skip(message)
    return PUBLIC


def test_grouped_folds_hold_out_each_group_once():
    rows = pl.DataFrame({"model_type": list("aabbcdd"), "hardware_type": list("xyxyxxy")})
    masks = folds(rows, "leave-model-hardware-out")
    assert len(masks) == 7 and np.sum(masks, axis=0).tolist() == [1] * 7
    by_type = folds(rows, "leave-hardware-out")
    assert sorted(m.sum() for m in by_type) == [3, 4]
    by_model = folds(rows, "leave-model-out")
    assert sorted(m.sum() for m in by_model) == [1, 2, 2, 2]
    assert sum(m.sum() for m in folds(rows, "random")) == 7
    # one fold per model measured on two types or more, holding out half of its types; the
    # other half stays in the history, and model c (one type) is never held out
    partial = folds(rows, "partial-history")
    assert [rows.filter(m)["model_type"].to_list() for m in partial] == [["a"], ["b"], ["d"]]
    with pytest.raises(ValueError, match="split='sideways'"):
        folds(rows, "sideways")


def _decision_rows() -> tuple[pl.DataFrame, pl.DataFrame]:
    """One configuration on three types. ``big`` hosts 8 devices and the job asks for 4 per
    host on 2 trainers: 8 devices paid for; ``small`` and ``mid`` host one device: 2 paid."""
    specs = pl.DataFrame({"hardware_type": ["small", "mid", "big"],
                          "peak_bf16_tflops": [100.0, 50.0, 400.0],
                          "hourly_cost_usd": [1.0, 0.2, 1.0],
                          "devices_per_host": [1.0, 1.0, 8.0]})  # fmt: skip
    rows = pl.DataFrame({"model_type": ["m"] * 3, "num_trainers": [2] * 3, "batch_size": [8] * 3,
                         "requested_devices_per_host": [4, 4, 4],
                         "hardware_type": ["small", "mid", "big"],
                         "throughput": [100.0, 40.0, 300.0]})  # fmt: skip
    return rows, specs


def test_regret_weighs_a_choice_by_what_it_costs_on_the_jobs_devices():
    rows, specs = _decision_rows()
    # cost per sample: small 2/100 = 0.020, mid 0.4/40 = 0.010, big 8/300 = 0.0267
    held = np.array([True, True, False])  # big has been measured; the others are predicted
    guess = {"model": np.array([50.0, 60.0, np.nan]), "blind": np.full(3, np.nan)}
    regrets, models = decision_regrets(cells(rows, specs, held, guess), ["model", "blind"])
    assert models.tolist() == ["m"]  # one decision, of model m
    # the model ranks mid (60) over small (50), and big by its measurement (300): fastest is big
    assert regrets["model"]["fastest"] == pytest.approx([0.0])
    assert regrets["model"]["per_cost"] == pytest.approx([0.0])  # 60 / 0.4 beats 300 / 8
    # no estimate of a held type: the measured big wins the ranking, 2.67x the best cost
    assert regrets["blind"]["per_cost"] == pytest.approx([0.0267 / 0.010 - 1], rel=1e-2)
    # rules read the spec table only: highest peak is big; the best peak per dollar of the
    # devices paid for is mid (50 / 0.4 = 125, against small's 100 / 2 and big's 400 / 8)
    assert regrets["highest_fp16_peak"]["fastest"] == pytest.approx([0.0])
    assert regrets["highest_fp16_peak"]["per_cost"] == pytest.approx([0.0267 / 0.010 - 1],
                                                                       rel=1e-2)  # fmt: skip
    assert regrets["best_fp16_peak_per_dollar"]["fastest"] == pytest.approx([300 / 40 - 1])
    assert regrets["best_fp16_peak_per_dollar"]["per_cost"] == pytest.approx([0.0])
    # a per-device price (what crossval used to divide by) would rank big first per dollar
    per_device = specs.with_columns(devices_per_host=pl.lit(1.0))
    table = cells(rows, per_device, held, guess)
    assert decision_regrets(table, [])[0]["highest_fp16_peak"]["per_cost"] == pytest.approx([0.0])
    summary = summarize(np.array([0.0, 0.04, 0.5, 2.0]))
    assert summary["within_5pct"] == 0.5 and summary["top1"] == 0.25
    assert summary["mean"] == pytest.approx(0.635)


def test_a_rule_stands_unless_a_challenger_is_lower_on_enough_model_types():
    """At a 5% level, to show the counts; the shipped level is ``selection.ALPHA``."""

    def choose_ranking(*args, **kwargs):
        return selection.choose_ranking(*args, **kwargs, alpha=0.05)

    rng = np.random.default_rng(0)
    rule = rng.uniform(0.0, 0.3, 200)
    noisy = np.abs(rule - 0.01 + rng.normal(0.0, 0.3, 200))  # no lead: chance, and worse
    clear = rule * 0.2  # a real one
    regrets = {"highest_fp16_peak": {"fastest": rule}, "model": {"fastest": noisy}}
    models = np.repeat(np.arange(20), 10)  # 20 validation models of 10 decisions each
    assert choose_ranking(regrets, "fastest", models) == "highest_fp16_peak"
    regrets["model"]["fastest"] = clear
    assert choose_ranking(regrets, "fastest", models) == "model"
    # the same lead, all on one of two models, is a lead on one model: the rule stands
    one_model = np.where(np.arange(200) < 100, rule * 0.05, rule + 0.01)
    regrets["model"]["fastest"] = one_model
    assert one_model.mean() < rule.mean() - 0.05
    assert choose_ranking(regrets, "fastest", models // 10) == "highest_fp16_peak"
    # over 20 model types it is a lead on half of them: the rule stands; a lead on 15 of the
    # 20 wins (a coin gives 15 or more of 20 2.1% of the time)
    assert choose_ranking(regrets, "fastest", models) == "highest_fp16_peak"
    regrets["model"]["fastest"] = np.where(np.arange(200) < 150, rule * 0.05, rule + 0.01)
    assert choose_ranking(regrets, "fastest", models) == "model"
    # 14 of 20 is 5.8%: not enough
    regrets["model"]["fastest"] = np.where(np.arange(200) < 140, rule * 0.05, rule + 0.01)
    assert choose_ranking(regrets, "fastest", models) == "highest_fp16_peak"
    # a model type where both choose alike is no evidence either way: a lead on half of them,
    # the same choices on the other half, wins; a tie everywhere does not
    regrets["model"]["fastest"] = np.where(np.arange(200) < 100, rule * 0.05, rule)
    assert choose_ranking(regrets, "fastest", models) == "model"
    regrets["model"]["fastest"] = rule.copy()
    assert choose_ranking(regrets, "fastest", models) == "highest_fp16_peak"
    # a model type is one vote, whatever its decisions: a lead on seven small types is not
    # drowned by a slight loss on one type with many decisions (7 of 8: 3.5% by a coin); a
    # lead on six of eight is not enough evidence (14% by a coin)
    sizes = np.array([100, 10, 10, 10, 10, 10, 10, 10])
    types = np.repeat(np.arange(8), sizes)
    rule_regret = np.full(types.size, 0.2)
    drowned = np.where(types == 0, 0.23, 0.1)
    assert (drowned - rule_regret).mean() > -0.03
    regrets = {"highest_fp16_peak": {"fastest": rule_regret}, "model": {"fastest": drowned}}
    assert choose_ranking(regrets, "fastest", types) == "model"
    regrets["model"]["fastest"] = np.where(types < 2, 0.23, 0.1)
    assert choose_ranking(regrets, "fastest", types) == "highest_fp16_peak"
    # a count, not a mean: a huge lead on one type (the rule 2.5x off there) does not carry a
    # challenger that is higher on the other nine; of two challengers that pass, the one lower
    # on more types wins, and on a tie in the count the larger mean lead
    per_type = np.repeat(np.arange(10), 10)
    base = np.where(per_type == 0, 2.5, 0.1)
    regrets = {
        "highest_fp16_peak": {"fastest": base},
        "one_big": {"fastest": np.where(per_type == 0, 0.0, 0.2)},
        "nine": {"fastest": np.where(per_type < 9, base * 0.9, base + 0.01)},
        "ten": {"fastest": base * 0.99},
    }
    assert regrets["one_big"]["fastest"].mean() < regrets["ten"]["fastest"].mean()
    order = ["ten", "nine", "one_big"]
    assert choose_ranking(regrets, "fastest", per_type, order) == "ten"
    regrets["nine"]["fastest"] = base * 0.9
    assert choose_ranking(regrets, "fastest", per_type, order) == "nine"  # the larger lead
    # the sequence stops at the first challenger that fails: one listed after it is not tried
    assert choose_ranking(regrets, "fastest", per_type, ["one_big", "nine"]) == "highest_fp16_peak"
    # a candidate without finite regrets of the right length is skipped, no evidence; without
    # the rule's own regrets, the rule stands
    regrets["broken"] = {"fastest": np.where(per_type < 5, 0.0, np.nan)}
    regrets["short"] = {"fastest": np.zeros(3)}
    assert choose_ranking(regrets, "fastest", per_type, ["broken", "short", "nine"]) == "nine"
    del regrets["highest_fp16_peak"]
    assert choose_ranking(regrets, "fastest", per_type) == "highest_fp16_peak"


def test_many_challengers_without_a_lead_seldom_replace_the_rule():
    """Eight challengers no better than the rule, each on ten validation model types: tested
    in sequence, the rule is replaced about as often as one test at 5% would; tested each at
    5% and the best taken, several times as often. At the shipped level, at most about it."""
    rng = np.random.default_rng(3)
    types = np.repeat(np.arange(10), 5)
    replaced = each_alone = shipped = 0
    for _ in range(400):
        rule = rng.uniform(0.0, 0.3, types.size)
        regrets = {"highest_fp16_peak": {"fastest": rule}}
        for c in range(8):
            regrets[f"c{c}"] = {"fastest": rule + rng.normal(0.0, 0.05, types.size)}
        replaced += choose_ranking(regrets, "fastest", types, alpha=0.05) != "highest_fp16_peak"
        shipped += choose_ranking(regrets, "fastest", types) != "highest_fp16_peak"
        base = regrets["highest_fp16_peak"]
        alone = [{"highest_fp16_peak": base, c: r} for c, r in regrets.items() if c[0] == "c"]
        each_alone += any(
            choose_ranking(a, "fastest", types, alpha=0.05) != "highest_fp16_peak" for a in alone
        )
    assert replaced / 400 <= 0.08 and shipped / 400 <= selection.ALPHA + 0.05
    assert each_alone > 2.5 * max(replaced, 1)


def test_physics_baseline_scales_by_what_bounds_the_job():
    specs = pl.DataFrame({"hardware_type": ["slow", "fast"], "peak_bf16_tflops": [10.0, 40.0],
                          "peak_fp32_tflops": [5.0, 10.0],
                          "memory_bandwidth_gbps": [1000.0, 1500.0]})  # fmt: skip
    train = pl.DataFrame({"model_type": ["m"], "num_trainers": [1], "batch_size": [32],
                          "hardware_type": ["slow"], "throughput": [100.0]})  # fmt: skip
    test = train.with_columns(hardware_type=pl.lit("fast"))
    # unknown precision and intensity: the 16-bit peak, as the rule reads it
    assert physics_predict(train, test, specs)[0] == pytest.approx(400.0)
    # an fp32 job scales by the fp32 peak
    fp32 = test.with_columns(precision=pl.lit("fp32"))
    assert physics_predict(train, fp32, specs)[0] == pytest.approx(200.0)
    # 2 FLOP per byte: memory-bound on both types (2 TFLOP/s and 3 TFLOP/s attainable)
    assert physics_predict(train, test, specs, np.array([2.0]))[0] == pytest.approx(150.0)
    # 1,000 FLOP per byte: compute-bound, the peak again
    assert physics_predict(train, test, specs, np.array([1000.0]))[0] == pytest.approx(400.0)
    other = test.with_columns(batch_size=pl.lit(64))  # no other type ran this configuration
    assert np.isnan(physics_predict(train, other, specs)[0])


def _share_within_20(predicted, measured) -> float:
    """w20 counted by hand: a prediction is a hit when it is a number within 20% of the
    measured throughput; a missing one is a miss."""
    pairs = zip(predicted, measured, strict=True)
    hits = [math.isfinite(p) and abs(p - q) <= 0.2 * q for p, q in pairs]
    return sum(hits) / len(hits)


def test_crossval_on_contract_files(tmp_path, capsys, monkeypatch):
    from leap_pipeline.studies import crossval
    from leap_serving.decide import metrics

    scored = []  # (predicted, measured) of each model's w20, in the order run_split scores them

    class Recording:
        """crossval's ``metrics``, keeping the out-of-fold predictions each w20 is taken of."""

        def __getattr__(self, name):
            return getattr(metrics, name)

        def within(self, predicted, measured, k, weights=None):
            if k == 20:
                scored.append((np.array(predicted, dtype=float), np.array(measured, dtype=float)))
            return metrics.within(predicted, measured, k, weights)

    monkeypatch.setattr(crossval, "metrics", Recording())
    fleet = SimulatedFleet(seed=2, scale=0.01)
    attempts = pl.concat([d.attempts for _, d in fleet.days(0, 3)]).with_columns(
        ds=pl.lit(dt.date(2026, 1, 1))
    )
    # the six most measured types: one fold per type and an inner chunk per other type is
    # enough to check the bookkeeping, and keeps the test to seconds
    common = attempts.filter(pl.col("throughput") > 0)["hardware_type"].value_counts(sort=True)
    attempts = attempts.filter(pl.col("hardware_type").is_in(common["hardware_type"].head(6)))
    attempts.write_parquet(tmp_path / "job_attempts.parquet")
    fleet.hardware_specs().write_parquet(tmp_path / "hardware_specs.parquet")
    code = main(["crossval", "--source", "contract", "--path", str(tmp_path),
                 "--hardware", str(tmp_path / "hardware_specs.parquet"),
                 "--split", "leave-hardware-out", "--profile", "quick", "--jobs", "1",
                 "--json"])  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out)["leave-hardware-out"]
    measured = attempts.filter(pl.col("throughput") > 0)["throughput"].to_numpy()
    assert result["n_rows"] == result["scored_rows"] == len(measured)
    # each model's w20 and coverage are those of its out-of-fold predictions, counted by hand,
    # against every measured attempt in order (the last calls: the folds' selection came first)
    outer = scored[-len(crossval.MODELS) :]
    for model, (predicted, against) in zip(crossval.MODELS, outer, strict=True):
        assert np.array_equal(against, measured), model
        assert result[model]["w20"] == pytest.approx(_share_within_20(predicted, measured)), model
        assert result[model]["coverage"] == pytest.approx(np.isfinite(predicted).mean()), model
    # leap's predictions are each its own row's: row by row one of the GBDTs' (the one its
    # fold published), and the same values on other rows (a broken predictor) are neither
    # that nor as often within 20%
    leap = outer[crossval.MODELS.index("leap")][0]
    gbdts = np.array([outer[crossval.MODELS.index(name)][0] for name in crossval.GBDTS])
    assert np.isclose(gbdts, leap).any(axis=0).all()
    shuffled = np.random.default_rng(0).permutation(leap)
    assert not np.isclose(gbdts, shuffled).any(axis=0).all()
    assert result["leap"]["w20"] > 1.5 * _share_within_20(shuffled, measured)
    # every candidate and rule is scored on the same decisions, top-1 and regret alike
    decisions = result["leap"]["regret"]["fastest"]["decisions"]
    assert decisions > 20
    for name in (*crossval.CANDIDATES, "leap"):
        for kind in ("fastest", "per_cost"):
            regret = result[name]["regret"][kind]
            assert regret["decisions"] == decisions, (name, kind)
            assert regret["mean"] >= 0.0 and regret["p90"] >= 0.0
            assert result[name]["top1"][kind] <= regret["within_5pct"] <= 1.0
    assert result["highest_fp16_peak"]["w20"] is None  # a rule predicts no throughput
    # leap's intervals, calibrated in every fold on its other types' chunks
    assert result["leap"]["interval_rows"] == result["scored_rows"]
    assert (
        0.0 < result["leap"]["coverage_80"] <= 1.0 and result["leap"]["interval_width_median"] > 0
    )
    # leap is, fold by fold, one of the candidates it chose from; a kind that published one
    # candidate in every fold has exactly that candidate's decisions
    selection = result["selection"]
    for key in ("gbdt", "fastest", "per_cost"):
        assert sum(selection[key].values()) == result["folds"]
    for kind in ("fastest", "per_cost"):
        if len(selection[kind]) == 1:
            (only,) = selection[kind]
            assert result["leap"]["regret"][kind] == result[only]["regret"][kind]
    assert result["lookup"]["coverage"] == 0.0  # a held-out type has no key in the table
    # nor a ratio to it: no configuration of the training folds ran on it
    assert result["fleet_ratio"]["coverage"] == 0.0


def test_fold_intervals_cover_test_rows_as_their_calibration_chunks_say():
    """Calibrated on held-out chunks whose errors are like the test rows', the intervals cover
    about 80% of them; test rows that miss by more (a shift the chunks did not show) are
    covered less; a fold with nothing held out has no intervals."""
    from leap_pipeline.studies.crossval import fold_intervals
    from leap_serving.launch.features import FEATURE_COLUMNS

    rng = np.random.default_rng(0)
    n = 4_000

    def rows(noise: float) -> tuple[pl.DataFrame, np.ndarray, np.ndarray]:
        truth = rng.uniform(10, 1000, size=n)
        measured = truth * np.exp(rng.normal(scale=noise, size=n))
        frame = pl.DataFrame({"throughput": measured, "hardware_type": ["a"] * n})
        return frame, np.zeros((n, len(FEATURE_COLUMNS))), truth

    train, X_train, held_out = rows(0.1)
    for noise, low, high in ((0.1, 0.77, 0.83), (0.3, 0.0, 0.5)):
        test, X_test, predicted = rows(noise)
        out = fold_intervals(train, X_train, held_out, test, X_test, predicted)
        assert low <= out["inside"].mean() <= high, noise
        assert np.allclose(out["width"], out["width"][0])  # one class: one width
    assert fold_intervals(train, X_train, np.full(n, np.nan), test, X_test, predicted) is None


def test_excluded_groups_are_dropped_and_unknown_ones_named():
    from leap_pipeline.studies.crossval import exclude_groups

    rows = pl.DataFrame({"model_type": ["ncf", "ncf", "bert"], "hardware_type": ["V", "T", "V"]})
    assert exclude_groups(rows, "ncf:V").rows() == [("ncf", "T"), ("bert", "V")]
    assert exclude_groups(rows, "").height == 3
    with pytest.raises(ValueError, match="'ncf:X'"):
        exclude_groups(rows, "ncf:V, ncf:X")


def test_training_history_leaves_out_its_own_split_group():
    from leap_pipeline.studies.crossval import fold_features
    from leap_pipeline.studies.splits import GROUP_KEYS, groups, leave_one_group_out
    from leap_serving.launch.features import FEATURE_COLUMNS

    # three models, each configuration measured on both types (the second 1.5x faster)
    specs = SimulatedFleet(seed=2, scale=0.01).hardware_specs()
    fast, slow = "A100-40GB", "V100-32GB"
    day = dt.date(2026, 1, 1)
    rows = pl.DataFrame(
        [
            {"attempt_id": f"{m}{n}{hw}", "job_name": f"{m}.gpus{n}", "family": f"{m}.gpus{n}",
             "model_type": m, "ds": day, "launch_ts": dt.datetime(2026, 1, 1, 12),
             "hardware_type": hw, "num_trainers": n, "batch_size": 32,
             "throughput": 100.0 * n * (1.5 if hw == fast else 1.0)}
            for m in "abc" for n in (1, 2) for hw in (fast, slow)
        ]
    )  # fmt: skip
    test_mask = leave_one_group_out(rows, ["model_type", "hardware_type"])[0]  # a, fast type
    train, test = rows.filter(~test_mask), rows.filter(test_mask)
    own_group = groups(train, GROUP_KEYS["leave-model-hardware-out"])
    X_train, X_test = fold_features(train, test, specs, own_group)
    column = {name: j for j, name in enumerate(FEATURE_COLUMNS)}
    for X in (X_train, X_test):  # no row sees its own model on its own type
        assert (X[:, column["hist_hw_count"]] == 0.0).all()
    # the other type is seen, except by model a's training rows: a's other type is in the test
    others = np.where(train["model_type"] == "a", 0.0, 1.0)
    assert X_train[:, column["hist_xfer_types"]] == pytest.approx(others)
    assert (X_test[:, column["hist_xfer_types"]] == 1.0).all()
    # the held-out rows are carried over by the ratio the other models measured: exactly 1.5x
    expected = np.log(test["throughput"].to_numpy())
    assert X_test[:, column["hist_xfer_fleet_log_q"]] == pytest.approx(expected)
    # a training row of b on the fast type learns its ratio from c alone (b's own pair is out)
    b_fast = train.with_row_index("i").filter(model_type="b", hardware_type=fast)["i"].to_list()
    assert X_train[b_fast, column["hist_xfer_fleet_log_q"]] == pytest.approx(
        np.log(train["throughput"].to_numpy()[b_fast])
    )


@pytest.mark.parametrize("split", ["partial-history", "leave-model-out", "leave-hardware-out"])
def test_a_validation_fold_is_predicted_without_its_own_measurements(split):
    """The selection validates as a test fold is built: a validation fold's predictions come
    from models and features that never saw its measurements, so tripling them changes none.
    (Validated on chunks whose features were built once for the whole fold, they did: the
    other chunks' history features held them.)"""
    from test_small_data import _sixty_rows

    from leap_pipeline.studies.crossval import _inner_selection
    from leap_pipeline.studies.splits import validation_folds
    from leap_serving.launch.families import with_family

    rows, specs = _sixty_rows()
    rows = with_family(rows)
    masks = validation_folds(rows, split, seed=1)
    assert len(masks) >= 2
    held = masks[0]
    tripled = rows.with_columns(
        throughput=pl.when(pl.Series(held)).then(pl.col("throughput") * 3)
        .otherwise(pl.col("throughput"))
    )  # fmt: skip
    before = _inner_selection(rows, split, specs, "fast", seed=1)["validation_predictions"]
    after = _inner_selection(tripled, split, specs, "fast", seed=1)["validation_predictions"]
    for name in ("single_gbdt", "single_gbdt_prior"):
        assert np.isfinite(before[name][held]).all(), name
    for name in ("single_gbdt", "single_gbdt_prior", "physics", "fleet_ratio", "roofline"):
        np.testing.assert_allclose(after[name][held], before[name][held], err_msg=name)
    # ... and every other fold's rows were predicted with them (tripled, they move some)
    others = ~held & np.isfinite(before["single_gbdt"])
    assert not np.allclose(after["single_gbdt"][others], before["single_gbdt"][others])


def test_random_split_builds_training_and_test_history_alike():
    from leap_pipeline.studies.crossval import fold_features
    from leap_pipeline.studies.splits import inner_chunks
    from leap_serving.launch.features import FEATURE_COLUMNS

    specs = SimulatedFleet(seed=2, scale=0.01).hardware_specs()
    hardware = specs["hardware_type"][0]
    rows = pl.DataFrame(
        [
            {"attempt_id": f"{m}{n}{r}", "job_name": f"{m}.gpus{n}", "family": f"{m}.gpus{n}",
             "model_type": m, "ds": dt.date(2026, 1, 1),
             "launch_ts": dt.datetime(2026, 1, 1, 12), "hardware_type": hardware,
             "num_trainers": n, "batch_size": 32, "throughput": 100.0 * n}
            for m in "ab" for n in (1, 2) for r in range(6)
        ]
    )  # fmt: skip
    test_mask = folds(rows, "random")[0]
    train, test = rows.filter(~test_mask), rows.filter(test_mask)
    chunk = inner_chunks(train, "random")
    assert len(np.unique(chunk)) == 3
    X_train, X_test = fold_features(train, test, specs, chunk)
    count = FEATURE_COLUMNS.index("hist_hw_count")
    # a test row sees its configuration's runs on its own type among the training rows; so
    # does every training row, among the other chunks' rows (before, it saw none of them)
    assert (X_test[:, count] > 0).all() and (X_train[:, count] > 0).all()


def test_sia_adapter_gives_contract_rows():
    from leap_pipeline.data.public_data import sia_sources
    from leap_serving.launch.contract import schema

    public = public_data("sia-sosp23-traces", "epoch-ml-hardware")
    attempts, allocations, specs = sia_sources(
        public / "sia-sosp23-traces" / "traces", public / "epoch-ml-hardware" / "ml_hardware.csv"
    )
    assert attempts.schema == schema("job_attempts")
    assert attempts.height == allocations.height > 19_000
    assert set(attempts["hardware_type"]) == set(specs["hardware_type"])
    assert (attempts["throughput"] > 0).all()
    assert specs.filter(pl.col("hardware_type") == "A100-40GB")["peak_bf16_tflops"][0] == 312.0


def test_lambda_labels_map_to_gpus():
    from leap_pipeline.data.public_data import LAMBDA_GPUS, lambda_gpu

    assert lambda_gpu("Dell 4x H100 80GB SXM5") == "H100 80GB SXM5"
    assert lambda_gpu("LambdaCloud 8xV100 16GB") == "V100 16GB"
    assert lambda_gpu("RTX 3090") in LAMBDA_GPUS


def test_lambda_prices_are_per_gpu_medians():
    from leap_pipeline.data.public_data import lambda_prices

    systems = pl.DataFrame({
        "hardware_type": ["A", "A", "A", "B", "C"],
        "num_gpu": [1, 4, 8, 2, 1],
        "price": ["1000", "4400", "7200", "", "0"],  # B and C carry no usable price
    })  # fmt: skip
    assert lambda_prices(systems) == {"A": 1000.0}  # median of 1000, 1100, 900


def test_lambda_adapter_gives_contract_rows():
    from leap_pipeline.data.public_data import lambda_sources
    from leap_serving.launch.contract import schema

    public = public_data("lambda-dl-benchmark", "epoch-ml-hardware")
    attempts, allocations, specs = lambda_sources(
        public / "lambda-dl-benchmark" / "head-aa5addb" / "pytorch",
        public / "epoch-ml-hardware" / "ml_hardware.csv",
    )
    assert attempts.schema == schema("job_attempts")
    assert attempts.height == allocations.height == 980  # 490 non-zero cells per precision
    assert set(attempts["precision"]) == {"fp16", "fp32"}
    assert set(attempts["hardware_type"]) <= set(specs["hardware_type"])
    # Lambda's own list price per GPU, not Epoch's release price: an RTX 3090 lists at $2,750
    from leap_pipeline.data.public_data import AMORTIZATION_HOURS

    cost = dict(zip(specs["hardware_type"], specs["hourly_cost_usd"], strict=True))
    assert cost["RTX-3090"] * AMORTIZATION_HOURS == pytest.approx(2750.0)
    assert len(set(cost.values())) == len(cost)  # no type fell back to the median


def test_small_fleets_give_a_clear_error_or_a_result_never_a_crash():
    from leap_pipeline.studies.crossval import run_split

    fleet = SimulatedFleet(seed=2, scale=0.01)
    attempts = pl.concat([d.attempts for _, d in fleet.days(0, 3)]).with_columns(
        ds=pl.lit(dt.date(2026, 1, 1))
    )
    specs = fleet.hardware_specs()
    measured = attempts.filter(pl.col("throughput") > 0)
    busiest = measured.group_by("hardware_type").len().sort("len", descending=True).head(2)
    two = measured.filter(pl.col("hardware_type").is_in(busiest["hardware_type"].implode()))
    assert two["hardware_type"].n_unique() == 2
    # each fold trains on one type: no chunk to validate on, so the plain GBDT and the rules
    # stand, and every decision is still scored
    result = run_split(two, specs, "leave-hardware-out", profile="quick", n_jobs=1)
    assert result["folds"] == 2 and result["selection"]["gbdt"] == {"single_gbdt": 2}
    assert result["selection"]["per_cost"] == {"best_fp16_peak_per_dollar": 2}
    one = two.filter(pl.col("hardware_type") == two["hardware_type"][0])
    with pytest.raises(ValueError, match="split='leave-hardware-out' needs two groups"):
        run_split(one, specs, "leave-hardware-out", profile="quick", n_jobs=1)
