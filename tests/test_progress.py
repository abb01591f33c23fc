"""Training progress a person can follow: what finished, the time so far and the time left."""

import io
import logging

import numpy as np
import pytest

from leap_pipeline.modeling import progress as progress_module
from leap_pipeline.modeling.progress import LOGGER_NAME, Progress, TerminalLine
from leap_pipeline.orchestration.dagster_private import without_definitions_state
from leap_serving.model.cascade import BinnedCascade
from leap_serving.model.fitting import cascade_units
from leap_serving.model.profiles import profile_params


def _fit_with_progress(caplog, n_bins: int, em_sample: float = 1.0) -> list[logging.LogRecord]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 5))
    y = 2 * X[:, 0] + np.where(X[:, 1] > 0, 3.0, 0.0) + rng.normal(scale=0.1, size=3000)
    params = profile_params("quick") | {"n_bins": n_bins, "em_sample": em_sample}
    model = BinnedCascade(**params, random_state=0)
    units = cascade_units(model.max_em_iter, n_bins, em_sample=em_sample)
    progress = Progress("night 2026-01-10", units)
    progress.phase = "cascade"
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        model.fit(X, y, progress=progress)
    assert progress.done == pytest.approx(progress.total)  # EM's unneeded iterations left it
    return [r for r in caplog.records if r.name == LOGGER_NAME]


def test_a_cascade_fit_reports_each_expert_and_the_classifier_then_finishes(caplog):
    records = _fit_with_progress(caplog, n_bins=3)
    messages = [r.getMessage() for r in records]
    assert messages[0].startswith("night 2026-01-10 | cascade: EM iteration 1/")
    assert any("expert 3/3" in m for m in messages)
    assert any("cascade: bin classifier" in m for m in messages)
    assert all(" elapsed, " in m for m in messages)
    assert any("left (" in m for m in messages)
    assert records[-1].leap_finished and not any(r.leap_finished for r in records[:-1])


def test_em_on_a_sample_is_counted_at_its_share(caplog):
    assert cascade_units(3, 6, em_sample=0.5) == cascade_units(3, 6) - 1.5
    records = _fit_with_progress(caplog, n_bins=3, em_sample=0.5)
    assert records[-1].leap_finished and not any(r.leap_finished for r in records[:-1])


def test_a_single_gbdt_reports_one_step(caplog):
    (record,) = _fit_with_progress(caplog, n_bins=1)
    assert "cascade: fitted" in record.getMessage() and record.leap_finished


def test_a_long_lone_fit_reports_its_rounds_as_it_goes_and_fits_the_same_model(caplog, monkeypatch):
    """A single GBDT and the bin classifier fit in this process: their rounds are steps."""
    monkeypatch.setattr(progress_module, "ROUNDS_INTERVAL_S", 0.002)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, 8))
    y = X[:, 0] + np.sin(3 * X[:, 1]) + np.where(X[:, 2] > 0, 2.0, 0.0)
    params = profile_params("quick") | {"max_iter": 150, "max_leaf_nodes": 31,
                                        "classifier_max_iter": 150}  # fmt: skip
    fitted = {}
    for n_bins in (1, 3):
        model = BinnedCascade(**params | {"n_bins": n_bins}, random_state=0)
        progress = Progress("night", cascade_units(model.max_em_iter, n_bins))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
            fitted[n_bins] = model.fit(X, y, progress=progress).predict(X)
        records = [r for r in caplog.records if r.name == LOGGER_NAME]
        messages = [r.getMessage() for r in records]
        marker = "| round " if n_bins == 1 else "| bin classifier, round "
        rounds = [int(m.split(marker)[1].split("/")[0]) for m in messages if marker in m]
        assert len(rounds) >= 2 and rounds == sorted(set(rounds)), messages
        assert progress.done == progress.total  # the rounds' shares and the rest add up
        assert records[-1].leap_finished and not any(r.leap_finished for r in records[:-1])
    # unwatched (progress off), the same models: reading the rounds does not touch a fit
    for n_bins, predicted in fitted.items():
        model = BinnedCascade(**params | {"n_bins": n_bins}, random_state=0)
        assert np.array_equal(model.fit(X, y).predict(X), predicted)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _record(message: str, finished: bool) -> logging.LogRecord:
    record = logging.LogRecord(LOGGER_NAME, logging.INFO, "", 0, message, (), None)
    record.leap_finished = finished
    return record


def test_a_terminal_gets_one_line_updated_in_place_and_a_log_plain_lines():
    terminal, log = _Terminal(), io.StringIO()
    for stream in (terminal, log):
        handler = TerminalLine(stream)
        for message, finished in (("step one, longer", False), ("step two", False), ("done", True)):
            handler.emit(_record(message, finished))
    assert terminal.getvalue() == "\rstep one, longer\rstep two        \rdone    \n"
    assert log.getvalue() == "step one, longer\nstep two\ndone\n"


def test_steps_from_a_watching_thread_reach_the_dagster_run_log():
    """``BoostingRounds`` reports from its own thread; the shipped instance config's managed
    loggers must carry those records into the run's log as well as the fit's own."""
    import threading
    from pathlib import Path

    import dagster as dg
    import yaml

    config = yaml.safe_load((Path(__file__).parents[1] / "data/dagster/dagster.yaml").read_text())

    @dg.asset
    def watched_fit() -> None:
        progress = Progress("night", 2.0)
        progress.advance("main thread step")
        thread = threading.Thread(target=lambda: progress.advance("watching thread step"))
        thread.start()
        thread.join()

    instance = dg.DagsterInstance.ephemeral(settings={"python_logs": config["python_logs"]})
    result = without_definitions_state(lambda: dg.materialize([watched_fit], instance=instance))
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any(m.startswith("night | main thread step |") for m in messages)
    assert any(m.startswith("night | watching thread step |") for m in messages)
