"""Rankings run off the event loop, each under the deadline, and the status each answer gets.

The Ranker is synchronous and CPU-bound (the tree walk releases the GIL), so every call runs in
a small pool of threads of the app's own; the event loop only reads bodies and writes answers,
so one slow ranking never holds up another request's parsing or a probe. A call past the
deadline is answered 504 at once: its thread finishes in the background (a thread cannot be
stopped) and its answer is dropped; a call still queued when its deadline passes never runs.
When more calls wait than the pool can drain within a deadline, new ones are refused with 503
instead of joining a queue they would time out in.

An empty ranking's reason code decides the status: the caller's launch (``invalid_job``,
``invalid_candidates``, ``launch_date``) is a 422 with the ranking as the body, no model yet is
a 503, a bug is a 500; ``routing_off`` and ``prediction`` are answers (200).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .bodies import Launch, RequestError

T = TypeVar("T")

STATUS_BY_REASON = {
    "invalid_job": 422,
    "invalid_candidates": 422,
    "launch_date": 422,
    "model_loading": 503,
    "no_model": 503,
    "internal_error": 500,
}
MAX_PENDING_PER_THREAD = 64


def status_of(reason_code: str | None) -> int:
    """The HTTP status of a ranking with this reason code (None: ranked, 200)."""
    return STATUS_BY_REASON.get(reason_code, 200) if reason_code is not None else 200


class RankingPool:
    """The Ranker's calls, in threads, under a deadline."""

    def __init__(self, ranker: Any, threads: int, deadline_s: float) -> None:
        self.ranker, self.deadline_s = ranker, deadline_s
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="leap-serve")
        self.max_pending = threads * MAX_PENDING_PER_THREAD
        self.pending = 0
        # the budget caps' calling convention: ``rank(..., budget=)`` and 3-tuples in ``rank_many``
        self.takes_budget = "budget" in inspect.signature(ranker.rank).parameters

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the pool; 504 past the deadline, 503 when the queue is full."""
        if self.pending >= self.max_pending:
            raise RequestError(
                503,
                None,
                f"{self.pending} calls are waiting for a ranking thread: retry shortly",
                "busy",
            )
        self.pending += 1
        future = asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        try:
            return await asyncio.wait_for(future, self.deadline_s)
        except TimeoutError:
            raise RequestError(
                504,
                None,
                f"no answer within the deadline of {self.deadline_s:g} "
                "s: the launcher should use its own order",
                "deadline",
            ) from None
        finally:
            self.pending -= 1

    def check_budgets(self, launches: Sequence[Launch], where: str = "") -> None:
        """422 naming ``budget`` when a launch carries caps this Ranker cannot take."""
        if self.takes_budget:
            return
        for i, launch in enumerate(launches):
            if launch.budget is not None:
                field = f"launches[{i}].budget" if where else "budget"
                raise RequestError(
                    422,
                    field,
                    f"{field}: this server's Ranker takes no budget caps",
                    "budget_unsupported",
                )

    def rank_one(self, launch: Launch) -> Any:
        if launch.budget is not None:
            return self.ranker.rank(
                launch.job, launch.candidates, launch_date=launch.launch_date, budget=launch.budget
            )
        return self.ranker.rank(launch.job, launch.candidates, launch_date=launch.launch_date)

    def rank_many(self, launches: Sequence[Launch]) -> list[Any]:
        """One ``rank_many`` call: one model and one date for the whole batch."""
        budgets = any(launch.budget is not None for launch in launches)
        items = [
            (launch.job, launch.candidates, launch.budget)
            if budgets
            else (launch.job, launch.candidates)
            for launch in launches
        ]
        return self.ranker.rank_many(items, launch_date=launches[0].launch_date)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
