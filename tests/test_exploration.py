"""The exploration replay: trials bought within a budget, paid for, and what they reveal."""

import polars as pl
import pytest

from leap_pipeline.studies.exploration import exploration_value


class _Truth:
    """An oracle with one true cost per (launch, type)."""

    def __init__(self, costs: dict[tuple[str, str], float]):
        self.costs = costs

    def true_medians(self, ids, types):
        rows = [(a, t, c) for (a, t), c in self.costs.items() if a in ids and t in types]
        return pl.DataFrame(rows, schema=["attempt_id", "hardware_type", "cost_usd"], orient="row")


def _night(ids: list[str], family: str, first: str, trials=()) -> tuple[pl.DataFrame, dict]:
    attempts = pl.DataFrame({"attempt_id": ids, "family": [family] * len(ids),
                             "candidate_hardware": [["x", "y"]] * len(ids)})  # fmt: skip
    return attempts, {"first": dict.fromkeys(ids, first), "trials": list(trials)}


def test_a_trial_pays_its_share_and_moves_the_familys_later_launches_when_cheaper():
    truth = _Truth({("a1", "x"): 10.0, ("a1", "y"): 6.0, ("a2", "x"): 10.0, ("a2", "y"): 6.0,
                    ("a3", "x"): 10.0, ("a3", "y"): 12.0})  # fmt: skip
    nights = [_night(["a1"], "f", "x", [("a1", "y", 0.2)]), _night(["a2"], "f", "x")]
    out = exploration_value(nights, truth, budget=1.0, trial_share=0.05)
    assert out["trials"] == 1 and out["launches_moved"] == 1
    assert out["trial_cost"] == pytest.approx(0.05 * 6.0)
    assert out["gross_saving"] == pytest.approx(4.0)
    assert out["net_saving"] == pytest.approx(4.0 - 0.3)
    assert out["leap_cost"] == pytest.approx(20.0)
    # a trial that reveals a dearer type moves nothing, and costs its share still
    dearer = exploration_value(
        [_night(["a1"], "f", "x", [("a1", "y", 0.2)]), _night(["a3"], "f", "x")], truth, budget=1.0
    )
    assert dearer["gross_saving"] == 0.0 and dearer["net_saving"] < 0.0
    # no budget, no trial; a trial reveals nothing on its own night
    assert exploration_value(nights, truth, budget=0.0)["trials"] == 0
    same_night = exploration_value([_night(["a1", "a2"], "f", "x", [("a1", "y", 0.2)])], truth,
                                   budget=1.0)  # fmt: skip
    assert same_night["trials"] == 1 and same_night["gross_saving"] == 0.0


def test_the_budget_buys_the_most_promising_trials_once_per_family_and_type():
    costs = {(f"a{i}", t): 10.0 for i in range(100) for t in ("x", "y")}
    trials = [(f"a{i}", "y", i / 100) for i in range(100)]
    attempts = pl.DataFrame({"attempt_id": [f"a{i}" for i in range(100)],
                             "family": [f"f{i % 3}" for i in range(100)],
                             "candidate_hardware": [["x", "y"]] * 100})  # fmt: skip
    launches = {"first": {f"a{i}": "x" for i in range(100)}, "trials": trials}
    out = exploration_value([(attempts, launches)], _Truth(costs), budget=0.02)
    assert out["trials"] == 2  # 2% of 100 launches, the two best of distinct families
    out = exploration_value([(attempts, launches)], _Truth(costs), budget=0.5)
    assert out["trials"] == 3  # one per family and type, however large the budget
