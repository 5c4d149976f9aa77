"""Prometheus metrics of one server: RPCs, bulkheads, breakers, background queues, build.

One `Metrics` per server (its own registry, so two servers in one test process never share
counters). What an SRE alerts on:

- ``loom_rpc_requests_total{method,code}``, ``loom_rpc_duration_seconds{method}`` (histogram),
  ``loom_rpc_in_flight{method}`` — recorded by the interceptor for every Loom call (with
  tracing on, each latency bucket carries the trace id of a call in it as an OpenMetrics
  exemplar: scrape with ``Accept: application/openmetrics-text``);
- ``loom_rpc_unmapped_errors_total{method,exception}`` — exceptions no layer mapped to a
  status, answered INTERNAL: each one is a bug, logged with its traceback, so any increase
  deserves an alert (the exception label names the class for the operator, never the caller);
- ``loom_bulkhead_in_use{method}``, ``loom_bulkhead_waiting{method}``,
  ``loom_bulkhead_capacity{method}``, ``loom_bulkhead_refusals_total{method}``;
- ``loom_breaker_state{engine}`` (0 closed, 1 half-open, 2 open),
  ``loom_breaker_open{engine}`` (1 while calls fail fast);
- ``loom_queue_depth{queue}``, ``loom_queue_capacity{queue}``, ``loom_queue_dropped_total{queue}``
  — every background stage (inbox fan-out and trimming, iterator, templates) registers one;
- ``loom_build_info{version,python,grpcio}``.

Gauges that mirror live objects (bulkheads, breakers, queue depths) are read at scrape time
by a collector, so the hot path pays nothing for them.
"""

from __future__ import annotations

import asyncio
import platform
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.runtime.breaker import BreakerState, CircuitBreaker
from server.runtime.bulkhead import Bulkhead

__all__ = ["Metrics", "QueueMetrics"]

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BREAKER_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


@dataclass(frozen=True, slots=True)
class QueueMetrics:
    """A background stage's queue, read at scrape time: its depth, bound and drops so far."""

    name: str
    depth: Callable[[], int]
    capacity: int
    dropped: Callable[[], int]
    """Items the stage refused or discarded since start (queue full, admission control)."""


