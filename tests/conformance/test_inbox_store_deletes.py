"""The InboxStore's deletions, run unchanged against every engine: RemoveThreads,
DeleteInbox, deleted threads (marker, pending set, sweep) and their operations."""

from __future__ import annotations

from typing import cast

from storage.ports import (
    DeliveryRecord,
    InboxOperation,
    InboxStore,
    PendingDeletion,
    PortableInboxStore,
    SweepStep,
)
from tests.conformance.test_inbox_store import rows


async def walk(store: InboxStore, threads: set[str], page: int) -> tuple[int, list[SweepStep]]:
    """A whole sweep walk; the rows it removed and its steps."""
    steps: list[SweepStep] = []
    cursor: str | None = None
    while True:
        step = await store.sweep_deleted(threads, cursor, page)
        steps.append(step)
        cursor = step.cursor
        if cursor is None:
            return sum(s.removed for s in steps), steps


def delivery(delivery_id: str, thread: str) -> DeliveryRecord:
    return DeliveryRecord(
        delivery_id=delivery_id,
        thread_id=thread,
        message_id=10,
        sender_inbox_id="u100",
        total=100,
        done=100,
        state="done",
        error="",
        updated_at_ms=1,
    )


class TestRemoveThreads:
    async def test_removes_rows_and_unread_state_of_one_inbox_only(
        self, inbox_store: InboxStore
    ) -> None:
        await inbox_store.deliver("t1", 10, unread=["bob", "carol"])
        await inbox_store.deliver("t2", 11, unread=["bob"])
        assert await inbox_store.remove_threads("bob", ["t1", "unknown"]) == 1
        assert await rows(inbox_store, "bob") == {"t2": (11, False)}
        assert await inbox_store.unread_count("bob") == 1
        assert await rows(inbox_store, "carol") == {"t1": (10, False)}
        assert await inbox_store.remove_threads("bob", ["t1"]) == 0
        assert await inbox_store.remove_threads("nobody", ["t1"]) == 0

    async def test_a_newer_message_brings_the_thread_back_unread(
        self, inbox_store: InboxStore
    ) -> None:
        await inbox_store.deliver("t1", 10, unread=["bob"])
        await inbox_store.set_read("bob", ["t1"], read=True)
        await inbox_store.remove_threads("bob", ["t1"])
        assert await inbox_store.deliver("t1", 12, unread=["bob"]) == 1
        assert await rows(inbox_store, "bob") == {"t1": (12, False)}
        assert await inbox_store.unread_count("bob") == 1


class TestDeleteInbox:
    async def test_every_row_and_count_of_the_inbox_goes(self, inbox_store: InboxStore) -> None:
        await inbox_store.deliver("t1", 10, unread=["bob", "carol"], read=["alice"])
        await inbox_store.deliver("t2", 11, unread=["bob"])
        assert await inbox_store.delete_inbox("bob") == 2
        assert await rows(inbox_store, "bob") == {}
        assert await inbox_store.unread_count("bob") == 0
        assert await rows(inbox_store, "carol") == {"t1": (10, False)}
        assert await inbox_store.delete_inbox("bob") == 0
        assert await inbox_store.delete_inbox("nobody") == 0
        # A later message starts the inbox anew.
        assert await inbox_store.deliver("t3", 12, unread=["bob"]) == 1
        assert await rows(inbox_store, "bob") == {"t3": (12, False)}
        assert await inbox_store.unread_count("bob") == 1


class TestDeletedThreads:
    async def test_marked_threads_leave_unread_counts_at_once(
        self, inbox_store: InboxStore
    ) -> None:
        await inbox_store.deliver("dead", 10, unread=["bob", "carol"])
        await inbox_store.deliver("live", 11, unread=["bob"])
        assert await inbox_store.unread_count("bob") == 2
        await inbox_store.mark_deleted(["dead", "never-posted"], "op1", 1000)
        assert await inbox_store.unread_count("bob") == 1
        assert await inbox_store.unread_count("carol") == 0
        assert await inbox_store.deleted_threads(["dead", "live", "never-posted"]) == {
            "dead",
            "never-posted",
        }
        pending = await inbox_store.pending_deletions()
        assert {(p.thread_id, p.operation_id) for p in pending} == {
            ("dead", "op1"),
            ("never-posted", "op1"),
        }

    async def test_a_walk_removes_every_row_of_the_threads_and_nothing_else(
        self, inbox_store: InboxStore
    ) -> None:
        inboxes = [f"u{i:03}" for i in range(120)]
        await inbox_store.deliver("dead", 10, unread=inboxes[:100], read=inboxes[100:101])
        await inbox_store.deliver("dead2", 11, unread=inboxes[50:])
        await inbox_store.deliver("live", 12, unread=inboxes)
        for delivery_id, thread in (("d-dead", "dead"), ("d-live", "live")):
            await inbox_store.create_delivery(delivery(delivery_id, thread))
            await inbox_store.save_recipients(delivery_id, inboxes)
        await inbox_store.mark_deleted(["dead", "dead2"], "op1", 1000)
        removed, steps = await walk(inbox_store, {"dead", "dead2"}, page=37)
        assert await inbox_store.get_delivery("d-dead") is None
        assert await inbox_store.load_recipients("d-dead") is None
        assert await inbox_store.get_delivery("d-live") == delivery("d-live", "live")
        assert removed == 101 + 70
        assert len(steps) > 1
        assert all(0 <= s.done <= s.total for s in steps)
        assert steps[-1].done == steps[-1].total > 0
        for inbox in inboxes:
            assert await rows(inbox_store, inbox) == {"live": (12, False)}
            assert await inbox_store.unread_count(inbox) == 1
        portable = cast(PortableInboxStore, inbox_store)
        found = [e.thread_id async for page in portable.scan_entries(100) for _, e in page]
        assert set(found) == {"live"}
        removed_again, _ = await walk(inbox_store, {"dead", "dead2"}, page=1000)
        assert removed_again == 0

    async def test_finishing_drops_only_the_swept_pending_rows(
        self, inbox_store: InboxStore
    ) -> None:
        await inbox_store.mark_deleted(["a", "b"], "op1", 1000)
        await inbox_store.mark_deleted(["c"], "op2", 2000)
        swept = [p for p in await inbox_store.pending_deletions() if p.operation_id == "op1"]
        assert {p.thread_id for p in swept} == {"a", "b"}
        await inbox_store.finish_deletions(swept)
        left = await inbox_store.pending_deletions()
        assert left == [PendingDeletion(thread_id="c", operation_id="op2", deleted_at_ms=2000)]
        await inbox_store.finish_deletions(left)
        assert await inbox_store.pending_deletions() == []
        # Deleted for ever, pending no more.
        assert await inbox_store.deleted_threads(["a", "b", "c"]) == {"a", "b", "c"}

    async def test_operations_round_trip(self, inbox_store: InboxStore) -> None:
        assert await inbox_store.get_operation("op1") is None
        op = InboxOperation(
            operation_id="op1",
            kind="delete_threads",
            state="running",
            done=3,
            total=10,
            error="",
            updated_at_ms=5,
        )
        await inbox_store.save_operation(op)
        assert await inbox_store.get_operation("op1") == op
        done = InboxOperation(
            operation_id="op1",
            kind="delete_threads",
            state="done",
            done=10,
            total=10,
            error="",
            updated_at_ms=6,
        )
        await inbox_store.save_operation(done)
        assert await inbox_store.get_operation("op1") == done
