"""The InboxStore contract, run unchanged against every engine."""

from __future__ import annotations

import asyncio

from storage.ports import DeliveryRecord, InboxEntry, InboxStore


async def rows(store: InboxStore, inbox: str) -> dict[str, tuple[int, bool]]:
    found = await store.scan_inbox(inbox, 10_000)
    return {e.thread_id: (e.last_message_id, e.is_read) for e in found}


class TestDeliver:
    async def test_new_inbox_row_is_unread_for_recipients_and_read_for_sender(
        self, inbox_store: InboxStore
    ) -> None:
        """A delivery creates rows; unread ones count, the read one does not."""
        assert await inbox_store.deliver("t1", 10, unread=["bob", "carol"]) == 2
        assert await inbox_store.deliver("t1", 10, unread=[], read=["alice"]) == 1
        assert await rows(inbox_store, "bob") == {"t1": (10, False)}
        assert await rows(inbox_store, "alice") == {"t1": (10, True)}
        assert await inbox_store.unread_count("bob") == 1
        assert await inbox_store.unread_count("alice") == 0
        assert await inbox_store.unread_count("nobody") == 0

    async def test_sender_and_recipients_in_one_call(self, inbox_store: InboxStore) -> None:
        """One call delivers read to the sender and unread to the recipients."""
        assert await inbox_store.deliver("t1", 3, unread=["bob", "carol"], read=["alice"]) == 3
        assert await rows(inbox_store, "alice") == {"t1": (3, True)}
        assert await rows(inbox_store, "carol") == {"t1": (3, False)}
        assert [await inbox_store.unread_count(i) for i in ("alice", "bob", "carol")] == [0, 1, 1]
        assert await inbox_store.deliver("t1", 3, unread=["bob", "carol"], read=["alice"]) == 0

    async def test_retry_changes_nothing_and_never_double_counts(
        self, inbox_store: InboxStore
    ) -> None:
        """Delivering the same message again advances no row and keeps the count."""
        await inbox_store.deliver("t1", 10, unread=["bob"])
        await inbox_store.deliver("t2", 11, unread=["bob"])
        assert await inbox_store.deliver("t1", 10, unread=["bob"]) == 0
        assert await inbox_store.unread_count("bob") == 2

    async def test_retry_after_reading_keeps_the_thread_read(self, inbox_store: InboxStore) -> None:
        """A thread read after a delivery is not made unread by a retry of that delivery."""
        await inbox_store.deliver("t1", 10, unread=["bob"])
        assert await inbox_store.set_read("bob", ["t1"], read=True) == 1
        assert await inbox_store.deliver("t1", 10, unread=["bob"]) == 0
        assert await rows(inbox_store, "bob") == {"t1": (10, True)}
        assert await inbox_store.unread_count("bob") == 0

    async def test_newer_message_reopens_a_read_thread(self, inbox_store: InboxStore) -> None:
        """New activity in a read thread makes it unread again, with the newer id."""
        await inbox_store.deliver("t1", 10, unread=["bob"])
        await inbox_store.set_read("bob", None, read=True)
        assert await inbox_store.deliver("t1", 12, unread=["bob"]) == 1
        assert await rows(inbox_store, "bob") == {"t1": (12, False)}
        assert await inbox_store.unread_count("bob") == 1

    async def test_older_message_out_of_order_never_moves_a_row_back(
        self, inbox_store: InboxStore
    ) -> None:
        """last_message_id is the max whatever the delivery order."""
        await inbox_store.deliver("t1", 20, unread=[], read=["bob"])
        assert await inbox_store.deliver("t1", 15, unread=["bob"]) == 0
        assert await rows(inbox_store, "bob") == {"t1": (20, True)}
        assert await inbox_store.unread_count("bob") == 0

    async def test_sender_reply_marks_own_thread_read(self, inbox_store: InboxStore) -> None:
        """A read delivery of a newer message clears the inbox's unread row."""
        await inbox_store.deliver("t1", 10, unread=["bob"])
        assert await inbox_store.deliver("t1", 11, unread=[], read=["bob"]) == 1
        assert await rows(inbox_store, "bob") == {"t1": (11, True)}
        assert await inbox_store.unread_count("bob") == 0

    async def test_a_thousand_inboxes_in_one_call(self, inbox_store: InboxStore) -> None:
        """One fan-out chunk is one call; every inbox gets exactly one unread row."""
        inboxes = [f"u{i}" for i in range(1000)]
        assert await inbox_store.deliver("announce", 7, unread=inboxes) == 1000
        counts = await asyncio.gather(*(inbox_store.unread_count(i) for i in inboxes[::97]))
        assert set(counts) == {1}

    async def test_concurrent_deliveries_keep_the_max_and_one_unread_row(
        self, inbox_store: InboxStore
    ) -> None:
        """Racing deliveries of many messages to one thread end at the largest id."""
        await asyncio.gather(*(inbox_store.deliver("t", m, unread=["bob"]) for m in range(1, 51)))
        assert await rows(inbox_store, "bob") == {"t": (50, False)}
        assert await inbox_store.unread_count("bob") == 1

    async def test_ids_with_separators_and_unicode_round_trip(
        self, inbox_store: InboxStore
    ) -> None:
        """Ids may hold ':', '#', quotes, unicode and reach 256 bytes."""
        odd = ["a:b", "it's", "ü#/\\", "x" * 256]
        for i, thread in enumerate(odd):
            await inbox_store.deliver(thread, i + 1, unread=["ß" * 128])
        assert set(await rows(inbox_store, "ß" * 128)) == set(odd)


