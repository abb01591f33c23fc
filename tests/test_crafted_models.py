"""A corpus of crafted model folders, each refused at load with a reason naming its field.

Every crafted file comes with a manifest rewritten to match (what someone who can write the
artifact store does), so only the loader's own checks stand between it and the walks, which
index arrays without bounds checks. Each case is loaded and ranked in a worker process
(``benchmarks/fuzz_models.py``): a crash or a hang fails its case instead of the test run. The
fuzzer over random mutants of a real model runs in the long lane (``-m long``).
"""

from __future__ import annotations

import copy
import io
import json
import re

import numpy as np
import polars as pl
import pytest
from benchmark_scripts import load_benchmark

from leap_pipeline.simulation import SimulatedFleet
from leap_serving.launch.features import FEATURE_COLUMNS, PRIOR_COLUMNS
from leap_serving.launch.snapshot import SNAPSHOT_SCHEMA
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.profiles import profile_params
from leap_serving.model.published import LeapModel

N = len(FEATURE_COLUMNS)


def _fuzz_module():
    return load_benchmark("fuzz_models")


fuzz_models = _fuzz_module()


def _model(n_bins: int) -> LeapModel:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, N))
    X[rng.random(len(X)) < 0.2, 1] = np.nan
    y = X[:, 0] + 0.1 * rng.normal(size=len(X))
    cascade = BinnedCascade(**{**profile_params("quick"), "n_bins": n_bins}).fit(X, y)
    specs = SimulatedFleet(seed=0, scale=0.01).hardware_specs()
    return LeapModel(cascade, pl.DataFrame(schema=SNAPSHOT_SCHEMA), specs)


# -- editing a booster's LightGBM text -------------------------------------------------------------


def _tree_lines(text: str, tree: int) -> tuple[list[str], int, int]:
    lines = text.split("\n")
    start = lines.index(f"Tree={tree}")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].strip())
    return lines, start, end


def _field(text: str, tree: int, key: str) -> list[str]:
    lines, start, end = _tree_lines(text, tree)
    line = next(line for line in lines[start:end] if line.startswith(f"{key}="))
    return line.split("=", 1)[1].split(" ")


def _set_field(text: str, tree: int, key: str, values: list) -> str:
    lines, start, end = _tree_lines(text, tree)
    at = next(i for i in range(start, end) if lines[i].startswith(f"{key}="))
    lines[at] = f"{key}={' '.join(str(v) for v in values)}"
    return "\n".join(lines)


def _edit_tree(booster: dict, key: str, edit, tree: int = 0) -> None:
    values = _field(booster["model_text"], tree, key)
    booster["model_text"] = _set_field(booster["model_text"], tree, key, edit(values))


def _at(values: list, index: int, value) -> list:
    values = list(values)
    values[index] = str(value)
    return values


def _header(booster: dict, key: str, value) -> None:
    booster["model_text"] = re.sub(
        rf"^{key}=.*$", f"{key}={value}", booster["model_text"], count=1, flags=re.M
    )


def _drop_last_tree(booster: dict) -> None:
    """An expert's last tree cut out, the text otherwise whole: fewer trees than its rounds."""
    text = booster["model_text"]
    last = text.index(f"Tree={booster['fitted']['n_iter_'] - 1}\n")
    booster["model_text"] = text[:last] + text[text.index("end of trees") :]


def _cycle(booster: dict) -> None:
    """A child that points back at the root: the walk would loop."""
    left = _field(booster["model_text"], 0, "left_child")
    inner = next(i for i, c in enumerate(left) if int(c) >= 0)  # a node with an inner child
    child = int(left[inner])
    _edit_tree(booster, "left_child", lambda v: _at(v, child, 0))


def _shared_leaf(booster: dict) -> None:
    """Two parents of one leaf: the walk would read a node twice and miss another."""
    right = _field(booster["model_text"], 0, "right_child")
    left = _field(booster["model_text"], 0, "left_child")
    leaf = next(c for c in [*left, *right] if int(c) < 0)
    _edit_tree(booster, "right_child", lambda v: _at(v, 0, leaf))


def _leaf_out_of_range(booster: dict) -> None:
    n_leaves = int(_field(booster["model_text"], 0, "num_leaves")[0])
    _edit_tree(booster, "left_child", lambda v: _at(v, 0, -n_leaves - 1))


def _inner_out_of_range(booster: dict) -> None:
    n_leaves = int(_field(booster["model_text"], 0, "num_leaves")[0])
    _edit_tree(booster, "right_child", lambda v: _at(v, 0, n_leaves - 1))


