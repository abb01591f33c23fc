"""What the nightly schedule does: a pure plan from what happened, read from the records.

The tick at 02:00 (in the calendar's timezone) for day D asks for every night from D back over
``CATCH_UP_NIGHTS``, after the newest trained night, that is neither trained (a registered
version names it) nor being trained (a live run targets it: the schedule's, a backfill's, one a
person launched), as long as its day and its window's days have landed or can be read from the
source; a run's range never covers a night another live run trains. A day that landed with no
measured attempt has no night: there is nothing to score a model on. A night whose day arrived
late, or whose run was killed, is simply still untrained at the next tick, which takes it then.
Days of a window that were never landed are landed by a run of their own first. Runs may
overlap, so the order is not the queue's to keep: a night checks its window again when it reads
it (``training.night_inputs``) and waits for days still landing. Whether a live run's process
still runs is ``liveness.py``'s; a tick that cannot read the warehouse is planned again by
``nightly_retry``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import dagster as dg

CATCH_UP_NIGHTS = 7  # untrained nights a tick looks back over
MAX_RELANDINGS = 2  # a day landed without its features is landed again this often, then waits
NIGHTS_TAG = "leap/nights"  # "FIRST..LAST" on every run the schedule asks for
ATTEMPT_TAG = "leap/attempt"
# Dagster's own tags for the partitions a run targets: one partition, or a range (a single-run
# backfill's, a schedule's, a range a person materialized)
PARTITION_TAG = "dagster/partition"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def tagged_days(tags: Mapping[str, str]) -> list[dt.date]:
    """The day partitions a run targets, read from Dagster's tags (``dagster/partition``, or the
    range start and end); empty when it targets none, or something that is not a day."""
    try:
        if tags.get(PARTITION_TAG):
            return [dt.date.fromisoformat(tags[PARTITION_TAG])]
        if tags.get(RANGE_START_TAG) and tags.get(RANGE_END_TAG):
            return days_between(
                dt.date.fromisoformat(tags[RANGE_START_TAG]),
                dt.date.fromisoformat(tags[RANGE_END_TAG]),
            )
    except ValueError:
        return []
    return []


def span_text(first: dt.date, last: dt.date | None) -> str:
    return f"{first.isoformat()}..{'' if last is None else last.isoformat()}"


def days_between(first: dt.date, last: dt.date) -> list[dt.date]:
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


def whole_landings(
    logged: Collection[dt.date],
    featured: Collection[dt.date],
    empty: Collection[dt.date],
    live: Collection[dt.date],
) -> set[dt.date]:
    """The days whose landing finished: in the landing log with their feature rows built, or
    landed with no measured attempt, or on a live run's hands now. A landing killed between
    its source tables and its feature table leaves a day logged with no features; counted as
    landed, every night over it would wait for it and fail until a person landed it again, so
    the plan lands it again instead."""
    return {d for d in logged if d in featured or d in empty or d in live}


@dataclass(frozen=True)
class NightlyState:
    """What happened so far, read from the records: days whose landing finished
    (``whole_landings``: empty days included), nights with a registered version, nights a live
    run is working on, and how many runs of a span already ended without finishing (so a retry
    gets a new run key)."""

    landed: Collection[dt.date]
    trained: Collection[dt.date]
    in_flight: Collection[dt.date] = ()
    source_has_day: Callable[[dt.date], bool] = lambda day: True
    failed_attempts: dict[str, int] = field(default_factory=dict)
    empty: Collection[dt.date] = ()  # landed days with no measured attempt: no night to score
    refused: Collection[dt.date] = ()  # days whose last landing its audit refused
    # logged days whose landing stopped before their features (``whole_landings``): landed again
    unbuilt: Collection[dt.date] = ()


def plan_tick(
    day: dt.date,
    first_day: dt.date,
    state: NightlyState,
    window_days: int,
    min_window_days: int,
    landing_assets: Sequence[dg.AssetKey],
    catch_up_nights: int = CATCH_UP_NIGHTS,
) -> list[dg.RunRequest] | dg.SkipReason:
    """The run requests for the tick of ``day`` (yesterday at the tick), or why there are none."""
    if day < first_day:
        return dg.SkipReason(f"no partition for {day}: the calendar starts on {first_day}")
    first_night = first_day + dt.timedelta(days=min_window_days)
    earliest = max(first_night, day - dt.timedelta(days=catch_up_nights - 1))
    newest = max((n for n in state.trained if n <= day), default=None)
    if newest is not None:  # a gap before the newest trained night is a backfill's to fill
        earliest = max(earliest, newest + dt.timedelta(days=1))
    wanted = (
        [
            n
            for n in days_between(earliest, day)
            if n not in state.trained and n not in state.in_flight and n not in state.empty
        ]
        if earliest <= day
        else []
    )
    ready: list[dt.date] = []
    blocked = ""
    for night in wanted:
        needed = days_between(max(first_day, night - dt.timedelta(days=window_days)), night)
        bad = [d for d in needed if d in state.refused]
        if bad:  # retrying cannot help: a person fixes the day's files, then materializes it
            blocked = (
                f"night {night} waits for {bad[0]}, whose landing was refused by its audit: fix "
                f"its files and materialize {bad[0]}"
            )
            break
        stuck = _stuck(needed, state)
        if stuck:  # a refusal the landing log does not record (a snapshot or feature audit's)
            blocked = (
                f"night {night} waits for {stuck[0]}, whose landing stopped before its feature "
                f"table and failed {landings_failed(state.failed_attempts, stuck[0])} times "
                f"again: see those runs, fix the day and materialize {stuck[0]}"
            )
            break
        missing = [d for d in needed if d not in state.landed and not state.source_has_day(d)]
        if missing:
            blocked = f"night {night} waits for {missing[0]}, which has not arrived in the source"
            if missing[0] in state.unbuilt:
                blocked = (
                    f"night {night} waits for {missing[0]}, which landed without its features "
                    "and is no longer in the source: land it from its files"
                )
            break
        ready.append(night)
    requests: list[dg.RunRequest] = []
    if ready:
        a = ready[0]
        unlanded = [
            d
            for d in days_between(max(first_day, a - dt.timedelta(days=window_days)), a)
            if d not in state.landed and d < a
        ]
        if unlanded:
            requests.append(_request(unlanded[0], unlanded[-1], "land", state, landing_assets))
        # one run per span that no live run trains: a range never covers a night in flight
        # (the days between spans are that run's; the queue runs them in order)
        for first, last in free_spans(ready, state.in_flight):
            requests.append(_request(first, last, "nightly", state))
        return requests
    # nothing to train: land what arrived so the next tick has less to do
    if day < first_night and day not in state.landed and state.source_has_day(day):
        start = min(d for d in days_between(first_day, day) if d not in state.landed)
        stuck = _stuck(days_between(start, day), state)
        if not stuck:
            return [_request(start, day, "land", state, landing_assets)]
        blocked = (
            f"{stuck[0]} landed without its features and failed to land again "
            f"{landings_failed(state.failed_attempts, stuck[0])} times: see those runs, "
            f"fix the day and materialize {stuck[0]}"
        )
    if blocked:
        return dg.SkipReason(blocked)
    if day < first_night:
        return dg.SkipReason(
            f"night {day} needs {min_window_days} days of features before it: the first night "
            f"is {first_night}"
        )
    return dg.SkipReason(f"night {day} and the week before it are trained or being trained")


def landings_failed(failed: Mapping[str, int], day: dt.date) -> int:
    """How many planned landings of spans holding ``day`` ended without finishing, summed over
    the spans (``failed`` as ``NightlyState.failed_attempts`` counts them per span): a heuristic
    of how often landing the day has failed, whatever span each attempt asked for."""
    total = 0
    for key, count in failed.items():
        kind, _, span = key.partition(":")
        first, _, last = span.partition("..")
        try:
            start, end = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
        except ValueError:
            continue
        if kind == "land" and start <= day <= end:
            total += count
    return total


def _stuck(days: Collection[dt.date], state: NightlyState) -> list[dt.date]:
    """Of ``days``, those landed without their features whose landings failed
    ``MAX_RELANDINGS`` times: landing them again would fail the same way (an audit's refusal
    the landing log does not record), so a person looks first."""
    failed = state.failed_attempts
    return [d for d in days if d in state.unbuilt and landings_failed(failed, d) >= MAX_RELANDINGS]


def free_spans(
    nights: Sequence[dt.date], in_flight: Collection[dt.date]
) -> list[tuple[dt.date, dt.date]]:
    """``nights`` (ascending) as (first, last) spans, cut wherever a night in flight lies between
    two of them, so that no span's range holds a night another live run is training."""
    spans: list[tuple[dt.date, dt.date]] = []
    for night in nights:
        if spans and not any(spans[-1][1] < d < night for d in in_flight):
            spans[-1] = (spans[-1][0], night)
        else:
            spans.append((night, night))
    return spans


def _request(
    first: dt.date,
    last: dt.date,
    kind: str,
    state: NightlyState,
    assets: Sequence[dg.AssetKey] | None = None,
) -> dg.RunRequest:
    span = span_text(first, last)
    attempt = state.failed_attempts.get(f"{kind}:{span}", 0)
    return dg.RunRequest(
        run_key=f"{kind}:{span}" + (f":retry{attempt}" if attempt else ""),
        asset_selection=list(assets) if assets else None,
        tags={
            "dagster/asset_partition_range_start": first.isoformat(),
            "dagster/asset_partition_range_end": last.isoformat(),
            NIGHTS_TAG if kind == "nightly" else "leap/landing": span,
            ATTEMPT_TAG: str(attempt),
        },
    )
