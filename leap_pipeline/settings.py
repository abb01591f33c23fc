"""The nightly pipeline's settings: one typed object per concern, each knob defined once.

``TrainingResource`` holds the fields flat, as Dagster's run config sets them
(``resources: {training: {config: {...}}}``), and hands out these objects; the report and the
demo build theirs from their flags. A bad value is an error naming the field and the value.
"""

from __future__ import annotations

from dataclasses import dataclass

from leap_serving.cascade import PROFILES

from .evaluation import MIN_WINDOW_DAYS, WINDOW_DAYS
from .lookup_table import MIN_SUPPORT


@dataclass(frozen=True)
class TrainingSettings:
    """What a night fits, on which days, and where the experts run."""

    profile: str = "fast"  # "paper" for the paper's hyperparameters, "quick" for tests
    window_days: int = WINDOW_DAYS  # at most 30: the assets' partition mapping declares 30 days
    lookup_min_support: int = MIN_SUPPORT  # attempts a lookup-table key needs
    n_jobs: int | None = 1  # experts fitted at once (joblib; -1: one per core or Dask worker)
    dask_scheduler: str = ""  # fit the experts on a Dask cluster: its address, or "local"

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile={self.profile!r} is not one of {sorted(PROFILES)}")
        if not MIN_WINDOW_DAYS <= self.window_days <= WINDOW_DAYS:
            raise ValueError(
                f"window_days={self.window_days!r} must be {MIN_WINDOW_DAYS}..{WINDOW_DAYS}"
            )
        if self.lookup_min_support < 1:
            raise ValueError(f"lookup_min_support={self.lookup_min_support!r} must be >= 1")
        if self.n_jobs == 0:
            raise ValueError("n_jobs=0: use a positive count, or -1 for one per core")


@dataclass(frozen=True)
class GateSettings:
    """When a night's model may move the production alias."""

    floor: float = 0.30  # the published model's w20 must reach this
    margin: float = 0.02  # ... and be at most this far below production's on the same day

    def __post_init__(self) -> None:
        for name in ("floor", "margin"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"gate_{name}={value!r} must be between 0 and 1")


@dataclass(frozen=True)
class RegistrySettings:
    """How a night's version is tagged, promoted and kept."""

    run_kind: str = ""  # empty: "nightly" when a schedule launched the run, else "adhoc"
    promote: bool = False  # also move the alias on an ad-hoc run (the gate still applies)
    keep_versions: int = 30  # registered versions kept; the production one always is

    def __post_init__(self) -> None:
        if self.keep_versions < 1:
            raise ValueError(f"keep_versions={self.keep_versions!r} must be >= 1")
