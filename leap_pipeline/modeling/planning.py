"""Which GPU type to buy, and how many: the fleet's last days replayed with a candidate purchase
available to LEAP's routing, every duration and cost from predicted throughput.

A purchase is a type (from the spec table, or a new row: specs and a price), counts of devices
and a price per device-hour. The fleet as it is keeps the capacity its allocation logs show it
used at peak; each purchase adds its devices to that. The launches of the window arrive as they
did, each with the work it did (measured throughput x duration), and ``routing.place`` walks
each launch's preference list from the Ranker, as LEAP would have routed it: the first listed
type with free devices, else the one that frees first. Durations and costs come from the
predicted throughput (its interval from the model's own error spread), never from the truth: a
simulated fleet's oracle only scores the same placements afterwards (``true_cost``).

The count beyond which more devices save nothing is read from one more replay, with the
purchase unbounded: the most devices of the type LEAP's routing then holds at once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from leap_pipeline.data.warehouse import open_warehouse
from leap_pipeline.modeling.routing import PolicyOutcome, outcome, peak_devices, place
from leap_serving.decide.ranker import Ranker
from leap_serving.launch.contract import job_devices
from leap_serving.model.intervals import LEVEL
from leap_serving.model.published import LeapModel

HOURS_PER_YEAR = 24 * 365.25  # an amortized purchase price is spread over every hour
FP16_PEAK = "peak_bf16_tflops"  # the spec column the spreadsheet rules rank by
# the rules a team uses today to pick a type to buy, by their spec-sheet score (higher first)
BUYING_RULES = ("highest_fp16_peak_per_dollar", "highest_fp16_peak")
UNBOUNDED = 1e9  # devices: a purchase no launch could fill
MAX_COUNT = 10_000_000  # devices in one purchase: more is a typo
MAX_DAYS = 3660  # ten years of days in a window: more is a typo
# what a plan prices durations and costs at: the median prediction, or its interval's low end
PRICE_BY = ("throughput", "throughput_low")
INTERVAL_DRAWS = 500  # draws of the model's errors behind a saving's interval
MOVING_FAMILIES = 3  # the model families a plan names per purchase, by device-hours moved


class PlanInputError(ValueError):
    """A plan's input is unusable; the message names the field and the value."""


@dataclass(frozen=True)
class Purchase:
    """Devices of one type a team could buy: ``counts`` are the sizes to price, ``hourly_cost_usd``
    the price per device-hour (None: the spec table's)."""

    hardware_type: str
    counts: tuple[int, ...]
    hourly_cost_usd: float | None = None

    def __post_init__(self) -> None:
        if not self.hardware_type:
            raise PlanInputError("purchase: hardware_type='' names no type")
        if not self.counts:
            raise PlanInputError(f"purchase {self.hardware_type}: counts=() prices no count")
        for count in self.counts:
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise PlanInputError(
                    f"purchase {self.hardware_type}: count={count!r} is not a whole number >= 1"
                )
            if count > MAX_COUNT:
                raise PlanInputError(
                    f"purchase {self.hardware_type}: count={count!r} is more than {MAX_COUNT:,} "
                    "devices"
                )
        price = self.hourly_cost_usd
        if price is not None and not (isinstance(price, int | float) and 0 < price < math.inf):
            raise PlanInputError(
                f"purchase {self.hardware_type}: price={price!r} is not a positive number"
            )


_AMORTIZED = re.compile(r"^(?P<usd>[^/]+)/(?P<years>[^/]+?)y$")


