"""The ThreadStore's streaming scans (what `loom dump` reads), run unchanged on every engine.

Records are written through the port's own write methods, then the scans must return exactly
what was written: each record once, in pages of 1..`page` items, nothing removed.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, TypeVar, cast

from storage.ports import MessageMapping, PortableThreadStore, ThreadKey

T = TypeVar("T")


def key(text: str) -> bytes:
    return hashlib.md5(text.encode()).digest()


async def pages_of(scan: AsyncIterator[list[T]], page: int) -> list[list[T]]:
    """Every page of `scan`, checking each holds 1..`page` items."""
    pages = [p async for p in scan]
    assert all(1 <= len(p) <= page for p in pages), [len(p) for p in pages]
    return pages


async def items_of(scan: AsyncIterator[list[T]], page: int) -> list[T]:
    return [item for p in await pages_of(scan, page) for item in p]


def exactly_once(items: list[T]) -> set[T]:
    """The items as a set, after checking none came twice."""
    assert len(items) == len(set(items)), "an item came more than once"
    return set(items)


ODD_UTS = ["a:b:c", "a:b", "ü#/\\:ß", "z", "x" * 512 + ":" + "y" * 512, "%3A" * 512 + "/"]
"""UT ids with separators, non-ASCII and the longest lengths: their order (a < b) must be the
same in the engine as in Python."""


class TestScans:
    async def test_an_empty_store_yields_no_page(self, thread_store: PortableThreadStore) -> None:
        """A dump of a fresh store holds nothing: every scan ends without a page."""
        assert await pages_of(thread_store.scan_thread_uts(3), 3) == []
        assert await pages_of(thread_store.scan_message_uts(3), 3) == []
        assert await pages_of(thread_store.scan_links(3), 3) == []

    async def test_scans_return_exactly_what_was_written(
        self, thread_store: PortableThreadStore, thread_store_twin: PortableThreadStore
    ) -> None:
        """Every winning thread and Message-ID mapping (with its sent_at) and every link is
        dumped once, across several pages of 3, also by another client; losers, removed
        links and reverse rows are not."""
        threads = [ThreadKey(f"gid-{i % 4}", f"thread-{i:02d}") for i in range(11)]
        threads.append(ThreadKey("ü:/\\%", "thread:ß"))
        mapped = {t: f"ut-{i % 5}" for i, t in enumerate(threads)}
        await thread_store.put_thread_uts_if_absent(list(mapped.items()))
        # Racers that lose: their UTs must not appear.
        await thread_store.put_thread_uts_if_absent([(t, "loser") for t in threads[:4]])

        messages = [
            MessageMapping(rfc_key=key(f"m{i}"), ut=f"ut-{i % 5}", sent_at_ms=1_000 + i)
            for i in range(13)
        ]
        await thread_store.put_message_uts_if_absent(messages)
        await thread_store.put_message_uts_if_absent(
            [MessageMapping(rfc_key=m.rfc_key, ut="loser", sent_at_ms=7) for m in messages[:5]]
        )

        # ut-0 .. ut-4 unioned: two UTs linked, then every one to the smallest, then the
        # link the shortcut made redundant removed, as the domain does.
        await thread_store.add_links([("ut-3", "ut-4")])
        await thread_store.add_links([("ut-0", f"ut-{i}") for i in range(1, 5)])
        await thread_store.add_links([("ut-1", "ut-2"), ("ut-2", "ut-9")])
        await thread_store.remove_links([("ut-4", "ut-3"), ("ut-9", "ut-2")])
        await thread_store.add_links([(ODD_UTS[0], u) for u in ODD_UTS[1:]])
        await thread_store.add_links([(ODD_UTS[1], ODD_UTS[2]), (ODD_UTS[-1], ODD_UTS[-2])])
        await thread_store.remove_links([(ODD_UTS[2], ODD_UTS[1])])
        links = {
            ("ut-0", "ut-1"),
            ("ut-0", "ut-2"),
            ("ut-0", "ut-3"),
            ("ut-0", "ut-4"),
            ("ut-1", "ut-2"),
            *(tuple(sorted((ODD_UTS[0], u))) for u in ODD_UTS[1:]),
            tuple(sorted((ODD_UTS[-1], ODD_UTS[-2]))),
        }

        for store in (thread_store, thread_store_twin):
            thread_pages = await pages_of(store.scan_thread_uts(3), 3)
            assert len(thread_pages) >= 4
            assert exactly_once([i for p in thread_pages for i in p]) == set(mapped.items())
            message_pages = await pages_of(store.scan_message_uts(3), 3)
            assert len(message_pages) >= 5
            assert exactly_once([m for p in message_pages for m in p]) == set(messages)
            link_pages = await pages_of(store.scan_links(3), 3)
            assert len(link_pages) >= 4
            dumped = exactly_once([link for p in link_pages for link in p])
            assert all(a < b for a, b in dumped)
            assert dumped == links

    async def test_links_of_a_hub_wider_than_a_page_come_whole(
        self, thread_store: PortableThreadStore
    ) -> None:
        """A component's smallest UT linked to 1,200 members (more than one page, and more
        than one engine response holds): each link dumped once, in small and large pages."""
        members = [f"member-{i:04d}" for i in range(1200)]
        await thread_store.add_links([("hub", m) for m in members])
        await thread_store.add_links([("aaa", "zzz"), ("member-0007", "member-0008")])
        await thread_store.remove_links([("hub", "member-0100")])
        expected = {("hub", m) for m in members if m != "member-0100"}
        expected |= {("aaa", "zzz"), ("member-0007", "member-0008")}
        for page in (7, 500):
            assert exactly_once(await items_of(thread_store.scan_links(page), page)) == expected

    async def test_pages_of_one_and_pages_larger_than_the_store(
        self, thread_store: PortableThreadStore
    ) -> None:
        """Page sizes are honoured at both ends: one item per page, or everything in one."""
        pairs = [(ThreadKey("g", f"t{i}"), f"u{i}") for i in range(4)]
        await thread_store.put_thread_uts_if_absent(pairs)
        await thread_store.put_message_uts_if_absent(
            [MessageMapping(rfc_key=key(f"m{i}"), ut="u0", sent_at_ms=i) for i in range(4)]
        )
        await thread_store.add_links([("u0", "u1"), ("u0", "u2"), ("u2", "u3")])
        ones = await pages_of(thread_store.scan_thread_uts(1), 1)
        assert len(ones) == 4
        assert exactly_once([p[0] for p in ones]) == set(pairs)
        assert len(await pages_of(thread_store.scan_message_uts(1), 1)) == 4
        assert len(await pages_of(thread_store.scan_links(1), 1)) == 3
        (whole,) = await pages_of(thread_store.scan_thread_uts(1000), 1000)
        assert set(whole) == set(pairs)
        (all_links,) = await pages_of(thread_store.scan_links(1000), 1000)
        assert set(all_links) == {("u0", "u1"), ("u0", "u2"), ("u2", "u3")}

    async def test_a_scan_abandoned_early_leaves_the_store_usable(
        self, thread_store: PortableThreadStore
    ) -> None:
        """A dump that stops after its first page (an error downstream) leaves the store
        serving reads, and a new scan starts again from the beginning."""
        pairs = [(ThreadKey("g", f"t{i:02d}"), "ut") for i in range(10)]
        await thread_store.put_thread_uts_if_absent(pairs)
        await thread_store.add_links([("ut", f"v{i}") for i in range(10)])
        # The port promises an AsyncIterator; every adapter's scan is an async generator,
        # which a dump closes when it stops early (what this test is about).
        scans = [
            cast("AsyncGenerator[list[Any], None]", thread_store.scan_thread_uts(3)),
            cast("AsyncGenerator[list[Any], None]", thread_store.scan_links(3)),
        ]
        for scan in scans:
            async with contextlib.aclosing(scan) as pages:
                async for first in pages:
                    assert len(first) == 3
                    break
        assert await thread_store.get_thread_uts([pairs[0][0]]) == {pairs[0][0]: "ut"}
        assert exactly_once(await items_of(thread_store.scan_thread_uts(3), 3)) == set(pairs)
        assert len(await items_of(thread_store.scan_links(3), 3)) == 10
