"""The bounded background fan-out stage for large posts (Yammer's 300K-inbox announcements).

A post over the synchronous limit becomes a job: its ordered recipient list, cut in chunks
of `chunk_size` inboxes, each chunk one batch call to the store. A fixed pool of workers
drains a bounded queue of jobs; when the queue is full, `submit` refuses at once
(RESOURCE_EXHAUSTED) rather than let announcements pile up in memory.

Up to `chunks_in_flight` chunks of one job are delivered at once (a distributed engine
needs several requests in flight to hide its round trips; a single writer needs one: the
InboxStore engine's default, `storage.engines.INBOX_STORES`), and `done` only ever advances
over the contiguous prefix of finished chunks.

Progress is written to the store (at most every `progress_interval_s`, and always at the
end), so GetDelivery survives restarts. Because delivery is idempotent (last_message_id
only grows) and recipients are processed in a reproducible order (and stored with the
delivery), the stored `done` count is a safe resume point: a retried PostMessage restarts
from it, a server adopting the delivery after its owner died restarts from it
(`server.inbox.adoption`), and re-doing a chunk whose progress write was lost changes
nothing. A storage failure that outlasts a few retries stops the job as FAILED (adopted
again once the engine is back); stopping the server leaves its unfinished jobs RUNNING with
their progress and a released claim, so the next server to look adopts them at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from opentelemetry.trace import SpanContext

from server.inbox.trimming import Trimmer
from server.runtime import tracing
from server.runtime.errors import LoomError, ResourceExhausted
from server.runtime.logs import get_logger
from server.runtime.workers import WorkerPool
from storage.ports import DeliveryRecord, DeliveryState, InboxStore
from storage.slices import slices

__all__ = ["RELEASED_MS", "FanoutJob", "FanoutStage"]

_log = get_logger("inbox.fanout")
_RETRY_DELAYS_S = (0.05, 0.25, 1.0)
_SHUTDOWN = "interrupted by a server shutdown; another server resumes it"
RELEASED_MS = 0
"""updated_at_ms of a delivery its server let go of (shutdown): adoptable at once."""


@dataclass
class FanoutJob:
    """One background delivery: its stored record (kept current) and its recipients."""

    record: DeliveryRecord
    recipients: list[str]
    link: SpanContext | None = field(default_factory=tracing.current_link)
    """The span that queued the job (tracing on): the fan-out's own trace links to it."""


