"""The experts' fits spread through joblib: in processes here, or on a Dask cluster, the night's
models are the same as fitted one after another. On a cluster the lone fits (the single GBDTs)
run there too, each whole on a worker, and the night scores as it does in this process."""

import datetime as dt

import numpy as np
import pytest

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.parallel import expert_backend
from leap_pipeline.modeling.selection import fit_models
from leap_pipeline.orchestration.definitions import materialize_days
from leap_serving.decide import metrics
from leap_serving.launch.features import FEATURE_COLUMNS

SOURCE = "simulator:seed=3,scale=0.02"
FIRST, NIGHT = dt.date(2026, 1, 1), dt.date(2026, 1, 10)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("parallel") / "leap.duckdb"
    materialize_days(FIRST, NIGHT, source=SOURCE, warehouse=str(warehouse), log_level="ERROR")
    return warehouse


@pytest.fixture(scope="module")
def window(warehouse):
    with open_warehouse(warehouse, read_only=True) as wh:
        return wh.read("feature_table", FIRST, NIGHT - dt.timedelta(days=1))


@pytest.fixture(scope="module")
def night_rows(warehouse):  # day D: rows none of the night's models trained or selected on
    with open_warehouse(warehouse, read_only=True) as wh:
        return wh.read("feature_table", NIGHT, NIGHT)


def _predictions(window, **cascade_params) -> dict[str, np.ndarray]:
    models = fit_models(window, NIGHT, profile="quick", cascade_params=cascade_params)
    X = window.select(FEATURE_COLUMNS).to_numpy()
    assert models.cascade.n_bins_ > 1  # several experts to spread
    return {
        "cascade": models.cascade.predict(X),
        "published": models.published.predict(X),
        "single_gbdt": models.single_gbdt_booster.predict(X),
    }


@pytest.fixture(scope="module")
def one_by_one(window):
    return _predictions(window, n_jobs=1)


def test_experts_fitted_in_parallel_processes_make_the_same_models(window, one_by_one):
    spread = _predictions(window, n_jobs=2)
    for name, predicted in one_by_one.items():
        np.testing.assert_array_equal(spread[name], predicted, err_msg=name)


def test_a_night_on_a_local_dask_cluster_makes_the_same_models(window, one_by_one):
    with expert_backend("local"):
        spread = _predictions(window, n_jobs=-1)
    for name, predicted in one_by_one.items():
        np.testing.assert_array_equal(spread[name], predicted, err_msg=name)


def test_dask_without_the_extra_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # as if not installed
    needs_dask = pytest.raises(ValueError, match="dask_scheduler='local' needs Dask")
    with needs_dask, expert_backend("local"):
        pass


@pytest.fixture(scope="module")
def two_workers():
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        yield cluster


def test_the_lone_fits_on_two_dask_workers_score_as_in_process(window, night_rows, two_workers):
    from dask.distributed import Client, get_task_stream

    X, q = night_rows.select(FEATURE_COLUMNS).to_numpy(), night_rows["throughput"].to_numpy()

    def w20(model) -> float:  # in points
        return 100 * metrics.within(np.exp(model.predict(X)), q, 20)

    here = fit_models(window, NIGHT, profile="quick")
    with (
        Client(two_workers) as watcher,
        get_task_stream(watcher) as tasks,
        expert_backend(two_workers.scheduler_address),  # the night's own client, as run_night's
    ):
        there = fit_models(window, NIGHT, profile="quick")
    ran = [task for task in tasks.data if task["key"].startswith("_fit_alone")]
    # the single GBDT, the one on the history's prior and the efficiency GBDT
    assert len(ran) == 3, "the single GBDTs were not fitted on the cluster"
    assert len({task["worker"] for task in ran}) == 2, "the lone fits shared one worker"
    assert there.selection["published"] == here.selection["published"]
    for name, model, in_process in (
        ("published", there.published, here.published),
        ("single_gbdt", there.single_gbdt_booster, here.single_gbdt_booster),
        ("cascade", there.cascade, here.cascade),
    ):
        assert abs(w20(model) - w20(in_process)) <= 0.5, name
