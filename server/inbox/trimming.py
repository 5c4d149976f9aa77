"""Probabilistic asynchronous trimming: Yammer's fix for the inbox that grew without bound.

Trimming only on read left a never-read inbox growing until its partition took Cassandra
(and the site) down. So every delivery to an inbox schedules, with probability p, an
asynchronous trim of that inbox to `max_entries`. An inbox receiving n deliveries is
trimmed about n*p times; between two trims it grows by about 1/p rows, so it stays near
the cap whatever its traffic, and the cost is one whole-inbox read per 1/p deliveries.

Trims are deduplicated per inbox while pending and queued in a bounded queue served by a
few workers; when the queue is full a request is dropped (a later delivery will ask
again). Trimming is best effort: a failed trim is logged and forgotten.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence

from server.inbox.listing import order_key
from server.runtime.errors import LoomError
from server.runtime.logs import get_logger
from server.runtime.workers import WorkerPool
from storage.ports import InboxEntry, InboxStore

__all__ = ["Trimmer", "sample_indexes", "trim_victims"]

_log = get_logger("inbox.trim")


def sample_indexes(n: int, p: float, rng: random.Random) -> list[int]:
    """Indexes of `range(n)` each chosen independently with probability `p`.

    Skips ahead by geometric gaps, so the cost is O(n*p) random draws rather than n: a
    300,000-inbox announcement at p = 0.02 draws ~6,000 numbers, not 300,000.
    """
    if n <= 0 or p <= 0:
        return []
    if p >= 1:
        return list(range(n))
    log_q = math.log1p(-p)
    out: list[int] = []
    i = -1
    while True:
        # 1 - random() lies in (0, 1], so the log is finite.
        i += 1 + int(math.log(1.0 - rng.random()) / log_q)
        if i >= n:
            return out
        out.append(i)


def trim_victims(entries: Sequence[InboxEntry], max_entries: int) -> list[InboxEntry]:
    """The rows beyond the newest `max_entries` (the oldest activity goes first)."""
    if len(entries) <= max_entries:
        return []
    return sorted(entries, key=order_key)[max_entries:]


class Trimmer:
    """Schedules and runs inbox trims; `start()` and `stop()` bound its workers' life."""

    def __init__(
        self,
        store: InboxStore,
        *,
        max_entries: int,
        probability: float,
        queue_size: int,
        workers: int,
        scan_limit: int,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self.max_entries = max_entries
        self._p = probability
        self._queue: asyncio.Queue[str] = asyncio.Queue(max(1, queue_size))
        self._pending: set[str] = set()
        self._scan_limit = max(scan_limit, max_entries + 1)
        self._rng = rng or random.Random()
        self._pool = WorkerPool("inbox-trim", workers, self._work)
        self.scheduled = 0
        """Trims queued since start (for tests and metrics)."""
        self.dropped = 0
        """Trim requests dropped because the queue was full."""
        self.deleted = 0
        """Rows deleted by trims."""

    def start(self) -> None:
        """Starts the workers (inside the running loop)."""
        self._pool.start()

    async def stop(self) -> None:
        """Cancels the workers; pending trims are dropped (the next delivery reschedules)."""
        await self._pool.stop()

    async def idle(self) -> None:
        """Waits until every queued trim has run (tests, drains)."""
        await self._queue.join()

    @property
    def pending(self) -> int:
        """Inboxes waiting for a trim."""
        return len(self._pending)

    def on_delivered(self, inbox_ids: Sequence[str]) -> int:
        """Each inbox just delivered to gets a trim with probability p; returns how many."""
        chosen = sample_indexes(len(inbox_ids), self._p, self._rng)
        return sum(self.request(inbox_ids[i]) for i in chosen)

    def request(self, inbox_id: str) -> bool:
        """Queues a trim of `inbox_id` unless one is pending or the queue is full."""
        if inbox_id in self._pending:
            return False
        try:
            self._queue.put_nowait(inbox_id)
        except asyncio.QueueFull:
            self.dropped += 1
            return False
        self._pending.add(inbox_id)
        self.scheduled += 1
        return True

    async def trim(self, inbox_id: str) -> int:
        """Trims one inbox to `max_entries` now; returns the rows deleted."""
        entries = await self._store.scan_inbox(inbox_id, self._scan_limit)
        victims = trim_victims(entries, self.max_entries)
        if not victims:
            return 0
        deleted = await self._store.delete_entries(inbox_id, victims)
        self.deleted += deleted
        return deleted

    async def _work(self) -> None:
        while True:
            inbox_id = await self._queue.get()
            try:
                await self.trim(inbox_id)
            except LoomError as exc:
                _log.warning("trim failed", error=str(exc))
            finally:
                self._pending.discard(inbox_id)
                self._queue.task_done()
