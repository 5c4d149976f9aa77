"""The SummaryStore's erasure walk (`page_after`) and `scrub`, unchanged on every engine."""

from __future__ import annotations

import pytest

from storage.ports import StoredSummary, SummaryStore


async def _walk(store: SummaryStore, limit: int) -> list[tuple[str, StoredSummary]]:
    seen: list[tuple[str, StoredSummary]] = []
    cursor: str | None = None
    for _ in range(1000):
        rows, cursor = await store.page_after(cursor, limit)
        assert len(rows) <= limit
        seen.extend(rows)
        if cursor is None:
            return seen
    raise AssertionError("the walk never ended")


async def test_empty_store_walk_ends_at_once(summary_store: SummaryStore) -> None:
    """An empty store yields no row and no cursor."""
    assert await summary_store.page_after(None, 10) == ([], None)


@pytest.mark.parametrize("limit", [1, 3, 7, 100])
async def test_walk_sees_every_summary_once(summary_store: SummaryStore, limit: int) -> None:
    """Paging by any limit sees every stored summary exactly once, bytes and version."""
    expected = {}
    for i in range(17):
        message_id = f"m-{i:02d}-ü"
        assert await summary_store.put_if_version(message_id, bytes([i]) * 5, None)
        expected[message_id] = StoredSummary(bytes([i]) * 5, 1)
    assert await summary_store.put_if_version("m-03-ü", b"second", 1)
    expected["m-03-ü"] = StoredSummary(b"second", 2)
    seen = await _walk(summary_store, limit)
    assert len(seen) == len(expected)
    assert dict(seen) == expected


async def test_walk_continues_after_rewrites(summary_store: SummaryStore) -> None:
    """Rewriting a summary already walked past (an erasure's own write) loses no other."""
    for i in range(10):
        assert await summary_store.put_if_version(f"k{i}", b"x", None)
    seen: set[str] = set()
    rows, cursor = await summary_store.page_after(None, 4)
    while True:
        for message_id, stored in rows:
            seen.add(message_id)
            assert await summary_store.put_if_version(message_id, b"y", stored.version)
        if cursor is None:
            break
        rows, cursor = await summary_store.page_after(cursor, 4)
    assert seen == {f"k{i}" for i in range(10)}
    assert all(s.data == b"y" for _, s in await _walk(summary_store, 100))


async def test_walk_rejects_a_limit_below_one(summary_store: SummaryStore) -> None:
    """A limit of 0 is a caller's bug."""
    with pytest.raises(ValueError, match="at least 1"):
        await summary_store.page_after(None, 0)


async def test_scrub_keeps_every_row(summary_store: SummaryStore) -> None:
    """Scrubbing removes no live row and can run any time, twice."""
    assert await summary_store.put_if_version("a", b"live", None)
    assert await summary_store.put_if_version("a", b"rewritten", 1)
    await summary_store.scrub()
    await summary_store.scrub()
    assert await summary_store.get("a") == StoredSummary(b"rewritten", 2)