def parse_purchase(text: str) -> Purchase:
    """``TYPE:COUNTS[:PRICE]``, as ``leap plan --buy`` takes it: COUNTS whole numbers joined by
    commas; PRICE USD per device-hour (``2.5``), or a purchase price per device and the years
    it is amortized over (``30000/3y``: every hour of those years pays its share)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise PlanInputError(f"--buy {text!r}: expected TYPE:COUNTS[:PRICE], e.g. H100:8,16:2.5")
    counts = []
    for item in parts[1].split(","):
        try:
            counts.append(int(item))
        except ValueError:
            raise PlanInputError(
                f"purchase {parts[0]}: count={item!r} is not a whole number >= 1"
            ) from None
    price = None
    if len(parts) == 3:
        price = _price(parts[0], parts[2])
    return Purchase(parts[0], tuple(counts), price)


def _price(hardware_type: str, text: str) -> float:
    amortized = _AMORTIZED.match(text.strip())
    try:
        if amortized:
            usd, years = float(amortized["usd"]), float(amortized["years"])
            if not (usd > 0 and years > 0):
                raise ValueError
            price = usd / (years * HOURS_PER_YEAR)
        else:
            price = float(text)
    except ValueError:
        price = math.nan
    if not 0 < price < math.inf:
        raise PlanInputError(
            f"purchase {hardware_type}: price={text!r} is not a positive number "
            "(USD per device-hour, or USD per device/YEARSy)"
        )
    return price


def planned_specs(
    specs: pl.DataFrame,
    purchases: Sequence[Purchase],
    new_types: pl.DataFrame | None = None,
    first_day: dt.date | None = None,
) -> pl.DataFrame:
    """The spec table the plan ranks with: ``specs`` and ``new_types``' rows (types not in it),
    each purchase's type at its price, and every purchased type available from ``first_day``
    (a type bought now serves the replayed days). A purchase of a type in neither is an error."""
    table = specs
    if new_types is not None and new_types.height:
        clash = sorted(set(new_types["hardware_type"]) & set(specs["hardware_type"]))
        if clash:
            raise PlanInputError(
                f"new type rows: hardware_type={clash[0]!r} is already in the spec table"
            )
        table = pl.concat([specs, new_types.select(specs.columns)], how="vertical_relaxed")
    known = set(table["hardware_type"])
    prices: dict[str, float] = {}
    for purchase in purchases:
        if purchase.hardware_type not in known:
            raise PlanInputError(
                f"purchase: hardware_type={purchase.hardware_type!r} is not in the spec table "
                "and no spec row names it (leap plan --new-type FILE)"
            )
        if purchase.hourly_cost_usd is not None:
            earlier = prices.setdefault(purchase.hardware_type, purchase.hourly_cost_usd)
            if earlier != purchase.hourly_cost_usd:
                raise PlanInputError(
                    f"purchase {purchase.hardware_type}: price={purchase.hourly_cost_usd!r} "
                    f"differs from the {earlier!r} another purchase of it gives"
                )
    bought = pl.col("hardware_type").is_in([p.hardware_type for p in purchases])
    columns = {
        "hourly_cost_usd": pl.col("hardware_type")
        .replace_strict(prices, default=pl.col("hourly_cost_usd"), return_dtype=pl.Float64)
        .alias("hourly_cost_usd")
    }
    if first_day is not None:
        columns["available_from"] = (
            pl.when(bought)
            .then(pl.min_horizontal(pl.col("available_from"), pl.lit(first_day)))
            .otherwise(pl.col("available_from"))
            .alias("available_from")
        )
    return table.with_columns(**columns)


def new_type_rows(frame: pl.DataFrame, required: Sequence[str]) -> pl.DataFrame:
    """Spec rows for types the table lacks, checked: each ``required`` column present and
    filled, the price a positive number. ``frame`` is typed to the spec contract already."""
    for name in required:
        missing = frame[name].is_null() if name in frame.columns else None
        if missing is None or missing.any():
            row = "" if missing is None else f" (row {int(missing.arg_max())})"
            raise PlanInputError(f"new type rows: {name} is missing{row}")
    repeated = frame.filter(pl.col("hardware_type").is_duplicated())
    if repeated.height:
        raise PlanInputError(
            f"new type rows: hardware_type={repeated['hardware_type'][0]!r} is given twice"
        )
    for name in ("hourly_cost_usd", "devices_per_host"):
        bad = frame.filter(~((pl.col(name) > 0) & pl.col(name).is_finite()))
        if bad.height:
            raise PlanInputError(
                f"new type {bad['hardware_type'][0]!r}: {name}={bad[name][0]!r} "
                "is not a positive number"
            )
    return frame


def window_launches(attempts: pl.DataFrame, first_day: dt.date, last_day: dt.date) -> pl.DataFrame:
    """The window's launches a plan replays: each attempt that measured a throughput and ran,
    with the work it did (``work_samples``: throughput x duration) and its arrival in seconds
    from the window's first midnight. An empty window is an error naming its days."""
    launches = attempts.filter(
        pl.col("ds").is_between(first_day, last_day)
        & (pl.col("throughput") > 0)
        & (pl.col("duration_s") > 0)
    )
    if launches.is_empty():
        raise PlanInputError(
            f"window {first_day}..{last_day}: no launch measured a throughput there "
            "(land those days first, or choose --days/--end)"
        )
    start = dt.datetime.combine(first_day, dt.time())
    return launches.with_columns(
        work_samples=pl.col("throughput") * pl.col("duration_s"),
        arrival_s=(pl.col("launch_ts") - pl.lit(start)).dt.total_microseconds() / 1e6,
    )


