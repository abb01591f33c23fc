"""The checks Dagster shows on ``model_evaluation`` beside the gate, each built from the newest
night's evaluation: the intervals' coverage, the features' drift, and the quality of every slice
(hardware type, frequency band, history group) against the whole day's. They warn: a night is
held back by the gate alone (``night_evaluation``), and these say where to look."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dagster as dg
import polars as pl

from leap_pipeline.modeling.drift import PSI_WARN
from leap_pipeline.modeling.evaluation import SLICE_MAX_GAP, SLICE_MIN_ATTEMPTS, slice_shortfalls
from leap_pipeline.orchestration.metadata import table_metadata
from leap_serving.model.intervals import COVERAGE_BAND

CHECK_NAMES = ("interval_coverage", "feature_drift", "slice_quality")


def no_night_checks() -> Iterator[dg.AssetCheckResult]:
    """Every check passed with nothing to judge: a run whose nights were all skipped."""
    for name in CHECK_NAMES:
        yield dg.AssetCheckResult(check_name=name, passed=True, metadata={"night": "no night"})


def slice_check(day: dt.date, breakdown: pl.DataFrame, overall_w20: float) -> dg.AssetCheckResult:
    """The published model's w20 on each slice of day D with enough attempts against the whole
    day's minus ``SLICE_MAX_GAP``: a warning naming every slice below it (the model serves that
    group of jobs worse than the fleet: a hardware type, the long tail, the cold starts), with
    every slice as a table."""
    judged, below = slice_shortfalls(breakdown, overall_w20)
    names = [f"{r['by']}={r['group']} ({r['w20']:.1%})" for r in below.iter_rows(named=True)]
    return dg.AssetCheckResult(
        check_name="slice_quality",
        passed=below.height == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "day": str(day),
            "bar": f"w20 >= {overall_w20:.1%} - {SLICE_MAX_GAP:.0%} on slices of at least "
            f"{SLICE_MIN_ATTEMPTS} attempts",
            "below": str(names),
            "slices": table_metadata(judged),
        },
    )


def drift_check(day: dt.date, drift: list[dict] | None) -> dg.AssetCheckResult:
    """Each feature's population stability index on day D against the training window
    (``drift.feature_drift``) as a table, largest first: a warning when any passes
    ``PSI_WARN``, naming them."""
    if not drift:
        return dg.AssetCheckResult(
            check_name="feature_drift",
            passed=True,
            metadata={"drift": f"{day}: not computed for this night"},
        )
    drifted = [entry["feature"] for entry in drift if entry["drifted"]]
    return dg.AssetCheckResult(
        check_name="feature_drift",
        passed=not drifted,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "day": str(day),
            "threshold": f"PSI > {PSI_WARN}",
            "drifted": str(drifted),
            "psi_by_feature": table_metadata(drift),
        },
    )


def interval_check(day: dt.date, intervals: dict | None) -> dg.AssetCheckResult:
    """Day D's coverage of the published model's intervals against ``COVERAGE_BAND``: a warning
    when it leaves it (the intervals are miscalibrated for the day: too narrow below the band,
    wider than they need be above it), with each hardware type's and history class's coverage
    as tables."""
    if intervals is None:
        return dg.AssetCheckResult(
            check_name="interval_coverage",
            passed=True,
            metadata={"coverage": f"{day}: the published model has no intervals"},
        )
    low, high = COVERAGE_BAND
    share = intervals["coverage"]

    def table(groups: dict) -> dg.MetadataValue:
        return table_metadata([{"group": g, **v} for g, v in groups.items()])

    return dg.AssetCheckResult(
        check_name="interval_coverage",
        passed=bool(low <= share <= high),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "day": str(day),
            "level": intervals["level"],
            "coverage": share,
            "band": f"{low:.2f}-{high:.2f}",
            "interval_width_median": intervals["width_median"],
            "by_hardware_type": table(intervals["by_hardware_type"]),
            "by_history": table(intervals["by_history"]),
        },
    )
