import os
import tempfile

import pytest

# the tests never read the data folder of the checkout (a user's, or the one `leap demo` left):
# its calendar file would set their partitions and default source
os.environ["LEAP_DATA"] = tempfile.mkdtemp(prefix="leap-tests-data-")


from leap_pipeline.simulation import SimulatedFleet

SMALL_SCALE = 0.05


@pytest.fixture(scope="session")
def small_fleet() -> SimulatedFleet:
    return SimulatedFleet(seed=3, scale=SMALL_SCALE)