def logged_capacity(
    attempts: pl.DataFrame, allocations: pl.DataFrame, first_day: dt.date
) -> dict[str, float]:
    """Devices per type the fleet held at once at its peak, as the allocation logs show: every
    attempt that ran (failed ones too: they held their devices), hosts x devices per host."""
    start = dt.datetime.combine(first_day, dt.time())
    ran = attempts.filter(pl.col("duration_s") > 0).join(
        allocations.select("attempt_id", "num_hosts", "devices_per_host"), on="attempt_id"
    )
    arrival = (pl.col("launch_ts") - pl.lit(start)).dt.total_microseconds() / 1e6
    return peak_devices(
        ran.select(
            "hardware_type",
            start_s=arrival,
            end_s=arrival + pl.col("duration_s"),
            devices=(pl.col("num_hosts") * pl.col("devices_per_host")).cast(pl.Float64),
        )
    )


@dataclass(frozen=True)
class Predictions:
    """Per (launch, type the Ranker ranked): predicted throughput and its interval, the devices
    the launch takes there and the type's price; and each launch's preference list."""

    options: pl.DataFrame
    preferences: dict[str, list[str]]
    # why the Ranker ranked no candidate of some launches, and how many
    refused: dict[str, int] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)  # USD per device-hour, by type


def predict_launches(
    model: LeapModel,
    launches: pl.DataFrame,
    extra_types: Sequence[str],
    rank_by: str = "median",
    fleet_types: Collection[str] | None = None,
) -> Predictions:
    """Each launch ranked as a launcher would have asked on its day by a Ranker serving
    ``model`` (whose spec table is the plan's, ``planned_specs``), its candidates those of
    ``fleet_types`` it named (all it named, when None) with ``extra_types`` added, on the first
    day after the model's history snapshot: the window's launches asked today, of the fleet the
    model knows now. A type no device serves would otherwise sway the Ranker's relative
    filters (a premium type's bar). What a launch measured, and its logged day, are not part of
    the request."""
    ranker = Ranker(model=model, wait=True, max_model_age_days=None, rank_by=rank_by)
    specs = model.hardware_specs
    price = dict(zip(specs["hardware_type"], specs["hourly_cost_usd"], strict=True))
    host = dict(zip(specs["hardware_type"], specs["devices_per_host"], strict=True))
    extra = list(dict.fromkeys(extra_types))
    refused: dict[str, int] = {}
    measured = (
        "candidate_hardware",
        "throughput",
        "duration_s",
        "status",
        "work_samples",
        "arrival_s",
        "ds",
    )
    last = model.history_index.last_ds
    asked = None if last is None else last + dt.timedelta(days=1)
    rows, preferences = [], {}

    def keep(hardware_type: str) -> bool:  # a candidate the fleet has devices of, when given
        return fleet_types is None or hardware_type in fleet_types

    for _, part in launches.group_by("ds", maintain_order=True):
        jobs = [
            (
                {k: v for k, v in row.items() if k not in measured},
                sorted({*(h for h in row["candidate_hardware"] if keep(h)), *extra}),
            )
            for row in part.iter_rows(named=True)
        ]
        for (job, _), ranking in zip(
            jobs, ranker.rank_many(jobs, launch_date=asked or part["ds"][0]), strict=True
        ):
            attempt = job["attempt_id"]
            preferences[attempt] = ranking.preference_list
            if not ranking.ranking:
                reason = ranking.reason or "no candidate ranked"
                refused[reason] = refused.get(reason, 0) + 1
            requested = job.get("requested_devices_per_host")
            for c in ranking.ranking:
                devices = job_devices(
                    [job["num_trainers"]],
                    None if requested is None else [requested],
                    [host[c.hardware_type]],
                )
                rows.append(
                    (
                        attempt,
                        c.hardware_type,
                        c.predicted_throughput,
                        _or(c.throughput_low, c.predicted_throughput),
                        _or(c.throughput_high, c.predicted_throughput),
                        float(devices[0]),
                        float(price[c.hardware_type]),
                    )
                )
    options = pl.DataFrame(rows, schema=_OPTIONS, orient="row")
    return Predictions(options, preferences, refused, {h: float(p) for h, p in price.items()})


