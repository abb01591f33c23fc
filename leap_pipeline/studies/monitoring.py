"""The report's monitoring over its nights: interval coverage and routing value, night by night.

Each night's evaluation holds its published model's interval coverage on day D
(``evaluation.interval_scores``) and, on a simulated fleet, day D replayed under each routing
policy (``routing.day_routing``). The report keeps both per night and sums them over the nights,
so the median ranking and the risk-aware one stand side by side.
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
from scipy.stats import binom, spearmanr

from leap_pipeline.modeling import routing
from leap_serving.model.intervals import COVERAGE_BAND, LEVEL, interval_metric_name

# a hardware type's coverage is held to the floor on nights it had at least this many attempts
BUSY_TYPE_ATTEMPTS = 200
# a rank correlation over fewer nights says nothing
MIN_CORRELATION_NIGHTS = 5


def night_monitoring(day: dt.date, evaluation: dict) -> dict:
    """What a night's evaluation says beyond w20: the published model's interval coverage on
    day D (``evaluation.interval_scores``) and routing value (``routing.day_routing``)."""
    out: dict = {"ds": day.isoformat()}
    published = evaluation.get("overall", {}).get("published")
    if published is not None:
        out["published_w20"] = published["w20"]
    scores = evaluation.get("intervals")
    if scores is not None:
        out |= {
            "interval_level": scores["level"],
            interval_metric_name(scores["level"]): scores["coverage"],
            "by_hardware_type": scores["by_hardware_type"],
            "by_history": scores["by_history"],
            "interval_width_median": scores["width_median"],
        }
    replay = evaluation.get("routing")
    if replay is not None and "policies" in replay:
        out["routing_capture"] = replay["capture"]["leap"]
        out["routing_capture_lower"] = replay["capture"]["leap_lower"]
        out["trials_named"] = replay["trials_named"]
        out["routing"] = replay["policies"]
    return out


def monitoring_summary(per_night: list[dict]) -> dict:
    """Over the report's nights: the coverage's median and range, each busy hardware type's
    coverage (``busy_type_coverage``), and each routing policy's totals (cost, device-hours)
    and mean shares, so the median ranking and the risk-aware one stand side by side."""
    out: dict = {}
    name = next((k for night in per_night for k in night if k.startswith("coverage_")), None)
    if name is not None:
        shares = [n[name] for n in per_night if name in n]
        out[f"{name}_median"] = float(np.median(shares))
        out[f"{name}_range"] = [min(shares), max(shares)]
        level = next((n["interval_level"] for n in per_night if "interval_level" in n), LEVEL)
        out[f"{name}_by_busy_type"] = busy_type_coverage(per_night, level)
    replays = [n["routing"] for n in per_night if "routing" in n]
    if replays:
        totals = {}
        for policy in replays[0]:
            outcomes = [r[policy] for r in replays]
            totals[policy] = {
                "cost": sum(o["cost"] for o in outcomes),
                "device_hours": sum(o["device_hours"] for o in outcomes),
                "slow_share": float(np.mean([o["slow_share"] for o in outcomes])),
                "mean_queue_delay_s": float(np.mean([o["mean_queue_delay_s"] for o in outcomes])),
            }
        logged, best = totals["as_logged"]["cost"], totals["oracle"]["cost"]
        for policy in totals:
            totals[policy]["capture"] = routing.capture(logged, totals[policy]["cost"], best)
        out["routing_totals"] = totals
        captured = [n["routing_capture"] for n in per_night if n.get("routing_capture") is not None]
        out["routing_capture_median"] = float(np.median(captured)) if captured else None
        out["w20_vs_routing_capture"] = proxy_correlation(per_night)
    return out


def proxy_correlation(per_night: list[dict]) -> dict | None:
    """Does the offline metric track the decision's value? Spearman's rank correlation, over
    the nights, between the published model's w20 on day D and the share of the oracle's
    routing saving it captured that day (the ML Test Score's "offline proxy metrics correlate
    with online impact", with the simulated fleet's replay standing in for the online
    impact). None with fewer than ``MIN_CORRELATION_NIGHTS`` nights holding both, or when
    either does not vary."""
    pairs = [
        (n["published_w20"], n["routing_capture"])
        for n in per_night
        if n.get("published_w20") is not None and n.get("routing_capture") is not None
    ]
    if len(pairs) < MIN_CORRELATION_NIGHTS:
        return None
    w20, capture = (np.array(v, dtype=float) for v in zip(*pairs, strict=True))
    if np.ptp(w20) == 0 or np.ptp(capture) == 0:
        return None
    result = spearmanr(w20, capture)
    return {
        "spearman": float(result.statistic),
        "p_value": float(result.pvalue),
        "nights": len(pairs),
    }


def busy_type_coverage(per_night: list[dict], level: float) -> dict:
    """Each hardware type's coverage over the nights it had ``BUSY_TYPE_ATTEMPTS`` attempts or
    more: pooled over those nights, its lowest night, and how many nights fell under the band's
    floor beside how many would from sampling alone were the intervals exactly calibrated (a
    type with 200 attempts covers 80% +- 2.8 points a night by chance). With exact calibration,
    ``all_nights_at_floor_by_chance`` is the chance that no busy type's night falls under the
    floor: why a per-night floor is judged against sampling, not as a bar every night clears.
    """
    floor = COVERAGE_BAND[0]
    nights: dict[str, list[tuple[int, float]]] = {}
    for night in per_night:
        for hardware_type, group in night.get("by_hardware_type", {}).items():
            if group["rows"] >= BUSY_TYPE_ATTEMPTS:
                nights.setdefault(hardware_type, []).append((group["rows"], group["coverage"]))
    types: dict[str, dict] = {}
    all_at_floor = 1.0
    for hardware_type, seen in sorted(nights.items()):
        rows = np.array([r for r, _ in seen])
        coverage = np.array([c for _, c in seen])
        # a night is under the floor when fewer than floor * rows throughputs were covered
        by_chance = binom.cdf(np.array([math.ceil(floor * r) - 1 for r in rows]), rows, level)
        all_at_floor *= float(np.prod(1.0 - by_chance))
        types[hardware_type] = {
            "nights": len(seen),
            "pooled": float(np.sum(rows * coverage) / rows.sum()),
            "lowest": float(coverage.min()),
            "nights_under_floor": int(np.sum(coverage < floor)),
            "nights_under_floor_by_chance": float(by_chance.sum()),
        }
    return {"floor": floor, "types": types, "all_nights_at_floor_by_chance": all_at_floor}
