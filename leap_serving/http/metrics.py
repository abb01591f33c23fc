"""What ``/metrics`` tells Prometheus: requests by route and status, their latency, empty
rankings by reason code, the model version serving and its age in nights, and how the
pipeline's newest night ended (promoted, held, failed), so an alert can fire on a model that
falls behind or a night that failed.

Each app holds a registry of its own (not the process-wide default), so two apps in one process
(the tests, the benchmark) never count each other's requests. Route labels are the service's
routes, anything else counts as ``other``: a caller probing paths cannot grow the label set.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from ..registry.registered import last_night

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# a ranking's latency: sub-millisecond to the two-second deadline
LAST_NIGHT_TTL_S = 60.0  # the registry's record of the newest night, read at most this often
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _ModelCollector(Collector):
    """The model serving, read from the Ranker when scraped (never stale), and what the
    pipeline recorded of its newest night, read from the registry at most every
    ``LAST_NIGHT_TTL_S`` (a scrape every few seconds must not become a registry call each)."""

    def __init__(self, ranker: Any) -> None:
        self.ranker = ranker
        self._last_night: tuple[float, dict | None] = (-math.inf, None)
        self._reading = threading.Lock()  # held by the one thread reading the registry

    def last_night(self) -> dict | None:
        """The record as last read; when older than ``LAST_NIGHT_TTL_S`` a thread of its own
        reads it again. A scrape (and ``create_app``, whose registry describes this collector)
        never waits on the registry: one that hangs left /healthz waiting seconds behind it."""
        read_at, record = self._last_night
        if time.monotonic() - read_at >= LAST_NIGHT_TTL_S and self._reading.acquire(False):
            threading.Thread(target=self._read, name="leap-serve-last-night", daemon=True).start()
        return record

    def _read(self) -> None:
        try:
            try:
                record = last_night(str(self.ranker.model_uri))
            except Exception:  # a registry that cannot be reached: no record, never a 500
                record = None
            self._last_night = (time.monotonic(), record)
        finally:
            self._reading.release()

    def collect(self) -> Iterable[Any]:
        version = self.ranker.model_version
        info = InfoMetricFamily("leap_serve_model", "The model version the Ranker serves")
        info.add_metric([], {"version": version or "", "model_uri": str(self.ranker.model_uri)})
        yield info
        ready = GaugeMetricFamily("leap_serve_model_ready", "1 once a model is loaded")
        ready.add_metric([], 1.0 if self.ranker.wait_ready(0) else 0.0)
        yield ready
        stats = getattr(self.ranker, "stats", None)  # a stand-in ranker may have none
        stats = stats() if callable(stats) else {}
        age = stats.get("model_age_days")
        if age is not None:  # days since the night the model was trained for
            yield GaugeMetricFamily(
                "leap_serve_model_age_days",
                "Days since the history snapshot of the model serving (its night's day)",
                value=float(age),
            )
            # night D is trained on the morning of D+1: a model one day old is up to date
            yield GaugeMetricFamily(
                "leap_serve_nights_behind",
                "Nights trained or due since the one the serving model was trained for",
                value=float(max(0, age - 1)),
            )
        night = self.last_night()
        if night is not None:
            info = InfoMetricFamily(
                "leap_serve_last_night", "How the pipeline's newest night ended"
            )
            info.add_metric([], {k: str(night.get(k) or "") for k in ("day", "outcome", "at")})
            yield info
            yield GaugeMetricFamily(
                "leap_serve_last_night_failed",
                "1 when the pipeline's newest night failed before its decision and the model "
                "serving is older than that night",
                value=1.0 if night_failed(night, stats.get("model_day")) else 0.0,
            )


def night_failed(night: dict, serving_day: Any) -> bool:
    """Whether the newest night failed with nothing of it serving: a failed re-run of a night
    whose model already serves (a backfill run again) costs the fleet nothing, so no alert."""
    if night.get("outcome") != "failed":
        return False
    day = night.get("day")
    return day is None or serving_day is None or str(serving_day) < str(day)  # no day: alarm


class ServeMetrics:
    """The app's metrics and its registry."""

    def __init__(self, ranker: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "leap_serve_requests",
            "HTTP requests answered",
            ("route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "leap_serve_request_seconds",
            "Time from a request's start to its answer",
            ("route",),
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.empty = Counter(
            "leap_serve_empty_rankings",
            "Rankings answered empty, by the Ranker's reason code",
            ("reason_code",),
            registry=self.registry,
        )
        self.registry.register(_ModelCollector(ranker))

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def count_empty(self, rankings: Iterable[Any]) -> None:
        for ranking in rankings:
            if ranking.reason_code is not None:
                self.empty.labels(ranking.reason_code).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