class _Live(Collector):
    """Reads bulkheads, breakers and queue depths when Prometheus scrapes."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._m
        in_use = GaugeMetricFamily(
            "loom_bulkhead_in_use", "Calls holding a slot", labels=["method"]
        )
        waiting = GaugeMetricFamily(
            "loom_bulkhead_waiting", "Calls waiting for a slot", labels=["method"]
        )
        capacity = GaugeMetricFamily(
            "loom_bulkhead_capacity", "Slots of the method's bulkhead", labels=["method"]
        )
        for bulkhead in m.bulkheads():
            in_use.add_metric([bulkhead.name], bulkhead.in_use)
            waiting.add_metric([bulkhead.name], bulkhead.waiting)
            capacity.add_metric([bulkhead.name], bulkhead.max_concurrency)
        state = GaugeMetricFamily(
            "loom_breaker_state", "0 closed, 1 half-open, 2 open", labels=["engine"]
        )
        is_open = GaugeMetricFamily(
            "loom_breaker_open", "1 while calls to the engine fail fast", labels=["engine"]
        )
        for breaker in m.breakers():
            value = _BREAKER_VALUE[breaker.state]
            state.add_metric([breaker.name], value)
            is_open.add_metric([breaker.name], 1 if value == 2 else 0)
        depth = GaugeMetricFamily("loom_queue_depth", "Items waiting", labels=["queue"])
        limit = GaugeMetricFamily("loom_queue_capacity", "Queue bound", labels=["queue"])
        dropped = CounterMetricFamily(
            "loom_queue_dropped", "Items a background queue refused", labels=["queue"]
        )
        for queue in m.queues.values():
            depth.add_metric([queue.name], queue.depth())
            limit.add_metric([queue.name], queue.capacity)
            dropped.add_metric([queue.name], queue.dropped())
        yield from (in_use, waiting, capacity, state, is_open, depth, limit, dropped)
        for name, (doc, label, read) in m.counters.items():
            family = CounterMetricFamily(name, doc, labels=[label])
            for what, total in read().items():
                family.add_metric([what], total)
            yield family


class Metrics:
    """The registry of one server, and the recording calls the runtime makes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "loom_rpc_requests", "Loom RPCs by final status", ["method", "code"], registry=r
        )
        self.latency = Histogram(
            "loom_rpc_duration_seconds",
            "Loom RPC duration, as the server saw it",
            ["method"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("loom_rpc_in_flight", "Loom RPCs running", ["method"], registry=r)
        self.refusals = Counter(
            "loom_bulkhead_refusals", "Calls refused by a full bulkhead", ["method"], registry=r
        )
        self.unmapped = Counter(
            "loom_rpc_unmapped_errors",
            "Exceptions no layer mapped to a status (answered INTERNAL; each is a bug)",
            ["method", "exception"],
            registry=r,
        )
        build = Gauge(
            "loom_build_info", "Build of this server", ["version", "python", "grpcio"], registry=r
        )
        build.labels(_version(), platform.python_version(), grpc.__version__).set(1)
        self.running = 0
        """Loom calls between arrival and answer, all methods (the drain waits for 0)."""
        self._idle: asyncio.Event | None = None
        self.queues: dict[str, QueueMetrics] = {}
        self.counters: dict[str, tuple[str, str, Callable[[], Mapping[str, int]]]] = {}
        """Counters a service keeps itself, read at scrape time (`counter`)."""
        self.bulkheads: Callable[[], Iterable[Bulkhead]] = lambda: ()
        self.breakers: Callable[[], Iterable[CircuitBreaker]] = lambda: ()
        r.register(_Live(self))
        self._http: Any = None

    def call_started(self, method: str) -> None:
        """A Loom call arrived."""
        self.in_flight.labels(method).inc()
        self.running += 1

    def call_ended(
        self, method: str, code: grpc.StatusCode, seconds: float, trace_id: str | None = None
    ) -> None:
        """A Loom call was answered; a traced call's trace id becomes the exemplar of its
        latency bucket (shown by the OpenMetrics exposition)."""
        self.in_flight.labels(method).dec()
        self.requests.labels(method, code.name).inc()
        self.latency.labels(method).observe(seconds, {"trace_id": trace_id} if trace_id else None)
        self.running -= 1
        if self.running == 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Waits until no Loom call is running (at most `timeout_s`); whether it got there."""
        self._idle = asyncio.Event()
        if self.running == 0:
            return True
        try:
            await asyncio.wait_for(self._idle.wait(), max(0.0, timeout_s))
        except TimeoutError:
            return False
        return True

    def queue(
        self, name: str, depth: Callable[[], int], capacity: int, dropped: Callable[[], int]
    ) -> QueueMetrics:
        """Registers a background queue; all three figures are read at scrape time."""
        found = QueueMetrics(name, depth, capacity, dropped)
        self.queues[name] = found
        return found

    def counter(
        self, name: str, doc: str, label: str, read: Callable[[], Mapping[str, int]]
    ) -> None:
        """Registers a counter family whose values (by `label`) `read` returns at scrape
        time, e.g. ``loom_inbox_deletions{what="phantoms_cleaned"}``."""
        self.counters[name] = (doc, label, read)

    def serve(self, host: str, port: int) -> int:
        """Starts the HTTP exposition on `host:port` (0 picks a port); returns the port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._http = server
        return int(server.server_port)

    def close(self) -> None:
        """Stops the HTTP exposition."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


def _version() -> str:
    try:
        return metadata.version("loom")
    except metadata.PackageNotFoundError:
        return "unknown"