class TestDeliverUnread:
    """The fan-out's count-free delivery ends where `deliver` would, in any order."""

    async def test_recipients_get_one_unread_row_each(self, inbox_store: InboxStore) -> None:
        """A blind fan-out gives each recipient one unread thread, and a retried chunk adds none."""
        inboxes = [f"u{i}" for i in range(1000)]
        await inbox_store.deliver_unread("announce", 7, inboxes)
        await inbox_store.deliver_unread("announce", 7, inboxes)  # a retried chunk
        assert await rows(inbox_store, "u0") == {"announce": (7, False)}
        counts = await asyncio.gather(*(inbox_store.unread_count(i) for i in inboxes[::97]))
        assert set(counts) == {1}

    async def test_a_retry_after_reading_keeps_the_thread_read(
        self, inbox_store: InboxStore
    ) -> None:
        """Re-delivering the same message after the reader read it leaves it read."""
        await inbox_store.deliver_unread("t1", 10, ["bob"])
        assert await inbox_store.set_read("bob", ["t1"], read=True) == 1
        await inbox_store.deliver_unread("t1", 10, ["bob"])
        assert await rows(inbox_store, "bob") == {"t1": (10, True)}
        assert await inbox_store.unread_count("bob") == 0

    async def test_an_older_message_never_moves_a_row_back_or_reopens_it(
        self, inbox_store: InboxStore
    ) -> None:
        """A late fan-out of an older message changes neither a row's message nor its read state."""
        await inbox_store.deliver("t1", 20, unread=[], read=["bob"])
        await inbox_store.deliver_unread("t1", 20, ["carol"])
        await inbox_store.deliver_unread("t1", 15, ["bob", "carol"])
        assert await rows(inbox_store, "bob") == {"t1": (20, True)}
        assert await rows(inbox_store, "carol") == {"t1": (20, False)}
        assert [await inbox_store.unread_count(i) for i in ("bob", "carol")] == [0, 1]

    async def test_a_newer_message_reopens_and_a_reply_closes(
        self, inbox_store: InboxStore
    ) -> None:
        """A newer message makes a read thread unread; the recipient's own reply reads it again."""
        await inbox_store.deliver("t1", 10, unread=["bob"])
        await inbox_store.set_read("bob", None, read=True)
        await inbox_store.deliver_unread("t1", 12, ["bob"])
        assert await rows(inbox_store, "bob") == {"t1": (12, False)}
        assert await inbox_store.unread_count("bob") == 1
        await inbox_store.deliver("t1", 13, unread=[], read=["bob"])  # bob replies
        await inbox_store.deliver_unread("t1", 12, ["bob"])  # the older fan-out, retried
        assert await rows(inbox_store, "bob") == {"t1": (13, True)}
        assert await inbox_store.unread_count("bob") == 0

    async def test_racing_with_deliver_keeps_the_max_and_one_unread_row(
        self, inbox_store: InboxStore
    ) -> None:
        """Concurrent deliveries of one thread end at the newest message with one unread row."""
        await asyncio.gather(
            *(
                inbox_store.deliver_unread("t", m, ["bob"])
                if m % 2
                else inbox_store.deliver("t", m, unread=["bob"])
                for m in range(1, 51)
            )
        )
        assert await rows(inbox_store, "bob") == {"t": (50, False)}
        assert await inbox_store.unread_count("bob") == 1