def _wide(cascade: dict) -> None:
    """The issue's crash: a self-consistent model of 5,000 features, splitting on feature 4,000."""
    cascade["fitted"]["n_features_in_"] = 5000
    for booster in [*cascade["experts"], cascade["classifier"]]:
        booster["fitted"]["n_features_in_"] = 5000
        _header(booster, "max_feature_idx", 4999)
    _edit_tree(cascade["experts"][0], "split_feature", lambda v: _at(v, 0, 4000))


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# (label, edit of the cascade's parsed JSON, what the reason must name)
CASCADE_CASES = [
    ("5,000 features, a split on feature 4,000", _wide, "n_features_in_=5000"),
    (
        "one booster's feature count",
        lambda c: c["experts"][1]["fitted"].update(n_features_in_=N + 1),
        r"experts\[1\].fitted.n_features_in_",
    ),
    (
        "a split feature past the header's",
        lambda c: _edit_tree(c["experts"][0], "split_feature", lambda v: _at(v, 0, N)),
        "split_feature",
    ),
    (
        "a negative split feature",
        lambda c: _edit_tree(c["classifier"], "split_feature", lambda v: _at(v, 0, -1)),
        "split_feature",
    ),
    (
        "a split feature beyond int64",
        lambda c: _edit_tree(c["experts"][0], "split_feature", lambda v: _at(v, 0, 2**64)),
        "split_feature",
    ),
    ("a leaf index past the leaves", lambda c: _leaf_out_of_range(c["experts"][0]), "child index"),
    (
        "an inner index past the nodes",
        lambda c: _inner_out_of_range(c["experts"][2]),
        "child index",
    ),
    ("a cycle in a tree", lambda c: _cycle(c["experts"][0]), "reached twice"),
    ("a leaf with two parents", lambda c: _shared_leaf(c["classifier"]), "reached twice|one tree"),
    (
        "leaf values short by one",
        lambda c: _edit_tree(c["experts"][0], "leaf_value", lambda v: v[:-1]),
        "leaf_value",
    ),
    (
        "a NaN leaf value",
        lambda c: _edit_tree(c["experts"][0], "leaf_value", lambda v: _at(v, 0, "nan")),
        "leaf_value",
    ),
    (
        "an infinite leaf value",
        lambda c: _edit_tree(c["experts"][0], "leaf_value", lambda v: _at(v, 0, "inf")),
        "leaf_value",
    ),
    (
        "a NaN threshold",
        lambda c: _edit_tree(c["experts"][0], "threshold", lambda v: _at(v, 0, "nan")),
        "threshold",
    ),
    (
        "num_leaves of a huge tree",
        lambda c: _edit_tree(c["experts"][0], "num_leaves", lambda v: ["9" * 30]),
        "leaf_value|num_leaves",
    ),
    (
        "10^12 outputs a round",
        lambda c: _header(c["experts"][0], "num_tree_per_iteration", 10**12),
        "num_tree_per_iteration",
    ),
    ("a tree missing", lambda c: _drop_last_tree(c["experts"][0]), "trees"),
    (
        "rounds that do not match the trees",
        lambda c: c["experts"][0]["fitted"].update(
            n_iter_=c["experts"][0]["fitted"]["n_iter_"] + 1
        ),
        "n_iter_",
    ),
    (
        "a class past the bins",
        lambda c: c["classifier"]["fitted"].update(classes_=[0, 1, 3]),
        "classes_",
    ),
    (
        "a negative class",
        lambda c: c["classifier"]["fitted"].update(classes_=[-1, 0, 1]),
        "classes_",
    ),
    ("a class twice", lambda c: c["classifier"]["fitted"].update(classes_=[0, 0, 1]), "classes_"),
    (
        "an expert as the classifier",
        lambda c: c.update(classifier=copy.deepcopy(c["experts"][0])),
        "kind",
    ),
    (
        "the classifier as an expert",
        lambda c: c["experts"].__setitem__(0, copy.deepcopy(c["classifier"])),
        "kind",
    ),
    ("an unknown gating", lambda c: c["params"].update(gating="mode"), "gating"),
    ("a negative gate_top_k", lambda c: c["params"].update(gate_top_k=-1), "gate_top_k"),
    ("gate_top_k as text", lambda c: c["params"].update(gate_top_k="3"), "gate_top_k"),
    (
        "a learning rate of NaN",
        lambda c: c["params"].update(learning_rate=float("nan")),
        "learning_rate",
    ),
    ("a temperature of 0", lambda c: c["fitted"].update(temperature_=0.0), "temperature_"),
    ("a temperature of 1e-300", lambda c: c["fitted"].update(temperature_=1e-300), "temperature_"),
    (
        "a leaf whose exp overflows",
        lambda c: _edit_tree(c["experts"][0], "leaf_value", lambda v: _at(v, 0, 4000)),
        "leaf_value can sum to",
    ),
    ("a negative temperature", lambda c: c["fitted"].update(temperature_=-1.0), "temperature_"),
    (
        "an infinite temperature",
        lambda c: c["fitted"].update(temperature_=float("inf")),
        "temperature_",
    ),
    ("a temperature of 10^400", lambda c: c["fitted"].update(temperature_=10**400), "temperature_"),
    ("rounds of 10^30", lambda c: c["experts"][0]["fitted"].update(n_iter_=10**30), "n_iter_"),
    ("a null expert", lambda c: c["experts"].__setitem__(0, None), r"experts\[0\]"),
    ("a null classifier", lambda c: c.update(classifier=None), "classifier"),
    (
        "more bins than the parameters allow",
        lambda c: c["fitted"].update(n_bins_=c["params"]["n_bins"] + 1),
        "n_bins_",
    ),
    ("bins as text", lambda c: c["fitted"].update(n_bins_="3"), "n_bins_"),
    ("a NaN bin edge", lambda c: c["fitted"].update(bin_edges_=[float("nan")]), "bin_edges_"),
    ("a million bin counts", lambda c: c["fitted"].update(bin_rows_=[1] * 1_000_000), "bin_rows_"),
    (
        "trees per expert disagreeing",
        lambda c: c["fitted"].update(n_trees_per_expert_=[1, 1, 1]),
        "n_trees_per_expert_",
    ),
    (
        "a residual cascade without its fallback",
        lambda c: c["params"].update(target="residual"),
        "prior_fallback_",
    ),
    ("a target no cascade learns", lambda c: c["params"].update(target="speed"), "target"),
    (
        "an old flag beside the target",
        lambda c: c["params"].update(efficiency_on_cost=True),
        "efficiency_on_cost",
    ),
    ("a fitted record that is a list", lambda c: c.update(fitted=[1, 2]), "fitted"),
    ("a kind that is a list", lambda c: c["experts"][0].update(kind=["GBDTRegressor"]), "kind"),
]


