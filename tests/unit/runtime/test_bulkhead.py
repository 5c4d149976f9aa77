"""Bulkheads refuse at once when full instead of queueing without bound."""

from __future__ import annotations

import asyncio

import pytest

from server.runtime.bulkhead import Bulkhead
from server.runtime.errors import ResourceExhausted


class TestBulkhead:
    async def test_full_bulkhead_with_no_waiting_room_refuses_at_once(self) -> None:
        """With every slot held and no waiting room, the next caller fails immediately."""
        bulkhead = Bulkhead("m", max_concurrency=2, max_waiting=0, max_wait_s=1.0)
        release = asyncio.Event()

        async def hold() -> None:
            async with bulkhead.slot():
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.sleep(0)
        assert bulkhead.in_use == 2
        with pytest.raises(ResourceExhausted):
            async with bulkhead.slot():
                pass
        release.set()
        await asyncio.gather(*holders)
        assert bulkhead.in_use == 0

    async def test_waiter_gets_the_slot_when_it_frees_in_time(self) -> None:
        """A caller in the waiting room proceeds when a slot frees within max_wait_s."""
        bulkhead = Bulkhead("m", max_concurrency=1, max_waiting=1, max_wait_s=2.0)
        entered = asyncio.Event()

        async def short_hold() -> None:
            async with bulkhead.slot():
                entered.set()
                await asyncio.sleep(0.05)

        task = asyncio.create_task(short_hold())
        await entered.wait()
        async with bulkhead.slot():
            assert bulkhead.in_use == 1
        await task

    async def test_waiter_gives_up_after_max_wait(self) -> None:
        """A waiter that cannot get a slot within max_wait_s is refused."""
        bulkhead = Bulkhead("m", max_concurrency=1, max_waiting=4, max_wait_s=0.05)
        release = asyncio.Event()

        async def hold() -> None:
            async with bulkhead.slot():
                await release.wait()

        task = asyncio.create_task(hold())
        await asyncio.sleep(0)
        with pytest.raises(ResourceExhausted):
            async with bulkhead.slot():
                pass
        assert bulkhead.waiting == 0
        release.set()
        await task

    async def test_waiting_room_is_bounded(self) -> None:
        """Beyond max_waiting waiters, new callers are refused without waiting."""
        bulkhead = Bulkhead("m", max_concurrency=1, max_waiting=1, max_wait_s=3600.0)
        release = asyncio.Event()

        async def hold() -> None:
            async with bulkhead.slot():
                await release.wait()

        tasks = [asyncio.create_task(hold()) for _ in range(2)]  # one holds, one waits
        await asyncio.sleep(0)
        assert bulkhead.waiting == 1
        # Had it waited (up to an hour), the guard would end it with TimeoutError instead.
        with pytest.raises(ResourceExhausted):
            async with asyncio.timeout(60), bulkhead.slot():
                pass
        release.set()
        await asyncio.gather(*tasks)
