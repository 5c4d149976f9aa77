"""SummaryStore's whole-store scan (what ``loom dump`` streams), run unchanged on every engine.

Summaries are written through the port's own `put_if_version`; the scan must then give
back exactly what the store holds, byte for byte, each summary once, in non-empty pages no
larger than asked for.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from storage.ports import PortableSummaryStore, StoredSummary

PAGE = 3


async def scanned(store: PortableSummaryStore, page: int) -> list[list[tuple[str, StoredSummary]]]:
    """Every page of a scan, after checking each holds 1..`page` summaries."""
    pages = [p async for p in store.scan(page)]
    assert all(1 <= len(p) <= page for p in pages), [len(p) for p in pages]
    return pages


def once(pages: list[list[tuple[str, StoredSummary]]]) -> dict[str, StoredSummary]:
    """The summaries of `pages` by message id, after checking no id came twice."""
    ids = Counter(m for p in pages for m, _ in p)
    assert not [m for m, n in ids.items() if n > 1], ids
    return {m: s for p in pages for m, s in p}


async def test_empty_store_scans_to_no_pages(summary_store: PortableSummaryStore) -> None:
    """A dump of an empty summary store holds nothing, not even an empty page."""
    assert [p async for p in summary_store.scan(PAGE)] == []


async def test_scan_returns_every_summary_once_byte_for_byte(
    summary_store: PortableSummaryStore,
) -> None:
    """A dump holds every summary exactly once, across several pages, with its latest bytes
    (NUL and 0xff bytes included) and version; lost writes leave no trace."""
    store = summary_store
    expected: dict[str, StoredSummary] = {}
    binary = [
        b"\x00\x00",
        b"\x00",
        b"\xff",
        b"\x00\xff\x00",
        bytes(range(256)),
        b"\xff" * 1000 + b"\x00",
        os.urandom(30_000),
    ]
    ids = ["m0", "a:b", "ü#/\\", "m" * 256, "ß" * 64, "\x01ctl", "zz"]
    for message_id, data in zip(ids, binary, strict=True):
        assert await store.put_if_version(message_id, data, None)
        expected[message_id] = StoredSummary(data, 1)
    # Updated once, and three times, through compare-and-set.
    assert await store.put_if_version("m0", b"\xff\x00v2", 1)
    expected["m0"] = StoredSummary(b"\xff\x00v2", 2)
    for version in (1, 2, 3):
        data = bytes([version, 0, 255]) * version
        assert await store.put_if_version("zz", data, version)
        expected["zz"] = StoredSummary(data, version + 1)
    # Lost races change nothing.
    assert not await store.put_if_version("a:b", b"stale", 7)
    assert not await store.put_if_version("ghost", b"never", 1)
    assert not await store.put_if_version("\x01ctl", b"again", None)
    for message_id, summary in expected.items():
        assert await store.get(message_id) == summary  # the writes did what we think

    pages = await scanned(store, PAGE)
    assert once(pages) == expected
    assert sum(len(p) for p in pages) == len(expected)
    assert len(pages) >= len(expected) // PAGE  # really paged, not one big page


async def test_many_summaries_in_small_pages(summary_store: PortableSummaryStore) -> None:
    """Forty summaries dumped three at a time all come back once with their own bytes."""
    expected = {
        f"msg-{n:02}": StoredSummary(bytes([n, 0, 255 - n]) * (n + 1), 1) for n in range(40)
    }
    for message_id, summary in expected.items():
        assert await summary_store.put_if_version(message_id, summary.data, None)
    pages = await scanned(summary_store, PAGE)
    assert once(pages) == expected
    assert len(pages) >= 40 // PAGE


async def test_one_summary_pages(summary_store: PortableSummaryStore) -> None:
    """The smallest page still dumps every summary, one at a time."""
    for n in range(4):
        assert await summary_store.put_if_version(f"m{n}", bytes([n]), None)
    pages = await scanned(summary_store, 1)
    assert once(pages) == {f"m{n}": StoredSummary(bytes([n]), 1) for n in range(4)}
    assert len(pages) == 4


@pytest.mark.parametrize("page", [0, -1])
async def test_a_page_below_one_is_refused(summary_store: PortableSummaryStore, page: int) -> None:
    """Asking for pages of no summaries is a caller's mistake, reported at once."""
    with pytest.raises(ValueError, match="at least 1"):
        await anext(summary_store.scan(page))
