"""The InboxStore's change log, run unchanged against every engine: what each mutating call
appends, the order, reading after a position, the tail that wakes watchers, erasure and
trimming.

An engine may make a change readable only after a settle window (Cassandra), so the reads
here wait, bounded, for what must come; a change must never come twice at two positions
unless its append was slow (not the case here), and never out of order.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from storage.ports import InboxStore, LoggedChange

_WAIT_S = 20.0


async def changes(
    store: InboxStore, inbox_id: str, after: str | None, count: int
) -> list[LoggedChange]:
    """The inbox's changes after `after` once `count` are readable (then a little longer, to
    catch extra ones)."""
    deadline = time.monotonic() + _WAIT_S
    while True:
        got = await store.read_changes(inbox_id, after, 1_000)
        if len(got) >= count or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.3)
    return await store.read_changes(inbox_id, after, 1_000)


def kinds(logged: list[LoggedChange]) -> list[tuple[str, tuple[str, ...], int, bool]]:
    return [
        (c.change.kind, c.change.thread_ids, c.change.message_id, c.change.all_threads)
        for c in logged
    ]


def inbox() -> str:
    return f"in-{uuid.uuid4().hex[:12]}"


async def test_every_change_is_logged_per_inbox_in_order(inbox_store: InboxStore) -> None:
    bob, alice = inbox(), inbox()
    start = await inbox_store.change_head()
    await inbox_store.deliver("t1", 10, unread=[bob], read=[alice])
    await inbox_store.deliver_unread("t2", 11, [bob])
    await inbox_store.set_read(bob, ["t1"], read=True)
    await inbox_store.set_read(bob, None, read=False)
    await inbox_store.remove_threads(bob, ["t2"])
    got = await changes(inbox_store, bob, start, 5)
    assert kinds(got) == [
        ("delivered", ("t1",), 10, False),
        ("delivered", ("t2",), 11, False),
        ("marked_read", ("t1",), 0, False),
        ("marked_unread", (), 0, True),
        ("removed", ("t2",), 0, False),
    ]
    assert [c.change.inbox_id for c in got] == [bob] * 5
    assert len({c.position for c in got}) == 5
    assert all(c.changed_at_ms > 0 for c in got)
    sender = await changes(inbox_store, alice, start, 1)
    assert kinds(sender) == [("delivered", ("t1",), 10, False)]


async def test_reading_after_a_position_returns_exactly_the_later_changes(
    inbox_store: InboxStore,
) -> None:
    bob = inbox()
    start = await inbox_store.change_head()
    for m in range(1, 7):
        await inbox_store.deliver(f"t{m}", m, unread=[bob])
    every = await changes(inbox_store, bob, start, 6)
    assert [c.change.message_id for c in every] == [1, 2, 3, 4, 5, 6]
    for i, c in enumerate(every):
        later = await inbox_store.read_changes(bob, c.position, 1_000)
        assert [x.position for x in later] == [x.position for x in every[i + 1 :]]
    page = await inbox_store.read_changes(bob, start, 2)
    assert [c.change.message_id for c in page] == [1, 2]
    assert await inbox_store.read_changes(inbox(), None, 10) == []
    with pytest.raises(ValueError, match="limit"):
        await inbox_store.read_changes(bob, start, 0)


async def test_a_change_after_the_head_is_after_it_and_nothing_before_is(
    inbox_store: InboxStore,
) -> None:
    bob = inbox()
    await inbox_store.deliver("t1", 1, unread=[bob])
    await changes(inbox_store, bob, None, 1)
    head = await inbox_store.change_head()
    assert inbox_store.position_valid(head)
    await inbox_store.deliver("t2", 2, unread=[bob])
    got = await changes(inbox_store, bob, head, 1)
    assert kinds(got) == [("delivered", ("t2",), 2, False)]


async def test_a_retried_delivery_on_a_row_that_did_not_advance_logs_nothing_new_there(
    inbox_store: InboxStore,
) -> None:
    """`deliver` (which reads before it writes) logs the rows it advanced only."""
    bob = inbox()
    start = await inbox_store.change_head()
    await inbox_store.deliver("t1", 5, unread=[bob])
    await inbox_store.deliver("t1", 5, unread=[bob])
    await inbox_store.deliver("t1", 4, unread=[bob])
    got = await changes(inbox_store, bob, start, 1)
    assert kinds(got) == [("delivered", ("t1",), 5, False)]


async def test_trimmed_and_deleted_rows_are_logged(inbox_store: InboxStore) -> None:
    bob = inbox()
    thread = f"gone-{uuid.uuid4().hex[:8]}"
    await inbox_store.deliver("t1", 1, unread=[bob])
    await inbox_store.deliver(thread, 2, unread=[bob])
    # The head is "now" for what is not readable yet; deliveries made just before it may
    # still come after it on an engine with a settle window, so wait until they are readable.
    await changes(inbox_store, bob, None, 2)
    start = await inbox_store.change_head()
    rows = {e.thread_id: e for e in await inbox_store.scan_inbox(bob, 10)}
    assert await inbox_store.delete_entries(bob, [rows["t1"]]) == 1
    await inbox_store.mark_deleted([thread], "op1", 1)
    cursor: str | None = None
    while True:
        step = await inbox_store.sweep_deleted({thread}, cursor, 100)
        cursor = step.cursor
        if cursor is None:
            break
    got = await changes(inbox_store, bob, start, 2)
    assert kinds(got) == [("removed", ("t1",), 0, False), ("deleted", (thread,), 0, False)]


async def test_deleting_an_inbox_erases_its_log_and_logs_nothing_naming_it(
    inbox_store: InboxStore,
) -> None:
    bob, carol = inbox(), inbox()
    start = await inbox_store.change_head()
    await inbox_store.deliver("t1", 1, unread=[bob, carol])
    await changes(inbox_store, bob, start, 1)
    await inbox_store.delete_inbox(bob)
    assert await changes(inbox_store, bob, None, 1) == []
    assert kinds(await changes(inbox_store, carol, start, 1)) == [("delivered", ("t1",), 1, False)]
    await inbox_store.forget_changes(carol)
    assert await inbox_store.read_changes(carol, None, 10) == []


async def test_the_tail_names_every_changed_inbox_once_per_read(inbox_store: InboxStore) -> None:
    a, b, c = inbox(), inbox(), inbox()
    start = await inbox_store.change_head()
    await inbox_store.deliver("t1", 1, unread=[a, b])
    await inbox_store.set_read(c, None, read=True)  # an empty inbox: nothing changed
    await inbox_store.deliver("t2", 2, unread=[c, a])
    seen: list[str] = []
    cursor = start
    deadline = time.monotonic() + _WAIT_S
    while not {a, b, c} <= set(seen) and time.monotonic() < deadline:
        names, cursor = await inbox_store.changed_inboxes(cursor, 10_000)
        assert len(names) == len(set(names))
        seen += names
        await asyncio.sleep(0.1)
    assert {a, b, c} <= set(seen)
    names, _ = await inbox_store.changed_inboxes(cursor, 10_000)
    assert not {a, b, c} & set(names)


async def test_changes_before_the_trim_point_go(inbox_store: InboxStore) -> None:
    bob = inbox()
    start = await inbox_store.change_head()
    await inbox_store.deliver("t1", 1, unread=[bob])
    assert len(await changes(inbox_store, bob, start, 1)) == 1
    await inbox_store.trim_changes(int(time.time() * 1000) - 3_600_000)
    assert len(await inbox_store.read_changes(bob, start, 10)) == 1
    await inbox_store.trim_changes(int(time.time() * 1000) + 1_000)
    trimmed = await inbox_store.read_changes(bob, start, 10)
    # An engine whose rows expire by themselves (a TTL) may keep them until then.
    assert len(trimmed) in (0, 1)


async def test_positions_of_another_shape_are_refused(inbox_store: InboxStore) -> None:
    assert not inbox_store.position_valid("")
    assert not inbox_store.position_valid("not a position")
    assert inbox_store.position_valid(await inbox_store.change_head())
