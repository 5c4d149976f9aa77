"""The batch queue between two SEDA stages: bounded, FIFO, a batch in and up to n out."""

from __future__ import annotations

import asyncio

import pytest

from server.templates.queues import BatchQueue


class TestBatchQueue:
    def test_offer_admits_the_prefix_that_fits(self) -> None:
        """A full queue refuses the tail (admission control): the caller counts it."""
        q = BatchQueue[int](5)
        assert q.offer([1, 2, 3]) == 3
        assert q.offer(iter([4, 5, 6, 7])) == 2
        assert q.offer([8]) == 0
        assert q.qsize() == 5
        assert q.maxsize == 5

    async def test_take_is_fifo_and_bounded_by_its_limit(self) -> None:
        """A consumer takes up to its batch size, oldest first, the rest stays queued."""
        q = BatchQueue[int](10)
        q.offer(range(7))
        assert await q.take(4) == [0, 1, 2, 3]
        assert await q.take(0) == [4]  # at least one
        assert await q.take(10) == [5, 6]
        assert q.qsize() == 0

    async def test_waiting_consumers_are_woken_for_what_arrives(self) -> None:
        """Consumers wait on an empty queue; a batch wakes as many of them as it feeds, and
        they take their shares in the same turn of the loop."""
        q = BatchQueue[int](100)
        takers = [asyncio.create_task(q.take(3)) for _ in range(4)]
        await asyncio.sleep(0)
        q.offer(range(7))
        for _ in range(3):
            await asyncio.sleep(0)
        done = [t for t in takers if t.done()]
        assert sorted(len(t.result()) for t in done) == [1, 3, 3]
        assert sorted(x for t in done for x in t.result()) == list(range(7))
        (pending,) = [t for t in takers if not t.done()]
        q.offer([7])
        assert await asyncio.wait_for(pending, 1) == [7]

    async def test_a_cancelled_consumer_passes_its_wake_up_on(self) -> None:
        """A consumer cancelled after being woken does not strand the items it was woken for."""
        q = BatchQueue[int](10)
        first = asyncio.create_task(q.take(5))
        second = asyncio.create_task(q.take(5))
        await asyncio.sleep(0)
        q.offer([1, 2])
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await asyncio.wait_for(second, 1) == [1, 2]
