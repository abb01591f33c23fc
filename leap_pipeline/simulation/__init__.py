"""The simulated fleet: LEAP's embedded default data, and the truth to score against."""

from .fleet import SPAN_START, FleetArgumentError, Oracle, SimulatedDay, SimulatedFleet, parse_day

__all__ = [
    "SPAN_START",
    "FleetArgumentError",
    "Oracle",
    "SimulatedDay",
    "SimulatedFleet",
    "parse_day",
]
