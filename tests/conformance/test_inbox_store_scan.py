"""InboxStore's whole-store scans (what ``loom dump`` streams), run unchanged on every engine.

Every row is written through the port's own methods; the scans must then give back exactly
what the store holds, each row once, in non-empty pages no larger than asked for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import TypeVar

import pytest

from storage.ports import DeliveryRecord, InboxEntry, PortableInboxStore

T = TypeVar("T")

PAGE = 3


async def pages_of(scan: AsyncIterator[list[T]], page: int) -> list[list[T]]:
    """Every page the scan yields, after checking each holds 1..`page` items."""
    found = [p async for p in scan]
    assert all(1 <= len(p) <= page for p in found), [len(p) for p in found]
    return found


def once(pages: list[list[T]]) -> list[T]:
    """The items of `pages`, after checking none came twice."""
    items = [item for p in pages for item in p]
    twice = [item for item, n in Counter(items).items() if n > 1]
    assert not twice, f"scanned more than once: {twice}"
    return items


async def held_entries(
    store: PortableInboxStore, inboxes: list[str]
) -> set[tuple[str, InboxEntry]]:
    """What the store holds, read inbox by inbox through scan_inbox."""
    return {(i, e) for i in inboxes for e in await store.scan_inbox(i, 10_000)}


def delivery(delivery_id: str, **changes: object) -> DeliveryRecord:
    base: dict[str, object] = {
        "delivery_id": delivery_id,
        "thread_id": f"t-{delivery_id}",
        "message_id": 5,
        "sender_inbox_id": "alice",
        "total": 1_000,
        "done": 0,
        "state": "running",
        "error": "",
        "updated_at_ms": 1_700_000_000_000,
    }
    base.update(changes)
    return DeliveryRecord(**base)  # type: ignore[arg-type]


async def test_empty_store_scans_to_no_pages(inbox_store: PortableInboxStore) -> None:
    """A dump of an empty inbox store holds nothing: no entry, no delivery, no empty page."""
    assert [p async for p in inbox_store.scan_entries(PAGE)] == []
    assert [p async for p in inbox_store.scan_deliveries(PAGE)] == []


async def test_entries_scan_returns_every_row_once_with_its_newest_state(
    inbox_store: PortableInboxStore,
) -> None:
    """A dump holds every inbox row exactly once, across several pages, with the newest
    message and read flag of each row; trimmed rows are gone and unread markers are not rows."""
    store = inbox_store
    # Several inboxes, read (sender) and unread (recipients) rows, unicode ids.
    await store.deliver("t1", 10, unread=["bob", "carol", "ß" * 40], read=["alice"])
    await store.deliver("t2", 11, unread=["alice", "bob"], read=["carol"])
    await store.deliver_unread("t3", 12, ["bob", "dave", "ü:#/"])
    for m in range(20, 27):
        await store.deliver(f"bulk{m}", m, unread=["erin"])
    # A row advanced by a newer message (now unread at 30), then a stale trim that keeps it.
    await store.deliver("t1", 30, unread=["alice"], read=["bob"])
    assert (
        await store.delete_entries(
            "alice", [InboxEntry(thread_id="t1", last_message_id=10, is_read=True)]
        )
        == 0
    )
    # Marks: one row read by its owner, one read row made unread again.
    assert await store.set_read("carol", ["t1"], read=True) == 1
    assert await store.set_read("alice", ["t2"], read=True) == 1
    assert await store.set_read("alice", ["t2"], read=False) == 1
    # Trims: these rows must not appear.
    trimmed = [
        InboxEntry(thread_id="bulk20", last_message_id=20, is_read=False),
        InboxEntry(thread_id="bulk21", last_message_id=21, is_read=False),
    ]
    assert await store.delete_entries("erin", trimmed) == 2
    assert (
        await store.delete_entries(
            "dave", [InboxEntry(thread_id="t3", last_message_id=12, is_read=False)]
        )
        == 1
    )

    inboxes = ["alice", "bob", "carol", "dave", "erin", "ß" * 40, "ü:#/"]
    expected = {
        ("alice", InboxEntry(thread_id="t1", last_message_id=30, is_read=False)),
        ("alice", InboxEntry(thread_id="t2", last_message_id=11, is_read=False)),
        ("bob", InboxEntry(thread_id="t1", last_message_id=30, is_read=True)),
        ("bob", InboxEntry(thread_id="t2", last_message_id=11, is_read=False)),
        ("bob", InboxEntry(thread_id="t3", last_message_id=12, is_read=False)),
        ("carol", InboxEntry(thread_id="t1", last_message_id=10, is_read=True)),
        ("carol", InboxEntry(thread_id="t2", last_message_id=11, is_read=True)),
        ("ß" * 40, InboxEntry(thread_id="t1", last_message_id=10, is_read=False)),
        ("ü:#/", InboxEntry(thread_id="t3", last_message_id=12, is_read=False)),
        *(
            ("erin", InboxEntry(thread_id=f"bulk{m}", last_message_id=m, is_read=False))
            for m in range(22, 27)
        ),
    }
    assert await held_entries(store, inboxes) == expected  # the writes did what we think

    pages = await pages_of(store.scan_entries(PAGE), PAGE)
    scanned = once(pages)
    assert set(scanned) == expected
    assert len(pages) >= len(expected) // PAGE  # really paged, not one big page


async def test_entries_scan_spans_inboxes_larger_than_a_page(
    inbox_store: PortableInboxStore,
) -> None:
    """One inbox holding many pages' worth of rows, between smaller ones, is dumped whole:
    no row is lost or repeated where a page ends inside an inbox."""
    big = [f"t{n:03}" for n in range(25)]
    for m, thread in enumerate(big, start=1):
        await inbox_store.deliver(thread, m, unread=["big"], read=["small"] if m % 5 else [])
    await inbox_store.set_read("big", big[::2], read=True)

    scanned = once(await pages_of(inbox_store.scan_entries(4), 4))
    assert set(scanned) == await held_entries(inbox_store, ["big", "small"])
    assert Counter(i for i, _ in scanned) == {"big": 25, "small": 20}


async def test_entries_scan_with_one_row_pages(inbox_store: PortableInboxStore) -> None:
    """The smallest page still dumps every row, one at a time."""
    await inbox_store.deliver("t", 1, unread=["a", "b", "c"], read=["d"])
    pages = await pages_of(inbox_store.scan_entries(1), 1)
    assert {i for p in pages for i, _ in p} == {"a", "b", "c", "d"}
    assert len(pages) == 4


async def test_deliveries_scan_returns_every_record_once_in_its_stored_state(
    inbox_store: PortableInboxStore,
) -> None:
    """A dump holds every delivery exactly once, across several pages, as last stored:
    running, done and failed alike, claimed ones with their claimer's progress."""
    store = inbox_store
    expected: dict[str, DeliveryRecord] = {}
    for n in range(8):
        first = delivery(f"d{n}", total=100 + n)
        assert await store.create_delivery(first) == first
        expected[first.delivery_id] = first
    # A second create of an existing id changes nothing.
    assert await store.create_delivery(delivery("d0", total=9)) == expected["d0"]
    for n, state in ((1, "done"), (2, "failed"), (3, "running"), (4, "done")):
        saved = delivery(
            f"d{n}",
            total=100 + n,
            done=100 + n if state == "done" else 7,
            state=state,
            error="storage failure: boom" if state == "failed" else "",
            updated_at_ms=1_700_000_005_000 + n,
        )
        await store.save_delivery(saved)
        expected[saved.delivery_id] = saved
    claimed = delivery("d5", total=105, done=50, updated_at_ms=1_700_000_009_000, error="x")
    assert await store.claim_delivery(claimed, 1_700_000_000_000)
    expected["d5"] = claimed
    await store.save_recipients("d6", ["r1", "r2"])  # recipients are not records

    pages = await pages_of(store.scan_deliveries(PAGE), PAGE)
    scanned = once(pages)
    assert {d.delivery_id: d for d in scanned} == expected
    assert len(scanned) == len(expected)
    assert len(pages) >= len(expected) // PAGE
    for delivery_id, record in expected.items():
        assert await store.get_delivery(delivery_id) == record


