"""How many store round trips a ThreadWeaver read costs on each engine, however its unified
thread was built.

The port promises one round trip per call (whatever the number of UTs asked), so counting
calls on a real store counts round trips. Run unchanged on every engine: Bigtable and
Cassandra answer a read level per call (4 calls from any thread), SQLite walks the links
itself (2 calls); on every engine the count must not depend on the chain of merges.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from server.threadweaver.model import Message
from server.threadweaver.service import ThreadWeaverService
from storage.ports import ThreadKey, ThreadStore


class CountingStore:
    """A real store whose every call is counted (calls = round trips, by the port)."""

    def __init__(self, inner: ThreadStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await attr(*args, **kwargs)

        return call

    def total(self) -> int:
        return sum(self.calls.values())


@pytest.fixture
def store(thread_store: ThreadStore) -> CountingStore:
    return CountingStore(thread_store)


def weaver(store: CountingStore) -> ThreadWeaverService:
    return ThreadWeaverService(store)  # a transparent proxy of one


async def chain(
    w: ThreadWeaverService, name: str, length: int, *, concurrent: bool
) -> list[ThreadKey]:
    """`length` unified threads, one thread each, then the merges chaining them (shuffled)."""
    threads = [ThreadKey(f"{name}-{i:03d}", "t") for i in range(length)]
    for i, t in enumerate(threads):
        await w.weave([Message(t, f"<own-{name}-{i}>", i)])
    links = [
        [
            Message(threads[i], f"<link-{name}-{i}>", 0),
            Message(threads[i + 1], f"<link-{name}-{i}>", 0),
        ]
        for i in range(length - 1)
    ]
    random.Random(length).shuffle(links)
    if concurrent:
        await asyncio.gather(*(w.weave(pair) for pair in links))
    else:
        for pair in links:
            await w.weave(pair)
    return threads


async def calls_of(store: CountingStore, read: Callable[[], Awaitable[object]]) -> int:
    store.calls.clear()
    await read()
    return store.total()


class TestReadsAreShallow:
    @pytest.mark.parametrize("concurrent", [False, True], ids=["one-by-one", "all-at-once"])
    async def test_a_read_costs_the_same_for_5_20_and_80_chained_uts(
        self, store: CountingStore, concurrent: bool
    ) -> None:
        """thread -> UT -> smallest UT -> members: at most 4 calls from any thread."""
        w = weaver(store)
        worst: dict[int, int] = {}
        for length in (5, 20, 80):
            threads = await chain(w, f"c{length}", length, concurrent=concurrent)
            costs = []
            for t in threads:
                costs.append(
                    await calls_of(
                        store, partial(w.unified_thread, t, team_gids=None, max_threads=100)
                    )
                )
            view = await w.unified_thread(threads[-1], team_gids=None, max_threads=100)
            assert view.threads == threads
            assert len(view.unified_thread_ids) == length
            worst[length] = max(costs)
        assert worst[5] == worst[20] == worst[80] <= 4

    @pytest.mark.parametrize("concurrent", [False, True], ids=["one-by-one", "all-at-once"])
    async def test_merges_leave_one_link_per_member(
        self, store: CountingStore, concurrent: bool
    ) -> None:
        """After 79 merges an 80-UT component is a star: each UT linked to the smallest only,
        so what a read walks does not pile up with every merge."""
        w = weaver(store)
        threads = await chain(w, "star", 80, concurrent=concurrent)
        view = await w.unified_thread(threads[0], team_gids=None, max_threads=100)
        smallest, *members = view.unified_thread_ids
        links = await store.get_links(view.unified_thread_ids)
        assert links[smallest] == set(members)
        assert all(links[ut] == {smallest} for ut in members)

    async def test_an_inbox_page_resolves_in_four_calls(self, store: CountingStore) -> None:
        """100 threads of several long chains: one thread lookup and three link levels."""
        w = weaver(store)
        threads = [t for n in range(4) for t in await chain(w, f"r{n}", 25, concurrent=True)]
        cost = await calls_of(store, lambda: w.resolve(threads))
        assert cost <= 4
        resolved = await w.resolve(threads)
        assert len(set(resolved)) == 4

    async def test_a_merge_already_recorded_costs_no_write(self, store: CountingStore) -> None:
        """Weaving more copies across two merged UTs reads their links and writes none."""
        w = weaver(store)
        await w.weave([Message(ThreadKey("a", "1"), "<x>", 1)])
        await w.weave([Message(ThreadKey("b", "2"), "<y>", 1)])
        await w.weave([Message(ThreadKey("a", "1"), "<y>", 2)])  # joins a:1 and b:2
        store.calls.clear()
        results = await w.weave([Message(ThreadKey("a", "1"), "<y>", 2)])
        assert results[0].merged
        assert store.calls["add_links"] == 0


class TestCrashedWriters:
    async def test_a_merge_left_half_done_reads_exactly_and_is_repaired_by_the_read(
        self, store: CountingStore
    ) -> None:
        """A writer that linked two components and died before re-linking their members:
        the next read still finds every thread, completes the links, and the read after
        it is back to four calls."""
        w = weaver(store)
        left = await chain(w, "left", 4, concurrent=False)
        right = await chain(w, "right", 4, concurrent=False)
        uts = await store.get_thread_uts([left[-1], right[-1]])
        await store.add_links([(uts[left[-1]], uts[right[-1]])])  # all the dead writer did

        all_uts = sorted(set((await store.get_thread_uts(left + right)).values()))
        before = await store.get_links(all_uts)
        assert any(all_uts[0] not in before.get(ut, ()) for ut in all_uts[1:])  # incomplete

        view = await w.unified_thread(right[-1], team_gids=None, max_threads=100)
        assert view.threads == sorted(left + right)
        assert view.unified_thread_ids == all_uts
        links = await store.get_links(all_uts)
        assert all(all_uts[0] in links[ut] for ut in all_uts[1:])
        for t in left + right:
            cost = await calls_of(
                store, partial(w.unified_thread, t, team_gids=None, max_threads=100)
            )
            assert cost <= 4