class FanoutStage:
    """Worker pool + bounded queue that delivers large posts chunk by chunk."""

    def __init__(
        self,
        store: InboxStore,
        trimmer: Trimmer,
        *,
        workers: int,
        queue_size: int,
        chunk_size: int,
        progress_interval_s: float,
        rate_per_s: float = 0.0,
        chunks_in_flight: int = 1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._rate = rate_per_s
        self._in_flight = max(1, chunks_in_flight)
        self._next_slot = 0.0
        self._trimmer = trimmer
        self._queue: asyncio.Queue[FanoutJob] = asyncio.Queue(max(1, queue_size))
        self._chunk = max(1, chunk_size)
        self._interval = progress_interval_s
        self._clock = clock
        self._active: dict[str, FanoutJob] = {}
        self._pool = WorkerPool("inbox-fanout", workers, self._work)
        self.refused = 0
        """Posts refused because the queue was full (metrics)."""

    def start(self) -> None:
        """Starts the workers (inside the running loop)."""
        self._pool.start()

    async def stop(self) -> None:
        """Cancels the workers and releases every unfinished job: stored RUNNING at its
        progress, with a claim time that lets the next server adopt it at once."""
        await self._pool.stop()
        for job in list(self._active.values()):
            await self._finish(job, "running", _SHUTDOWN, updated_at_ms=RELEASED_MS)

    def now_ms(self) -> int:
        """The stage's clock in milliseconds (progress timestamps)."""
        return int(self._clock() * 1000)

    def live(self, delivery_id: str) -> DeliveryRecord | None:
        """The current record of a job queued or running in this process."""
        job = self._active.get(delivery_id)
        return None if job is None else job.record

    def posting(self, thread_id: str, message_id: int) -> bool:
        """Whether a delivery of (thread_id, message_id) is queued or running here."""
        return any(
            job.record.thread_id == thread_id and job.record.message_id == message_id
            for job in self._active.values()
        )

    def has_room(self) -> bool:
        """Whether `submit` would be accepted now."""
        return not self._queue.full()

    def depth(self) -> int:
        """Jobs waiting for a worker (metrics)."""
        return self._queue.qsize()

    def room(self) -> int:
        """Jobs `submit` would still accept now."""
        return self._queue.maxsize - self._queue.qsize()

    def submit(self, job: FanoutJob) -> DeliveryRecord:
        """Queues `job` (no-op when the same delivery is already active here)."""
        current = self._active.get(job.record.delivery_id)
        if current is not None:
            return current.record
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self.refused += 1
            raise ResourceExhausted(
                "inbox fan-out queue is full; retry PostMessage later"
            ) from None
        self._active[job.record.delivery_id] = job
        return job.record

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                rec = job.record
                with tracing.linked(
                    "inbox.fanout",
                    [job.link],
                    {"loom.delivery_id": rec.delivery_id, "loom.recipients": rec.total},
                ):
                    await self._run(job)
            except LoomError as exc:
                await self._finish(job, "failed", f"storage failure: {exc}")
            finally:
                self._queue.task_done()

    async def _run(self, job: FanoutJob) -> None:
        rec = job.record
        last_write = self._clock()
        window: deque[tuple[asyncio.Task[None], Sequence[str]]] = deque()

        async def retire_oldest() -> None:
            nonlocal rec, last_write
            oldest, delivered = window.popleft()
            await oldest
            self._trimmer.on_delivered(delivered)
            job.record = rec = replace(
                rec, done=rec.done + len(delivered), updated_at_ms=self.now_ms()
            )
            if self._clock() - last_write >= self._interval:
                await self._store.save_delivery(rec)
                last_write = self._clock()

        stopped = ""
        try:
            for chunk in slices(job.recipients, self._chunk, start=rec.done):
                await self._pace(len(chunk))
                if await self._store.deleted_threads([rec.thread_id]):
                    # DeleteThreads came in: deliver no more (the sweep removes the rest).
                    stopped = "stopped: the thread was deleted"
                    break
                task = asyncio.ensure_future(self._deliver(rec.thread_id, rec.message_id, chunk))
                window.append((task, chunk))
                # Retire finished chunks in order; wait for the oldest when the window is full.
                while window and (len(window) >= self._in_flight or window[0][0].done()):
                    await retire_oldest()
            while window:
                await retire_oldest()
        finally:
            for task, _ in window:
                task.cancel()
            await asyncio.gather(*(task for task, _ in window), return_exceptions=True)
        await self._finish(job, "done", stopped)

    async def _pace(self, deliveries: int) -> None:
        """Holds the whole stage to `rate_per_s` deliveries per second (0: unpaced).

        Background fan-out is the one workload that could take a whole core for seconds;
        pacing it leaves CPU for the interactive calls (the bulkhead isolation test), while
        the default rate still lands a 300,000-inbox announcement in ~6 s (Yammer: < 10 s).
        """
        if self._rate <= 0:
            return
        now = time.monotonic()
        start = max(self._next_slot, now)
        self._next_slot = start + deliveries / self._rate
        if start > now:
            await asyncio.sleep(start - now)

    async def _deliver(self, thread_id: str, message_id: int, inboxes: Sequence[str]) -> None:
        with tracing.child("inbox.fanout.batch", {"loom.inboxes": len(inboxes)}):
            await self._deliver_batch(thread_id, message_id, inboxes)

    async def _deliver_batch(self, thread_id: str, message_id: int, inboxes: Sequence[str]) -> None:
        for delay in (*_RETRY_DELAYS_S, None):
            try:
                await self._store.deliver_unread(thread_id, message_id, inboxes)
            except LoomError:
                if delay is None:
                    raise
                await asyncio.sleep(delay)
            else:
                return

    async def _finish(
        self,
        job: FanoutJob,
        state: DeliveryState,
        error: str,
        *,
        updated_at_ms: int | None = None,
    ) -> None:
        at = self.now_ms() if updated_at_ms is None else updated_at_ms
        job.record = replace(job.record, state=state, error=error, updated_at_ms=at)
        self._active.pop(job.record.delivery_id, None)
        try:
            await self._store.save_delivery(job.record)
            if state == "done":
                # Only a resume needs the list; dropped, it names no inbox an erasure
                # must reach.
                await self._store.drop_recipients(job.record.delivery_id)
        except LoomError as exc:
            # The engine is down: the stored record stays RUNNING and goes stale; a server
            # adopts it once it has had no progress for stall_after_s.
            _log.warning(
                "delivery progress not saved", delivery_id=job.record.delivery_id, error=str(exc)
            )