def _or(value: float | None, otherwise: float) -> float:
    return otherwise if value is None else value


_OPTIONS = pl.Schema(
    {
        "attempt_id": pl.String,
        "hardware_type": pl.String,
        "throughput": pl.Float64,
        "throughput_low": pl.Float64,
        "throughput_high": pl.Float64,
        "devices": pl.Float64,
        "hourly_cost_usd": pl.Float64,
    }
)


def priced(options: pl.DataFrame, launches: pl.DataFrame, throughput: str) -> pl.DataFrame:
    """``options`` with each launch's ``duration_s`` and ``cost_usd`` there: its work at the
    ``throughput`` column's rate (a prediction, or the truth)."""
    duration = pl.col("work_samples") / pl.col(throughput)
    return (
        options.join(launches.select("attempt_id", "work_samples"), on="attempt_id")
        .with_columns(
            duration_s=duration,
            cost_usd=duration / 3600.0 * pl.col("devices") * pl.col("hourly_cost_usd"),
        )
        .drop("work_samples")
    )


@dataclass
class PlanResult:
    """A plan: one row per purchase and count in ``table``, the fleet as it is (``baseline``),
    each purchase's placements (for ``true_cost``) and the launches no fleet type could take."""

    table: pl.DataFrame
    baseline: PolicyOutcome
    capacity: dict[str, float]
    saturation: dict[str, int]
    placements: dict[tuple[str, int], pl.DataFrame] = field(repr=False)
    baseline_placements: pl.DataFrame = field(repr=False)
    unplaceable: int = 0


def plan_purchases(
    launches: pl.DataFrame,
    predictions: Predictions,
    capacity: Mapping[str, float],
    purchases: Sequence[Purchase],
    price_by: str = "throughput",
    with_type: Mapping[str, Predictions] | None = None,
) -> PlanResult:
    """Each purchase at each count against the fleet as it is (``capacity``: devices per type;
    a type absent has none): predicted cost, device-hours, mean queueing delay, the saving with
    its interval (``saving_interval``), the model families that move to the type and, per
    purchase, the count beyond which more save nothing. ``predictions`` rank the launches as
    they are; ``with_type`` (by purchased type) ranks them with a type the fleet lacks added,
    so no purchase's candidates change the fleet as it is or another purchase."""
    fleet = {h: float(c) for h, c in capacity.items() if c > 0}
    with_type = dict(with_type or {})

    def listed_in(ranked: Predictions) -> dict[str, list[str]]:
        return {
            a: [h for h in hs if h in fleet or any(p.hardware_type == h for p in purchases)]
            for a, hs in ranked.preferences.items()
        }

    listed = listed_in(predictions)
    # where a launch goes when no listed type has room for it: the type it logged, if the fleet
    # as it is has that type and the Ranker kept it, else its first listed type the fleet has; a
    # launch with neither is left out of every replay alike
    fallback = {}
    for attempt, logged in launches.select("attempt_id", "hardware_type").iter_rows():
        hs = listed.get(attempt, [])
        keep = logged in fleet and logged in hs
        fallback[attempt] = logged if keep else next((h for h in hs if h in fleet), None)
    jobs = launches.select(
        "attempt_id",
        "arrival_s",
        "model_type",
        logged_hardware=pl.col("attempt_id").replace_strict(fallback, default=None),
    )
    unplaceable = int(jobs["logged_hardware"].null_count())
    if not fleet:
        raise PlanInputError("capacity: the fleet as it is has no device (no allocation logs?)")
    if unplaceable == jobs.height:
        why = max(predictions.refused, key=predictions.refused.get, default="")
        raise PlanInputError(
            "no launch of the window could be placed on the fleet as it is"
            + (f": the Ranker said {why!r}" if why else "")
        )
    jobs = jobs.drop_nulls("logged_hardware")
    if price_by not in PRICE_BY:
        raise PlanInputError(f"price_by={price_by!r} is not one of {list(PRICE_BY)}")
    every = pl.concat([predictions.options, *(p.options for p in with_type.values())])
    options = priced(
        every.unique(["attempt_id", "hardware_type"], keep="first"), launches, price_by
    )
    lists_with = {h: listed_in(ranked) for h, ranked in with_type.items()}

    def replay(fleet_now: Mapping[str, float], bought: str | None = None) -> pl.DataFrame:
        ranked = lists_with.get(bought, listed) if bought else listed
        lists = {a: [h for h in hs if fleet_now.get(h, 0) > 0] for a, hs in ranked.items()}
        # the types the fleet has then: a launch runs slow against those, not against a type
        # another purchase would bring
        there = options.filter(pl.col("hardware_type").is_in(list(fleet_now)))
        return place(jobs, there, lists, fleet_now)

    base = replay(fleet)
    price = {
        **predictions.prices,
        **{h: p for r in with_type.values() for h, p in r.prices.items()},
    }
    rows, placements, saturation = [], {}, {}
    for purchase in purchases:
        h = purchase.hardware_type
        unbounded = replay({**fleet, h: fleet.get(h, 0.0) + UNBOUNDED}, h)
        on_type = unbounded.filter(pl.col("hardware_type") == h)
        peak = peak_devices(
            on_type.select(
                "hardware_type",
                "devices",
                start_s="start_s",
                end_s=pl.col("start_s") + pl.col("duration_s"),
            )
        ).get(h, 0.0)
        saturation[h] = max(0, math.ceil(peak - fleet.get(h, 0.0)))
        for count in purchase.counts:
            bought = {**fleet, h: fleet.get(h, 0.0) + count}
            got = replay(bought, h)
            placements[(h, count)] = got
            planned = outcome(got)
            low, high = saving_interval(base, got, options, launches)
            rows.append(
                {
                    "hardware_type": h,
                    "count": count,
                    "hourly_cost_usd": price.get(h),
                    "cost_usd": planned.cost,
                    "device_hours": planned.device_hours,
                    "mean_queue_delay_s": planned.mean_queue_delay_s,
                    "saving_usd": float(base["cost_usd"].sum() - got["cost_usd"].sum()),
                    "saving_low_usd": low,
                    "saving_high_usd": high,
                    "families_moving": moving_families(base, got, jobs, h),
                }
            )
    table = pl.DataFrame(rows, schema=PLAN_SCHEMA) if rows else PLAN_SCHEMA.to_frame()
    table = table.with_columns(
        saturation_count=pl.col("hardware_type").replace_strict(saturation, return_dtype=pl.Int64)
    )
    return PlanResult(
        table,
        outcome(base),
        fleet,
        saturation,
        placements,
        base,
        unplaceable,
    )