@pytest.mark.parametrize("page", [0, -1])
async def test_a_page_below_one_is_refused(inbox_store: PortableInboxStore, page: int) -> None:
    """Asking for pages of no rows is a caller's mistake, reported at once."""
    with pytest.raises(ValueError, match="at least 1"):
        await anext(inbox_store.scan_entries(page))
    with pytest.raises(ValueError, match="at least 1"):
        await anext(inbox_store.scan_deliveries(page))


async def test_deleted_thread_markers_scan_once_each(inbox_store: PortableInboxStore) -> None:
    """Every marker, once, in pages of at most PAGE; an empty store's scan yields nothing."""
    assert await pages_of(inbox_store.scan_deleted_threads(PAGE), PAGE) == []
    threads = [f"dead-{k}" for k in range(7)]
    await inbox_store.mark_deleted(threads[:4], "op1", 1_000)
    await inbox_store.mark_deleted(threads[4:], "op2", 2_000)
    await inbox_store.mark_deleted(threads[:1], "op3", 3_000)  # deleted again: kept as first
    marks = once(await pages_of(inbox_store.scan_deleted_threads(PAGE), PAGE))
    assert sorted(m.thread_id for m in marks) == threads
    by_thread = {m.thread_id: (m.operation_id, m.deleted_at_ms) for m in marks}
    assert by_thread["dead-5"] == ("op2", 2_000)
