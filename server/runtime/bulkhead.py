"""Bulkheads: each RPC method gets its own bounded concurrency and a bounded wait.

Yammer's inbox went down because one kind of work could take every thread; a bulkhead per
method means a flood of one method cannot starve the others. When the bulkhead is full and
its small waiting room is full too, the call is refused at once with RESOURCE_EXHAUSTED:
an unbounded queue only turns overload into timeouts for everybody.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from server.runtime.errors import ResourceExhausted

__all__ = ["Bulkhead", "BulkheadFull"]


class BulkheadFull(ResourceExhausted):
    """A call refused by its method's bulkhead (counted apart from other exhaustion)."""


class Bulkhead:
    """At most `max_concurrency` holders; at most `max_waiting` waiting up to `max_wait_s`."""

    __slots__ = ("_max_wait_s", "_max_waiting", "_sem", "_waiting", "max_concurrency", "name")

    def __init__(
        self, name: str, *, max_concurrency: int, max_waiting: int, max_wait_s: float
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"bulkhead {name}: max_concurrency must be >= 1")
        self.name = name
        self.max_concurrency = max_concurrency
        self._max_waiting = max(0, max_waiting)
        self._max_wait_s = max(0.0, max_wait_s)
        self._sem = asyncio.Semaphore(max_concurrency)
        self._waiting = 0

    @property
    def in_use(self) -> int:
        """Holders right now (for metrics and tests)."""
        return self.max_concurrency - self._sem._value

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot right now."""
        return self._waiting

    @property
    def full(self) -> bool:
        """True when a caller arriving now would be refused without waiting."""
        return self._sem.locked() and (self._waiting >= self._max_waiting or self._max_wait_s == 0)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Holds one slot for the body; raises ResourceExhausted when none can be had."""
        if self._sem.locked():
            if self.full:
                raise BulkheadFull(f"{self.name}: too many concurrent calls")
            self._waiting += 1
            try:
                async with asyncio.timeout(self._max_wait_s):
                    await self._sem.acquire()
            except TimeoutError:
                raise BulkheadFull(f"{self.name}: no capacity within the wait") from None
            finally:
                self._waiting -= 1
        else:
            await self._sem.acquire()
        try:
            yield
        finally:
            self._sem.release()