PLAN_SCHEMA = pl.Schema(
    {
        "hardware_type": pl.String,
        "count": pl.Int64,
        "hourly_cost_usd": pl.Float64,
        "cost_usd": pl.Float64,
        "device_hours": pl.Float64,
        "mean_queue_delay_s": pl.Float64,
        "saving_usd": pl.Float64,
        "saving_low_usd": pl.Float64,
        "saving_high_usd": pl.Float64,
        "families_moving": pl.String,
    }
)


def saving_interval(
    before: pl.DataFrame,
    after: pl.DataFrame,
    options: pl.DataFrame,
    launches: pl.DataFrame,
    draws: int = INTERVAL_DRAWS,
    seed: int = 0,
) -> tuple[float, float]:
    """The interval of the saving of these placements at the Ranker's level (``LEVEL``, 80%),
    if the model errs as its intervals say. A launch left where it was saves nothing at any
    throughput, so only the moved ones count. Each draw gives every (model type, hardware type)
    one error, normal in log throughput with the spread its interval implies
    (``ln(high / median) / z``): a model's error on a family's launches on a type is mostly one
    error. The interval is the draws' percentiles at the same level (10th and 90th) around their
    median, set on the saving itself. It says how far the model's spread alone moves the
    saving; it does not see a bias the model shares across families."""
    keys = ["attempt_id", "hardware_type"]
    moved = before.select("attempt_id", was="hardware_type").join(
        after.select("attempt_id", now="hardware_type"), on="attempt_id"
    )
    moved = moved.filter(pl.col("was") != pl.col("now"))
    if moved.is_empty():
        return 0.0, 0.0
    upper = 50.0 + 50.0 * LEVEL  # the interval's upper percentile: 90 for an 80% interval
    z = statistics.NormalDist().inv_cdf(upper / 100.0)  # the interval is +- z sigma
    spread = options.select(
        *keys,
        "cost_usd",
        sigma=((pl.col("throughput_high") / pl.col("throughput")).log() / z)
        .fill_nan(0.0)
        .fill_null(0.0),
    )
    family = launches.select("attempt_id", "model_type")

    def side(column: str) -> pl.DataFrame:
        return (
            moved.select("attempt_id", hardware_type=column)
            .join(spread, on=keys)
            .join(family, on="attempt_id")
            .with_columns(pair=pl.concat_str("model_type", "hardware_type", separator="|"))
        )

    old, new = side("was"), side("now")
    pairs = sorted(set(old["pair"]) | set(new["pair"]))
    index = {pair: i for i, pair in enumerate(pairs)}
    errors = np.random.default_rng(seed).standard_normal((draws, len(pairs)))

    def drawn_cost(part: pl.DataFrame) -> np.ndarray:
        at = np.array([index[pair] for pair in part["pair"]], dtype=np.int64)
        # throughput x exp(sigma e): the cost of the same work divided by it
        scale = np.exp(-errors[:, at] * part["sigma"].to_numpy())
        return scale @ part["cost_usd"].to_numpy()

    # each drawn cost's mean is above the point's (a lognormal error's mean is exp(sigma^2/2)),
    # and over many pairs their sum settles there: the spread is the draws', around the point
    drawn = drawn_cost(old) - drawn_cost(new)
    point = float(old["cost_usd"].sum() - new["cost_usd"].sum())
    spread = drawn - np.median(drawn)
    low, high = np.percentile(spread, [100.0 - upper, upper])
    return point + float(low), point + float(high)


