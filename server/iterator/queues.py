"""The levels' work queues as this server sends to them, and when its workers ask them.

Both the workers (which pass a range's next step on) and the service (which sends a new
job's root range, and again the open ranges of a stalled job) put work on the queues, so
sending stands apart from both: the service is built with this object's `announce`, the
workers with the service's callbacks, and neither needs the other first.

A level whose queue was found empty is not asked again for a short, growing while (up to
`MAX_QUIET_S`), so idle workers do not spend round trips on empty queues; sending to a
level ends its quiet time at once, and wakes this server's idle workers (`idle`): a new
job's first range, and each level's first children, are taken at once rather than after an
idle worker's back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

from server.iterator import model
from server.runtime import tracing
from storage.ports import TaskRecord, WorkQueue

__all__ = ["MAX_QUIET_S", "LevelQueues"]

MAX_QUIET_S = 0.5
"""The longest a level found empty is skipped."""


class LevelQueues:
    """One queue per level of the hierarchy (named as the levels are), top level first."""

    __slots__ = ("_poll_s", "_queue", "_quiet_for", "_quiet_until", "_sent", "names")

    def __init__(self, queue: WorkQueue, names: Sequence[str], poll_interval_s: float) -> None:
        self._queue = queue
        self.names = list(names)
        self._poll_s = poll_interval_s
        self._quiet_until = [0.0] * len(self.names)
        self._quiet_for = [poll_interval_s] * len(self.names)
        self._sent = asyncio.Event()
        """Set (and replaced) by every send: wakes every worker idle at that moment."""

    async def announce(self, job_id: str, tasks: Sequence[TaskRecord]) -> None:
        """Enqueues the next step of each task (step 0 of a new one) on its level's queue."""
        by_level: dict[int, list[str]] = {}
        trace = tracing.traceparent()
        for t in tasks:
            message = model.WorkMessage(job_id, t.task_id, t.seq, trace=trace)
            by_level.setdefault(t.level, []).append(message.dumps())
        for level, bodies in by_level.items():
            await self.send(level, bodies)

    async def send(self, level: int, bodies: list[str]) -> None:
        """Puts work message bodies on `level`'s queue; the level is no longer quiet."""
        await self._queue.send(self.names[level], bodies)
        self._quiet_until[level] = 0.0
        self._quiet_for[level] = self._poll_s
        self._sent.set()
        self._sent = asyncio.Event()

    async def discard_job(self, job_id: str) -> int:
        """Deletes the work messages of `job_id` still queued, on every level; how many."""
        prefix = model.WorkMessage.prefix(job_id)
        removed = 0
        for name in self.names:
            removed += await self._queue.discard(name, prefix)
        return removed

    async def idle(self, seconds: float) -> None:
        """Waits `seconds`, or less: until this server next sends work to any level (work
        from other replicas is found by polling, every `seconds` at most)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._sent.wait()

    def quiet(self, level: int) -> bool:
        """Whether `level` was found empty a moment ago (skip it for now)."""
        return self._quiet_until[level] > time.monotonic()

    def found_empty(self, level: int) -> None:
        """`level`'s queue was empty: skip it for a while (longer each time)."""
        wait = min(MAX_QUIET_S, self._quiet_for[level] * 1.5)
        self._quiet_for[level] = wait
        self._quiet_until[level] = time.monotonic() + wait