class TestScanAndMark:
    async def test_scan_is_bounded_by_limit(self, inbox_store: InboxStore) -> None:
        """At most `limit` rows come back; an empty inbox is empty."""
        for m in range(1, 21):
            await inbox_store.deliver(f"t{m}", m, unread=["bob"])
        assert len(await inbox_store.scan_inbox("bob", 5)) == 5
        assert len(await inbox_store.scan_inbox("bob", 100)) == 20
        assert await inbox_store.scan_inbox("nobody", 100) == []

    async def test_mark_some_threads_changes_only_those_that_differ(
        self, inbox_store: InboxStore
    ) -> None:
        """set_read reports real changes, ignores unknown threads and moves the count."""
        for m, t in enumerate(["a", "b", "c"], start=1):
            await inbox_store.deliver(t, m, unread=["bob"])
        assert await inbox_store.set_read("bob", ["a", "b", "zzz"], read=True) == 2
        assert await inbox_store.set_read("bob", ["a"], read=True) == 0
        assert await inbox_store.unread_count("bob") == 1
        assert await inbox_store.set_read("bob", ["a"], read=False) == 1
        assert await inbox_store.unread_count("bob") == 2
        assert "zzz" not in await rows(inbox_store, "bob")

    async def test_mark_whole_inbox_both_ways(self, inbox_store: InboxStore) -> None:
        """Whole-inbox marks flip every row and the count follows exactly."""
        for m in range(1, 11):
            is_read = m % 2 == 0
            await inbox_store.deliver(
                f"t{m}", m, unread=[] if is_read else ["bob"], read=["bob"] if is_read else []
            )
        assert await inbox_store.set_read("bob", None, read=True) == 5
        assert await inbox_store.unread_count("bob") == 0
        assert await inbox_store.set_read("bob", None, read=False) == 10
        assert await inbox_store.unread_count("bob") == 10
        assert await inbox_store.set_read("nobody", None, read=True) == 0

    async def test_marks_stay_within_their_inbox(self, inbox_store: InboxStore) -> None:
        """Marking one inbox leaves another inbox's rows and count alone."""
        await inbox_store.deliver("t", 1, unread=["bob", "carol"])
        await inbox_store.set_read("bob", None, read=True)
        assert await inbox_store.unread_count("carol") == 1


class TestTrimDeletes:
    async def test_delete_removes_rows_and_their_unread_rows(self, inbox_store: InboxStore) -> None:
        """Trimmed rows leave the inbox and the unread count."""
        for m in range(1, 6):
            await inbox_store.deliver(f"t{m}", m, unread=["bob"])
        victims = [
            InboxEntry(thread_id="t1", last_message_id=1, is_read=False),
            InboxEntry(thread_id="t2", last_message_id=2, is_read=False),
        ]
        assert await inbox_store.delete_entries("bob", victims) == 2
        assert set(await rows(inbox_store, "bob")) == {"t3", "t4", "t5"}
        assert await inbox_store.unread_count("bob") == 3

    async def test_a_row_that_advanced_since_the_read_is_kept(
        self, inbox_store: InboxStore
    ) -> None:
        """A new message after the trimmer's read saves its thread from the trim."""
        await inbox_store.deliver("t1", 1, unread=["bob"])
        await inbox_store.deliver("t1", 9, unread=["bob"])
        assert (
            await inbox_store.delete_entries(
                "bob", [InboxEntry(thread_id="t1", last_message_id=1, is_read=False)]
            )
            == 0
        )
        assert await rows(inbox_store, "bob") == {"t1": (9, False)}
        assert await inbox_store.unread_count("bob") == 1

    async def test_deleting_missing_rows_is_harmless(self, inbox_store: InboxStore) -> None:
        """Deleting what is not there deletes nothing."""
        assert (
            await inbox_store.delete_entries(
                "bob", [InboxEntry(thread_id="t", last_message_id=1, is_read=True)]
            )
            == 0
        )
        assert await inbox_store.delete_entries("bob", []) == 0