def _cascade_cases(base: dict[str, bytes]) -> list[tuple[str, str, bytes, str]]:
    cases = []
    for label, edit, field in CASCADE_CASES:
        cascade = json.loads(base["cascade.json"])
        edit(cascade)
        cases.append((label, "cascade.json", json.dumps(cascade).encode(), field))
    text = base["cascade.json"]
    cases += [
        ("the file cut short", "cascade.json", text[: len(text) // 2], "cannot be read"),
        ("JSON nested 100,000 deep", "cascade.json", _nested(100_000).encode(), "cannot be read"),
        ("an integer of 5,000 digits", "cascade.json", b"1" * 5000, "cannot be read"),
        ("not JSON at all", "cascade.json", b"\x80\x00PK\x03\x04", "cannot be read"),
    ]
    return cases


def _parquet(frame: pl.DataFrame) -> bytes:
    out = io.BytesIO()
    frame.write_parquet(out)
    return out.getvalue()


def _other_cases(base: dict[str, bytes]) -> list[tuple[str, str, bytes, str]]:
    metadata = json.loads(base["metadata.json"])
    specs = pl.read_parquet(io.BytesIO(base["hardware_specs.parquet"]))
    snapshot = pl.read_parquet(io.BytesIO(base["history_snapshot.parquet"]))
    other_features = {**metadata, "feature_columns": list(reversed(FEATURE_COLUMNS))}
    other_prior = {**metadata, "prior_columns": list(reversed(PRIOR_COLUMNS))}
    return [
        (
            "metadata nested 100,000 deep",
            "metadata.json",
            _nested(100_000).encode(),
            "metadata.json",
        ),
        ("metadata that is a list", "metadata.json", b"[1, 2]", "metadata.json"),
        (
            "another feature list",
            "metadata.json",
            json.dumps(other_features).encode(),
            "feature_columns",
        ),
        (
            "another history-prior order",
            "metadata.json",
            json.dumps(other_prior).encode(),
            "prior_columns",
        ),
        (
            "a negative price",
            "hardware_specs.parquet",
            _parquet(specs.with_columns(hourly_cost_usd=-specs["hourly_cost_usd"])),
            "hourly_cost_usd",
        ),
        (
            "a hardware type twice",
            "hardware_specs.parquet",
            _parquet(pl.concat([specs, specs.head(1)])),
            "hardware_type",
        ),
        (
            "a price as text",
            "hardware_specs.parquet",
            _parquet(specs.with_columns(pl.col("hourly_cost_usd").cast(pl.String))),
            "hourly_cost_usd",
        ),
        ("an empty spec table", "hardware_specs.parquet", _parquet(specs.head(0)), "empty"),
        (
            "a snapshot count as text",
            "history_snapshot.parquet",
            _parquet(snapshot.with_columns(pl.col("count").cast(pl.String))),
            "count",
        ),
        (
            "a history level of 1e300",
            "history_snapshot.parquet",
            _parquet(
                pl.concat(
                    [
                        snapshot,
                        pl.DataFrame(
                            [{"family": "f", "count": 3, "mean_log_q": 1e300}],
                            schema=snapshot.schema,
                        ),
                    ]
                )
            ),
            "mean_log_q",
        ),
        (
            "a snapshot that is not Parquet",
            "history_snapshot.parquet",
            b"PAR1 not really PAR1",
            "history_snapshot.parquet",
        ),
    ]


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> dict[str, tuple[dict, str]]:
    """Every crafted case through the workers: label -> (answer, the field it must name)."""
    results = {}
    for n_bins in (3, 1):
        folder = tmp_path_factory.mktemp(f"bins{n_bins}") / "model"
        _model(n_bins).save(folder)
        base = fuzz_models.read_base(folder)
        if n_bins == 3:
            cases = _cascade_cases(base) + _other_cases(base)
        else:  # a one-bin cascade (the single GBDT as published) has no classifier
            cascade = json.loads(base["cascade.json"])
            cascade["classifier"] = copy.deepcopy(cascade["experts"][0])
            cases = [("a classifier in a one-bin model", "cascade.json",
                      json.dumps(cascade).encode(), "classifier")]  # fmt: skip
        ran = fuzz_models.run(folder.resolve(), [c[:3] for c in cases], jobs=1, timeout=30.0)
        assert ran[0]["outcome"] != "crash"
        results |= {case[0]: (answer, case[3]) for case, answer in zip(cases, ran, strict=True)}
    return results


LABELS = [c[0] for c in CASCADE_CASES] + [
    "the file cut short", "JSON nested 100,000 deep", "an integer of 5,000 digits",
    "not JSON at all", "metadata nested 100,000 deep", "metadata that is a list",
    "another feature list", "another history-prior order", "a negative price",
    "a hardware type twice", "a price as text",
    "a snapshot count as text", "a history level of 1e300", "a snapshot that is not Parquet",
    "a classifier in a one-bin model", "an empty spec table",
]  # fmt: skip


def test_the_corpus_covers_at_least_thirty_cases():
    assert len(LABELS) >= 30 and len(set(LABELS)) == len(LABELS)


@pytest.mark.parametrize("label", LABELS)
def test_a_crafted_model_is_refused_at_load_naming_its_field(answers, label):
    answer, field = answers[label]
    assert answer["outcome"] == "refused", answer
    assert re.search(field, answer["reason"]), answer["reason"]


def test_the_uncrafted_model_loads_and_ranks_through_the_same_workers(tmp_path):
    """The control: the workers rank the untouched model, so a refusal above is the case's."""
    folder = tmp_path / "model"
    _model(3).save(folder)
    base = fuzz_models.read_base(folder)
    ran = fuzz_models.run(folder.resolve(), [("as saved", "cascade.json", base["cascade.json"])],
                          jobs=1, timeout=30.0)  # fmt: skip
    assert ran[0]["outcome"] == "ranked", ran[0]


@pytest.mark.long
def test_a_thousand_mutants_of_a_real_model_neither_crash_nor_hang(tmp_path):
    """The fuzzer over the tiny demo's model: every mutant refused, or loaded and served."""
    folder = fuzz_models.build_base(tmp_path)
    result = fuzz_models.fuzz(folder, 1000, seed=7, jobs=1, timeout=5.0)
    assert result["mutants"] == 1000
    assert (result["crash"], result["hang"], result["bug"]) == (0, 0, 0), result["failures"]
    assert result["refused"] > 0 and result["ranked"] > 0
