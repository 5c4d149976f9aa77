"""The bounded queue between two SEDA stages, moved a batch at a time.

Emails cross the stages by the thousand per second; `asyncio.Queue` costs a few Python
calls per item on each side and wakes a waiting consumer per item put (most of those wake
to an already drained queue). `BatchQueue` admits a request's emails, or a CPU batch's
results, with one call (the prefix that fits: admission control's "the dropped emails are
the tail"), and a consumer takes up to its batch size with one call. It is bounded in
items and never blocks a producer: what does not fit is refused, and the caller counts it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["BatchQueue"]

T = TypeVar("T")


class BatchQueue(Generic[T]):
    """A bounded FIFO of items: `offer` a batch (its prefix that fits), `take` up to n."""

    __slots__ = ("_items", "_waiters", "maxsize")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = max(1, maxsize)
        self._items: deque[T] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()

    def qsize(self) -> int:
        """Items queued now."""
        return len(self._items)

    def offer(self, items: Iterable[T]) -> int:
        """Queues the longest prefix of `items` that fits; how many that was."""
        room = self.maxsize - len(self._items)
        before = len(self._items)
        self._items.extend(itertools.islice(items, max(0, room)))
        added = len(self._items) - before
        if added:
            self._wake()
        return added

    def _wake(self, n: int = 1) -> None:
        """Wakes up to `n` waiting consumers (one wakes the others it leaves items for)."""
        while n and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1

    async def take(self, limit: int) -> list[T]:
        """Waits until the queue holds an item, then takes up to `limit` (at least one)."""
        while not self._items:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # A wake-up meant for this consumer passes to the next one.
                if waiter.done() and not waiter.cancelled() and self._items:
                    self._wake()
                raise
        items = self._items
        limit = max(1, limit)
        batch = [items.popleft() for _ in range(min(limit, len(items)))]
        if items:
            # Everyone the rest will feed, at once: they take their shares in the same
            # turn of the loop (the I/O stage's store calls then share a transaction).
            self._wake(-(-len(items) // limit))
        return batch
