"""The experts' fits spread through joblib: in processes here, or on a Dask cluster, the night's
models are the same as fitted one after another."""

import datetime as dt

import numpy as np
import pytest

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.parallel import expert_backend
from leap_pipeline.modeling.selection import fit_models
from leap_pipeline.orchestration.definitions import materialize_days
from leap_serving.launch.features import FEATURE_COLUMNS

SOURCE = "simulator:seed=3,scale=0.02"
FIRST, NIGHT = dt.date(2026, 1, 1), dt.date(2026, 1, 10)


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("parallel") / "leap.duckdb"
    materialize_days(FIRST, NIGHT, source=SOURCE, warehouse=str(warehouse), log_level="ERROR")
    with open_warehouse(warehouse, read_only=True) as wh:
        return wh.read("feature_table", FIRST, NIGHT - dt.timedelta(days=1))


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