def moving_families(
    before: pl.DataFrame, after: pl.DataFrame, jobs: pl.DataFrame, hardware_type: str
) -> str:
    """The model families whose launches moved to ``hardware_type``, by the device-hours they
    moved, with each one's share: ``"dlrm 61%, bert 22%, ..."``."""
    moved = (
        after.filter(pl.col("hardware_type") == hardware_type)
        .join(before.select("attempt_id", was="hardware_type"), on="attempt_id")
        .filter(pl.col("was") != hardware_type)
        .join(jobs.select("attempt_id", "model_type"), on="attempt_id")
        .group_by("model_type")
        .agg(hours=(pl.col("devices") * pl.col("duration_s")).sum())
        .sort(["hours", "model_type"], descending=[True, False])
    )
    total = moved["hours"].sum()
    if not total:
        return ""
    return ", ".join(
        f"{family} {hours / total:.0%}" for family, hours in moved.head(MOVING_FAMILIES).iter_rows()
    )


def true_cost(placements: pl.DataFrame, launches: pl.DataFrame, truth: pl.DataFrame) -> float:
    """The placements priced by the truth: each launch's work at its true median throughput on
    the type it was placed on (``truth``: ``attempt_id``, ``hardware_type``, ``true_median``),
    on the devices and at the price the plan gave it: its planned cost scaled by the true
    duration over the planned one. Only scores a plan; a plan never reads it."""
    keys = ["attempt_id", "hardware_type"]
    joined = placements.join(
        truth.select(*keys, "true_median"), on=keys, how="left", maintain_order="left"
    ).join(
        launches.select("attempt_id", "work_samples"),
        on="attempt_id",
        how="left",
        maintain_order="left",
    )
    missing = joined.filter(pl.col("true_median").is_null() | pl.col("work_samples").is_null())
    if missing.height:
        raise ValueError(f"no true throughput or work for {missing.select(keys).head(3).rows()}")
    true_duration = pl.col("work_samples") / pl.col("true_median")
    return float(
        joined.select((pl.col("cost_usd") * true_duration / pl.col("duration_s")).sum()).item()
    )


