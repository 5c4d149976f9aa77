"""The Iterator's work in the server's Prometheus metrics.

Queues (``loom_queue_depth{queue=...}``, the shape every background stage shares):

- ``iterator_<level>``: work messages in that level's queue (SQS or SQLite), sampled every
  second by the workers — the queues are shared by every replica, so every replica shows
  the same depth. Capacity 0: the queues are unbounded. "Dropped" counts stale duplicate
  messages this server discarded (work another copy had done); no work is ever refused.
- ``iterator_chunks``: chunks emitted by running jobs and not yet delivered (or acked),
  at the last completion check: what waits for consumers.

Counters of this server (sum them over replicas): steps committed, chunks emitted, chunks
re-read by duplicate messages, jobs finished by state, ranges of stalled jobs sent again,
jobs deleted.
Everything is read at scrape time, so the workers pay nothing for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from server.iterator.service import IteratorService
from server.iterator.worker import StepWorkers
from server.runtime.metrics import Metrics

__all__ = ["register"]


class _Counters(Collector):
    """Reads the workers' and the service's statistics when Prometheus scrapes."""

    def __init__(self, workers: StepWorkers, service: IteratorService) -> None:
        self._workers = workers
        self._service = service

    def collect(self) -> Iterator[Metric]:
        p = self._workers
        steps = CounterMetricFamily("loom_iterator_steps", "Pipeline steps this server committed")
        steps.add_metric([], p.steps)
        chunks = CounterMetricFamily(
            "loom_iterator_chunks_emitted", "Chunks this server wrote to a job's ledger"
        )
        chunks.add_metric([], p.chunks_emitted)
        reread = CounterMetricFamily(
            "loom_iterator_chunks_reread",
            "Chunks read again by a duplicate work message and discarded unemitted",
        )
        reread.add_metric([], p.reads_wasted)
        finished = CounterMetricFamily(
            "loom_iterator_jobs_finished",
            "Jobs this server's checker moved to a final state",
            labels=["state"],
        )
        for state in ("completed", "failed"):
            finished.add_metric([state], self._service.finished.get(state, 0))
        resent = CounterMetricFamily(
            "loom_iterator_ranges_resent",
            "Open ranges of stalled jobs sent to the queue again (work a queue lost)",
        )
        resent.add_metric([], self._service.ranges_resent)
        deleted = CounterMetricFamily(
            "loom_iterator_jobs_deleted",
            "Finished jobs this server deleted (DeleteJob, or past their retention)",
        )
        deleted.add_metric([], self._service.deleter.deleted_jobs)
        yield from (steps, chunks, reread, finished, resent, deleted)


def register(
    metrics: Metrics, workers: StepWorkers, service: IteratorService, levels: Sequence[str]
) -> None:
    """Registers the level queues, the undelivered chunks and the counters."""
    for index, name in enumerate(levels):
        metrics.queue(
            f"iterator_{name}",
            lambda i=index: workers.depths[i],  # type: ignore[misc]
            0,
            lambda i=index: workers.dropped_at[i],  # type: ignore[misc]
        )
    metrics.queue("iterator_chunks", lambda: service.unsettled_chunks, 0, lambda: 0)
    metrics.registry.register(_Counters(workers, service))
