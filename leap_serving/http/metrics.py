"""What ``/metrics`` tells Prometheus: requests by route and status, their latency, empty
rankings by reason code, and the model version serving.

Each app holds a registry of its own (not the process-wide default), so two apps in one process
(the tests, the benchmark) never count each other's requests. Route labels are the service's
routes, anything else counts as ``other``: a caller probing paths cannot grow the label set.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# a ranking's latency: sub-millisecond to the two-second deadline
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _ModelCollector(Collector):
    """The model serving, read from the Ranker when scraped (never stale)."""

    def __init__(self, ranker: Any) -> None:
        self.ranker = ranker

    def collect(self) -> Iterable[Any]:
        version = self.ranker.model_version
        info = InfoMetricFamily("leap_serve_model", "The model version the Ranker serves")
        info.add_metric([], {"version": version or "", "model_uri": str(self.ranker.model_uri)})
        yield info
        ready = GaugeMetricFamily("leap_serve_model_ready", "1 once a model is loaded")
        ready.add_metric([], 1.0 if self.ranker.wait_ready(0) else 0.0)
        yield ready


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