def rule_scores(specs: pl.DataFrame, types: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per buying rule, each type's spec-sheet score (higher: bought first)."""
    rows = specs.filter(pl.col("hardware_type").is_in(list(types)))
    peak = dict(zip(rows["hardware_type"], rows[FP16_PEAK], strict=True))
    price = dict(zip(rows["hardware_type"], rows["hourly_cost_usd"], strict=True))
    return {
        "highest_fp16_peak_per_dollar": {h: peak[h] / price[h] for h in types},
        "highest_fp16_peak": {h: peak[h] for h in types},
    }


def spearman(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Spearman's rank correlation of two scorings of the same keys (ties at their mean rank)."""
    from scipy.stats import spearmanr

    keys = sorted(a)
    return float(spearmanr([a[k] for k in keys], [b[k] for k in keys]).statistic)


def write_plan(plan: Plan, folder: Path) -> tuple[Path, Path]:
    """The plan as Markdown (``plan.md``: its table, then the purchases in LEAP's order beside
    the buying rules') and its picture (``plan.png``: saving against count per purchase, with
    its interval), written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    title = f"Buying, priced on {plan.first_day}..{plan.last_day}"
    picture = folder / "plan.png"
    draw_plan(plan.result.table, picture, title)
    table = folder / "plan.md"
    table.write_text(plan_markdown(plan.result, title, picture.name) + "\n" + orders_markdown(plan))
    return table, picture


def plan_markdown(result: PlanResult, title: str, picture: str | None = None) -> str:
    base = result.baseline
    lines = [
        f"# {title}",
        "",
        f"The fleet as it is: ${base.cost:,.0f} over {base.device_hours:,.0f} device-hours, a "
        f"mean queueing delay of {base.mean_queue_delay_s:,.0f} s"
        + (
            f"; {result.unplaceable} launch{'es' if result.unplaceable > 1 else ''} no type of "
            "it could take, left out"
            if result.unplaceable
            else ""
        )
        + ".",
        "",
        "| type | devices | USD/device-h | cost (USD) | device-hours | queue (s) | saving (USD) "
        "| saving interval | families moving | more save nothing beyond |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result.table.iter_rows(named=True):
        lines.append(
            f"| {row['hardware_type']} | {row['count']} | {row['hourly_cost_usd']:.2f} "
            f"| {row['cost_usd']:,.0f} | {row['device_hours']:,.0f} "
            f"| {row['mean_queue_delay_s']:,.0f} | {row['saving_usd']:,.0f} "
            f"| {row['saving_low_usd']:,.0f} .. {row['saving_high_usd']:,.0f} "
            f"| {row['families_moving'] or '-'} | {row['saturation_count']} |"
        )
    if picture:
        lines += ["", f"![saving against count]({picture})"]
    return "\n".join(lines) + "\n"


def draw_plan(table: pl.DataFrame, path: Path, title: str) -> None:
    """Saving against count, one line per purchase, its interval shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2))
    try:
        for (hardware_type,), part in table.sort("count").group_by(
            "hardware_type", maintain_order=True
        ):
            counts = part["count"].to_numpy()
            (line,) = axes.plot(counts, part["saving_usd"], marker="o", label=hardware_type)
            low, high = part["saving_low_usd"].to_numpy(), part["saving_high_usd"].to_numpy()
            axes.fill_between(counts, low, high, color=line.get_color(), alpha=0.2)
            # a purchase priced at one count has a band of no width: its interval as a bar
            middle = part["saving_usd"].to_numpy()
            axes.errorbar(
                counts,
                middle,
                yerr=[middle - low, high - middle],
                fmt="none",
                ecolor=line.get_color(),
                capsize=3,
            )
        axes.axhline(0.0, color="grey", linewidth=0.8)
        axes.set_xlabel("devices bought")
        axes.set_ylabel("saving against the fleet as it is (USD)")
        axes.set_title(title, fontsize=10)
        axes.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)


@dataclass
class Plan:
    """A plan over a window: its ``result``, the window's days, the spec table it ranked with
    and the purchases' order by each buying rule beside LEAP's (``orders``)."""

    result: PlanResult
    first_day: dt.date
    last_day: dt.date
    specs: pl.DataFrame = field(repr=False)
    orders: dict[str, list[str]] = field(default_factory=dict)


