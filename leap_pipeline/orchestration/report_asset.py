"""``leap report`` as an asset: the paper's evaluation and the routing value, with its figures."""

from pathlib import Path

import dagster as dg

from leap_pipeline.orchestration.metadata import image_metadata
from leap_pipeline.studies.report_settings import ReportSettings


class ReportConfig(dg.Config):
    """``ReportSettings`` as the asset's run config."""

    scale: float = ReportSettings.scale
    nights: int = ReportSettings.nights
    seed: int = ReportSettings.seed
    profile: str = ReportSettings.profile
    quick: bool = ReportSettings.quick
    data: str = ""  # empty: the install's data folder ($LEAP_DATA)


@dg.asset(group_name="report")
def paper_report(context: dg.AssetExecutionContext, config: ReportConfig) -> dg.MaterializeResult:
    """``leap report`` as an asset: the paper's evaluation and the routing value, with figures."""
    from leap_pipeline.orchestration.runs import land_days
    from leap_pipeline.studies.report import build_report  # the fits' stack: this step only

    settings = ReportSettings.from_options(
        config.scale, config.nights, config.seed, config.data, config.quick, config.profile
    )
    report = build_report(settings, land_days, log=context.log.info)
    root = settings.data / "reports"
    return dg.MaterializeResult(
        metadata={
            "nightly_w20_median": report["nightly_w20_median"],
            "oracle_w20_median": report["oracle_w20_median"],
            "routing_capture": report["routing_capture"] or float("nan"),
            "report": dg.MetadataValue.md((root / "report.md").read_text()),
            **{Path(path).stem: image_metadata(path) for path in report["figures"]},
        }
    )