def record(delivery_id: str = "d1", **changes: object) -> DeliveryRecord:
    base = {
        "delivery_id": delivery_id,
        "thread_id": "t",
        "message_id": 5,
        "sender_inbox_id": "alice",
        "total": 300_000,
        "done": 0,
        "state": "running",
        "error": "",
        "updated_at_ms": 1_700_000_000_000,
    }
    base.update(changes)
    return DeliveryRecord(**base)  # type: ignore[arg-type]


class TestDeliveries:
    async def test_unknown_delivery_is_none(self, inbox_store: InboxStore) -> None:
        """A delivery never created reads as None."""
        assert await inbox_store.get_delivery("nope") is None

    async def test_create_is_if_absent_and_returns_the_stored_record(
        self, inbox_store: InboxStore
    ) -> None:
        """The first create wins; a second create returns the first record."""
        first = record()
        assert await inbox_store.create_delivery(first) == first
        assert await inbox_store.create_delivery(record(total=9)) == first
        assert await inbox_store.get_delivery("d1") == first

    async def test_concurrent_creates_agree(self, inbox_store: InboxStore) -> None:
        """Racing creators all learn one stored record."""
        results = await asyncio.gather(
            *(inbox_store.create_delivery(record(total=i)) for i in range(1, 21))
        )
        assert len({r.total for r in results}) == 1

    async def test_save_overwrites_progress_and_state(self, inbox_store: InboxStore) -> None:
        """Progress, state, error and timestamp are replaced by save."""
        await inbox_store.create_delivery(record())
        done = record(done=300_000, state="done", updated_at_ms=1_700_000_009_000)
        await inbox_store.save_delivery(done)
        assert await inbox_store.get_delivery("d1") == done
        failed = record(done=1000, state="failed", error="storage failure: boom")
        await inbox_store.save_delivery(failed)
        assert await inbox_store.get_delivery("d1") == failed


class TestResumableDeliveries:
    """What lets any server resume a fan-out whose server died: recipients, the unfinished
    deliveries, and claiming one by compare-and-set."""

    async def test_recipients_round_trip_in_order(self, inbox_store: InboxStore) -> None:
        """300,000 recipients (unicode, separators) come back exactly, in order."""
        recipients = [f"u{i}" if i % 7 else f"ü-{i}/:,;\n" for i in range(300_000)]
        await inbox_store.create_delivery(record())
        await inbox_store.save_recipients("d1", recipients)
        assert await inbox_store.load_recipients("d1") == recipients
        await inbox_store.save_recipients("d1", recipients)  # a retry stores the same list
        assert await inbox_store.load_recipients("d1") == recipients
        assert await inbox_store.load_recipients("never-stored") is None
        await inbox_store.drop_recipients("d1")
        assert await inbox_store.load_recipients("d1") is None
        await inbox_store.drop_recipients("never-stored")

    async def test_unfinished_lists_running_and_failed_but_not_done(
        self, inbox_store: InboxStore
    ) -> None:
        """Running and failed deliveries are unfinished; a done one leaves the list."""
        for name, state in (("r", "running"), ("f", "failed"), ("d", "done")):
            await inbox_store.create_delivery(record(delivery_id=name))
            await inbox_store.save_delivery(record(delivery_id=name, state=state))
        unfinished = await inbox_store.unfinished_deliveries(limit=10)
        assert sorted(d.delivery_id for d in unfinished) == ["f", "r"]
        await inbox_store.save_delivery(record(delivery_id="r", state="done"))
        assert [d.delivery_id for d in await inbox_store.unfinished_deliveries(10)] == ["f"]

    async def test_exactly_one_claim_of_a_stalled_delivery_wins(
        self, inbox_store: InboxStore
    ) -> None:
        """Claims compare the stored updated_at_ms: of racing claimers exactly one wins."""
        stalled = record(updated_at_ms=1_000)
        await inbox_store.create_delivery(stalled)
        claims = [record(updated_at_ms=2_000 + i, error=f"claimed by {i}") for i in range(8)]
        won = await asyncio.gather(*(inbox_store.claim_delivery(c, 1_000) for c in claims))
        assert won.count(True) == 1
        winner = claims[won.index(True)]
        assert await inbox_store.get_delivery("d1") == winner
        assert not await inbox_store.claim_delivery(record(updated_at_ms=9_000), 1_000)
