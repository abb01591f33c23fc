"""A report's settings: the fleet's scale, the nights, the profile and where it writes. Its own
module, light to import: the ``paper_report`` asset's run config reads its defaults when the
definitions load, in every step and run worker, which then need none of the report's stack."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from leap_pipeline.settings import MIN_SUPPORT, WINDOW_DAYS, TrainingSettings, environment
from leap_serving.model.profiles import profile_params


@dataclass(frozen=True)
class ReportSettings:
    # the largest scale at which 30 nights take about an hour on 2 cores: 0.2 took 3,633 s
    # (docs/results.md), and a night's fits grow with the rows
    scale: float = 0.2
    nights: int = 30
    seed: int = 0
    profile: str = "fast"
    shuffles: int = 10
    # the install's data folder ($LEAP_DATA), read when settings are made, never at import
    data: Path = field(default_factory=lambda: environment().data)
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scale={self.scale!r} must be positive")
        if self.nights < 1:
            raise ValueError(f"nights={self.nights!r} must be at least 1")
        profile_params(self.profile)  # an unknown profile: a clear error before any work

    @classmethod
    def quick_mode(cls, data: Path | None = None) -> ReportSettings:
        folder = {"data": Path(data)} if data else {}
        return cls(scale=0.02, nights=2, profile="quick", shuffles=2, quick=True, **folder)

    @classmethod
    def from_options(
        cls,
        scale: float | None,
        nights: int | None,
        seed: int,
        data: str | Path | None,
        quick: bool,
        profile: str | None = None,
    ) -> ReportSettings:
        """The settings the CLI flags and the asset's config name, read the same way (a flag
        left out, None, takes the default here; no ``data``: the install's data folder)."""
        if quick:
            return cls.quick_mode(Path(data) if data else None)
        return cls(
            scale=cls.scale if scale is None else scale,
            nights=cls.nights if nights is None else nights,
            seed=seed,
            profile=cls.profile if profile is None else profile,
            **({"data": Path(data)} if data else {}),
        )

    def training(self) -> TrainingSettings:
        """Each night's training: the report's profile, its window, a lookup-table support
        that shrinks with the fleet, every core (the models are the same on any count)."""
        return TrainingSettings(
            profile=self.profile,
            window_days=self.window_days,
            lookup_min_support=self.lookup_min_support,
            n_jobs=-1,
        )

    def night_key(self) -> dict:
        """The settings a kept night's figures depend on (``report_nights``): the fleet, the
        profile, and the window and lookup support as computed (they follow from the others by
        rules that may change). Not the number of nights, so a longer report keeps a shorter
        one's nights."""
        names = ("scale", "seed", "profile", "quick", "window_days", "lookup_min_support")
        return {k: getattr(self, k) for k in names}

    @property
    def lookup_min_support(self) -> int:
        return max(2, round(MIN_SUPPORT * self.scale))

    @property
    def window_days(self) -> int:
        return 8 if self.quick else WINDOW_DAYS