def plan_window(
    attempts: pl.DataFrame,
    allocations: pl.DataFrame,
    model: LeapModel,
    purchases: Sequence[Purchase],
    first_day: dt.date,
    last_day: dt.date,
    capacity: Mapping[str, float] | None = None,
    new_types: pl.DataFrame | None = None,
) -> Plan:
    """``leap plan`` as a function: the window's launches (``attempts`` and ``allocations`` of
    ``first_day`` .. ``last_day``) replayed with each purchase, ranked by ``model`` with the
    purchased types (``new_types`` adds rows to its spec table). ``capacity`` overrides the
    logged capacity of the types it names."""
    if not purchases:
        raise PlanInputError("purchases=[]: name at least one type to buy (--buy TYPE:COUNTS)")
    launches = window_launches(attempts, first_day, last_day)
    fleet = logged_capacity(attempts, allocations, first_day)
    known = set(model.hardware_specs["hardware_type"])
    if new_types is not None:
        known |= set(new_types["hardware_type"])
    for hardware_type, devices in (capacity or {}).items():
        if hardware_type not in known:
            raise PlanInputError(
                f"capacity: hardware_type={hardware_type!r} is not in the spec table"
            )
        if not (isinstance(devices, int | float) and devices >= 0 and math.isfinite(devices)):
            raise PlanInputError(f"capacity {hardware_type}={devices!r} is not a number >= 0")
        fleet[hardware_type] = float(devices)
    for purchase in purchases:
        owned = fleet.get(purchase.hardware_type, 0.0)
        if purchase.hourly_cost_usd is not None and owned > 0:
            # the replay cannot tell bought devices from owned ones: one price per type
            raise PlanInputError(
                f"purchase {purchase.hardware_type}: price={purchase.hourly_cost_usd!r} for a "
                f"type the fleet has ({owned:.0f} devices at the spec table's price); a price is "
                "for a type the fleet lacks"
            )
    specs = planned_specs(model.hardware_specs, purchases, new_types, first_day)
    # the served model with the plan's spec table (its lookup index built again from it)
    planned = dataclasses.replace(model, hardware_specs=specs, spec_table=None)
    types = [p.hardware_type for p in purchases]
    # a type the fleet lacks is a candidate of every launch (no launcher could have named it);
    # more of a type it has serves the launches that list it, as the fleet as it is does
    new = dict.fromkeys(h for h in types if fleet.get(h, 0.0) <= 0)
    owned = [h for h, devices in fleet.items() if devices > 0]
    predictions = predict_launches(planned, launches, [], fleet_types=owned)
    with_type = {h: predict_launches(planned, launches, [h], fleet_types=owned) for h in new}
    result = plan_purchases(launches, predictions, fleet, purchases, with_type=with_type)
    best = result.table.group_by("hardware_type").agg(pl.col("saving_usd").max())
    scores = {"leap": dict(best.iter_rows()), **rule_scores(specs, list(dict.fromkeys(types)))}
    orders = {
        name: sorted(score, key=lambda h, s=score: (-s[h], h)) for name, score in scores.items()
    }
    return Plan(result, first_day, last_day, specs, orders)


def orders_markdown(plan: Plan) -> str:
    """The purchases in LEAP's order and in each buying rule's, and what following a rule's
    first pick instead of LEAP's is predicted to cost over the window."""
    best = dict(
        plan.result.table.group_by("hardware_type").agg(pl.col("saving_usd").max()).iter_rows()
    )
    lines = [
        "| order by | first to buy .. last | predicted saving of its first pick (USD) |",
        "|---|---|---|",
    ]
    for name, order in plan.orders.items():
        lines.append(f"| {name} | {', '.join(order)} | {best[order[0]]:,.0f} |")
    leap_first = plan.orders["leap"][0]
    for name in BUYING_RULES:
        first = plan.orders[name][0]
        if first != leap_first:
            lines.append(
                f"\n{name} buys {first} first; LEAP buys {leap_first}: "
                f"{best[leap_first] - best[first]:,.0f} USD more saved over the window, "
                "as predicted."
            )
    return "\n".join(lines) + "\n"


def plan_warehouse(
    warehouse: Path,
    model: LeapModel,
    purchases: Sequence[Purchase],
    days: int,
    end: dt.date | None = None,
    capacity: Mapping[str, float] | None = None,
    new_types: pl.DataFrame | None = None,
) -> Plan:
    """``plan_window`` over the ``days`` of the warehouse file that end at ``end`` (default:
    the last day landed), opened read-only: what ``leap plan`` and the ``purchase_plan`` asset
    run."""
    if not 1 <= days <= MAX_DAYS:
        raise PlanInputError(f"days={days}: the window needs 1 to {MAX_DAYS} days")
    with open_warehouse(warehouse, read_only=True) as wh:
        landed = wh.read("job_attempts", columns=["ds"])["ds"].max()
        if landed is None:
            raise PlanInputError(f"warehouse {warehouse}: no launch has landed")
        if end is not None and end > landed:
            raise PlanInputError(f"end={end}: after the last day landed ({landed})")
        end = end or landed
        first = end - dt.timedelta(days=days - 1)
        attempts = wh.read("job_attempts", first, end)
        allocations = wh.read("allocations", first, end)
    return plan_window(attempts, allocations, model, purchases, first, end, capacity, new_types)


def parse_day(text: str, field: str = "--end") -> dt.date:
    """A window's last day as ``YYYY-MM-DD``; anything else is an error naming ``field``."""
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise PlanInputError(f"{field} {text!r} is not a date (YYYY-MM-DD)") from None
    if day.year < 2:
        raise PlanInputError(f"{field} {text!r} is before any window")
    return day
