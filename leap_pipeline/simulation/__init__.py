"""The simulated fleet: LEAP's embedded default data, and the truth to score against."""

from .fleet import (
    HIDDEN_FACTORS,
    SPAN_START,
    FleetArgumentError,
    Oracle,
    SimulatedDay,
    SimulatedFleet,
    parse_day,
)

__all__ = [
    "HIDDEN_FACTORS",
    "SPAN_START",
    "FleetArgumentError",
    "Oracle",
    "SimulatedDay",
    "SimulatedFleet",
    "parse_day",
]
