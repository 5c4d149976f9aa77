"""Deleted threads: Yammer's phantom cleanup, on read and by a background sweep.

DeleteThreads writes, per thread, a durable marker (posts are refused for ever) and a
pending row, and nothing in the inboxes: acknowledging a thread delivered to 300,000 inboxes
costs the same as one delivered to two. Reads are exact from that acknowledgement on
because they net out the pending set: GetUnreadCount in the store (`InboxStore.unread_count`)
and ListInbox here (the rows of pending threads are dropped before a page is chosen, so
pages stay full and in order). Rows of a deleted thread are "phantoms":

- on read, a listing that meets phantoms removes them in the background (`Phantoms`);
- the `Sweeper` walks the whole store, page by page, removing the rows of every pending
  thread older than `delete_settle_s`, writing the walk's progress to each operation it
  serves, then marks them done and drops their pending rows.

The settle delay lets a fan-out chunk or small post that passed its "is the thread
deleted?" check just before the mark land before the walk starts, so the walk sees it.
Every server runs a sweeper; two walking at once remove the same rows (idempotent) and
write the same final state.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from server.runtime.errors import LoomError
from server.runtime.logs import get_logger
from storage.ports import InboxEntry, InboxOperation, InboxStore, PendingDeletion

__all__ = ["DeletionCounts", "Phantoms", "Sweeper", "operation_id_for"]

_log = get_logger("inbox.deletion")
KIND = "delete_threads"


def operation_id_for(thread_ids: Sequence[str]) -> str:
    """The operation of a DeleteThreads call: derived from its thread set, so a retry (in
    any order, on any server) answers the same operation."""
    digest = hashlib.sha256("\x00".join(sorted(set(thread_ids))).encode()).digest()[:15]
    return "op_" + base64.urlsafe_b64encode(digest).decode("ascii")


class DeletionCounts:
    """What ``loom_inbox_deletions`` reports (read at scrape time)."""

    def __init__(self) -> None:
        self.threads_deleted = 0
        self.phantoms_cleaned = 0
        self.threads_removed = 0
        self.inboxes_deleted = 0

    def snapshot(self) -> dict[str, int]:
        """Counts by kind, for the metric's ``what`` label."""
        return {
            "threads_deleted": self.threads_deleted,
            "phantoms_cleaned": self.phantoms_cleaned,
            "threads_removed": self.threads_removed,
            "inboxes_deleted": self.inboxes_deleted,
        }


class Phantoms:
    """Removes, in the background, the rows of deleted threads a listing met."""

    def __init__(self, store: InboxStore, counts: DeletionCounts, *, max_tasks: int = 8) -> None:
        self._store = store
        self._counts = counts
        self._max = max_tasks
        self._tasks: set[asyncio.Task[None]] = set()

    def clean(self, inbox_id: str, rows: Sequence[InboxEntry]) -> None:
        """Schedules the removal (dropped when `max_tasks` cleanups already run: the sweep,
        or the next listing, finds them again)."""
        if not rows or len(self._tasks) >= self._max:
            return
        task = asyncio.ensure_future(self._clean(inbox_id, list(rows)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _clean(self, inbox_id: str, rows: list[InboxEntry]) -> None:
        try:
            # Awaited first: `x += await f()` reads x before the await, and the sweep's
            # increments meanwhile would be lost.
            removed = await self._store.delete_entries(inbox_id, rows)
            self._counts.phantoms_cleaned += removed
        except LoomError as exc:
            _log.warning("phantom cleanup failed", inbox_id=inbox_id, error=str(exc))

    async def stop(self) -> None:
        """Waits for the cleanups running."""
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Sweeper:
    """Walks the store to remove the rows of pending deleted threads (module docstring)."""

    def __init__(
        self,
        store: InboxStore,
        counts: DeletionCounts,
        *,
        page: int,
        interval_s: float,
        settle_s: float,
        progress_interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._counts = counts
        self._page = page
        self._interval = interval_s
        self._settle = settle_s
        self._progress_interval = progress_interval_s
        self._clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def settle_s(self) -> float:
        """How old a deletion must be before a walk sweeps it."""
        return self._settle

    def now_ms(self) -> int:
        """Wall-clock milliseconds (deletion times, progress writes)."""
        return int(self._clock() * 1000)

    def start(self) -> None:
        """Starts the loop (inside the running event loop)."""
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        """Stops the loop; a walk cut short restarts from the beginning on any server."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wake(self) -> None:
        """A deletion was acknowledged: look at the pending set now."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            delay = self._interval
            try:
                delay = await self.run_once()
            except LoomError as exc:
                _log.warning("deletion sweep failed; retrying", error=str(exc))
            if delay > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)

    async def run_once(self) -> float:
        """One walk over the pending deletions old enough; the seconds to wait before the
        next look (0: look again at once)."""
        pending = await self._store.pending_deletions()
        if not pending:
            return self._interval
        ready_before = self.now_ms() - int(self._settle * 1000)
        ready = [p for p in pending if p.deleted_at_ms <= ready_before]
        if not ready:
            oldest = min(p.deleted_at_ms for p in pending)
            return max(0.05, (oldest - ready_before) / 1000)
        await self.walk(ready)
        return 0.0

    async def walk(self, ready: Sequence[PendingDeletion]) -> None:
        """Removes every row of `ready`'s threads, then completes their operations."""
        threads = {p.thread_id for p in ready}
        operations = await self._operations({p.operation_id for p in ready})
        cursor: str | None = None
        last_write = self._clock()
        while True:
            step = await self._store.sweep_deleted(threads, cursor, self._page)
            self._counts.phantoms_cleaned += step.removed
            cursor = step.cursor
            if cursor is None:
                break
            if self._clock() - last_write >= self._progress_interval:
                last_write = self._clock()
                for op in operations:
                    await self._store.save_operation(
                        replace(op, done=step.done, total=step.total, updated_at_ms=self.now_ms())
                    )
        for op in operations:
            await self._store.save_operation(
                replace(op, state="done", done=step.total, total=step.total,
                        updated_at_ms=self.now_ms())
            )  # fmt: skip
        await self._store.finish_deletions(ready)

    async def _operations(self, ids: set[str]) -> list[InboxOperation]:
        found = []
        for operation_id in sorted(ids):
            op = await self._store.get_operation(operation_id)
            if op is None:  # its record was lost (never written): recreate it
                op = InboxOperation(
                    operation_id=operation_id,
                    kind=KIND,
                    state="running",
                    done=0,
                    total=0,
                    error="",
                    updated_at_ms=self.now_ms(),
                )
            found.append(op)
        return found
