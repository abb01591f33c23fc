import pytest

from leap_pipeline.simulation import SimulatedFleet

SMALL_SCALE = 0.05


@pytest.fixture(scope="session")
def small_fleet() -> SimulatedFleet:
    return SimulatedFleet(seed=3, scale=SMALL_SCALE)
