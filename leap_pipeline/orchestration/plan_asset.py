"""``leap plan`` as an asset: candidate purchases priced on the warehouse's last days, its table
and picture in the materialization's metadata."""

from pathlib import Path

import dagster as dg

from leap_pipeline.orchestration.resources import MlflowResource
from leap_pipeline.settings import environment


class PlanConfig(dg.Config):
    """``leap plan``'s flags as the asset's run config."""

    buy: list[str]  # TYPE:COUNTS[:PRICE], as --buy takes each
    days: int = 7
    end: str = ""  # YYYY-MM-DD; empty: the last day landed
    model: str = ""  # a registered model's URI; empty: the registry's production model


@dg.asset(group_name="report")
def purchase_plan(
    context: dg.AssetExecutionContext, config: PlanConfig, mlflow_tracking: MlflowResource
) -> dg.MaterializeResult:
    """Which GPU type to buy, and how many: each purchase replayed on the window's predictions
    (``modeling.planning``) from the install's warehouse and registry, written to
    ``DATA/plans/<last day>`` and shown here. A bad purchase, day or model fails the run naming
    it."""
    from leap_pipeline.modeling import planning, registry  # the model's stack: this step only
    from leap_pipeline.orchestration.metadata import image_metadata
    from leap_serving.registry.registered import load_registered

    try:
        purchases = [planning.parse_purchase(text) for text in config.buy]
        end = planning.parse_day(config.end, "end") if config.end else None
        mlflow_tracking.configure()  # the registry every night registers in
        model, version = load_registered(config.model or registry.model_uri())
        where = environment()
        plan = planning.plan_warehouse(where.warehouse_path, model, purchases, config.days, end)
    except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: a model that cannot load
        raise dg.Failure(description=f"purchase_plan: {exc}") from None
    out = Path(where.data) / "plans" / plan.last_day.isoformat()
    table, picture = planning.write_plan(plan, out)
    context.log.info(f"plan written to {table} and {picture}")
    return dg.MaterializeResult(
        metadata={
            "model_version": version,
            "window": f"{plan.first_day}..{plan.last_day}",
            "best_saving_usd": float(plan.result.table["saving_usd"].max() or 0.0),
            "leap_order": ", ".join(plan.orders["leap"]),
            "plan": dg.MetadataValue.md(table.read_text()),
            "saving_against_count": image_metadata(picture),
        }
    )
