"""Progress of a long fit, as records of the ``leap.progress`` logger a person can follow.

Each step says what finished, the time so far and an estimate of the rest from the work units
done. The CLI draws the records on one line of a terminal (plain lines otherwise); a Dagster run
puts them in its log (``python_logs.managed_python_loggers`` in ``dagster.yaml``).
"""

from __future__ import annotations

import logging
import threading
import time

LOGGER_NAME = "leap.progress"
LOGGER = logging.getLogger(LOGGER_NAME)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """Steps of one task against an estimate of its total work."""

    def __init__(self, task: str, total_units: float, logger: logging.Logger = LOGGER) -> None:
        self.task, self.total, self.done = task, float(total_units), 0.0
        self.phase = ""  # what is being fitted, set by the caller before each fit
        self.logger = logger
        self.start = time.perf_counter()

    def advance(self, what: str, units: float = 1.0) -> None:
        self.done = min(self.total, self.done + units)
        if not self.logger.isEnabledFor(logging.INFO):
            return
        elapsed = time.perf_counter() - self.start
        rest = elapsed * (self.total - self.done) / self.done if self.done > 0 else float("nan")
        left = f"about {_duration(rest)} left" if rest == rest else "estimating"
        step = f"{self.phase}: {what}" if self.phase else what
        self.logger.info(
            "%s | %s | %s elapsed, %s (%.0f%%)",
            self.task,
            step,
            _duration(elapsed),
            left,
            100 * self.done / max(self.total, 1e-9),
            extra={"leap_finished": self.done >= self.total * (1 - 1e-9)},
        )

    def drop(self, units: float) -> None:
        """Work the estimate counted that will not be done (EM converged early)."""
        self.total = max(self.done, self.total - units)

    def rounds(self, estimator, units: float, step: str = "", done: str = "") -> BoostingRounds:
        """One fit's boosting rounds as steps of this task (see ``BoostingRounds``)."""
        return BoostingRounds(self, estimator, units, step, done)


# seconds between two reports of a long fit's boosting rounds (``BoostingRounds``)
ROUNDS_INTERVAL_S = 10.0


class BoostingRounds:
    """One fit running in this process as steps of ``progress``: its boosting rounds as it
    goes, then ``done`` when it ends.

    The booster counts its rounds as it fits (``rounds_done_``, a callback's count): a thread
    reads it every ``ROUNDS_INTERVAL_S`` and advances ``progress`` by their share of ``units``,
    so a report never runs inside the fit's loop. When the fit ends, the rest
    of ``units`` is advanced as ``done`` (early stopping ends a fit before its last round).
    """

    def __init__(
        self, progress: Progress | None, estimator, units: float, step: str = "", done: str = ""
    ) -> None:
        self.progress, self.estimator, self.units = progress, estimator, units
        self.step, self.done = step, done or f"{step}fitted"
        self.advanced = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> BoostingRounds:
        if self.progress is not None and self.progress.logger.isEnabledFor(logging.INFO):
            self._thread = threading.Thread(target=self._watch, name="leap-rounds", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, error_type, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.progress is not None and error_type is None:
            self.progress.advance(self.done, self.units - self.advanced)

    def _watch(self) -> None:
        total = self.estimator.max_iter
        shown = 0
        while not self._stop.wait(ROUNDS_INTERVAL_S):
            rounds = getattr(self.estimator, "rounds_done_", 0)
            if rounds <= shown or rounds >= total:
                continue
            share = self.units * (rounds - shown) / total
            shown = rounds
            self.advanced += share
            self.progress.advance(f"{self.step}round {rounds:,}/{total:,}", share)


class TerminalLine(logging.Handler):
    """Progress records on one line updated in place on a terminal, plain lines elsewhere."""

    def __init__(self, stream) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.in_place = stream.isatty()
        self.width = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        if self.in_place:
            padding = " " * max(0, self.width - len(text))
            self.stream.write(f"\r{text}{padding}")
            self.width = len(text)
            if getattr(record, "leap_finished", False):
                self.end_line()
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def end_line(self) -> None:
        if self.in_place and self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0
