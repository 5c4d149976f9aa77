"""InboxService over the embedded engine: PostMessage within the call and in the background,
its refusals and retries, GetDelivery, ListInbox, GetUnreadCount and MarkThreads."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest

from server.inbox import pagetoken
from server.inbox.model import InboxFilter, Post, PostResult, delivery_id_for
from server.inbox.service import InboxService
from server.inbox.settings import InboxSettings
from server.runtime.errors import NotFound, ResourceExhausted
from storage.ports import DeliveryRecord
from storage.sqlite.inbox import SqliteInboxStore
from tests.serving import eventually

NOW_S = 1_000.0
SETTINGS = InboxSettings(
    max_entries=3,
    trim_probability=0.0,
    sync_fanout_max=5,
    fanout_workers=1,
    fanout_queue=1,
    fanout_chunk=2,
    progress_interval_s=0.0,
    stall_after_s=30.0,
    adopt_interval_s=3600.0,
    default_page_size=2,
)
MANY = [f"r{i}" for i in range(8)]  # above sync_fanout_max: a background fan-out


def service(store: SqliteInboxStore) -> InboxService:
    """A service whose workers are not started: background jobs stay queued."""
    return InboxService(store, SETTINGS, rng=random.Random(1), clock=lambda: NOW_S)


@pytest.fixture
async def started(store: SqliteInboxStore) -> AsyncIterator[InboxService]:
    inbox = service(store)
    inbox.start()
    yield inbox
    await inbox.stop()


async def unread(store: SqliteInboxStore, inboxes: list[str]) -> list[int]:
    return [await store.unread_count(inbox) for inbox in inboxes]


async def threads(inbox: InboxService, inbox_id: str, flt: InboxFilter) -> list[str]:
    page = await inbox.list_inbox(inbox_id, flt, 100, None)
    return [e.thread_id for e in page.entries]


class TestPostWithinTheCall:
    async def test_recipients_get_it_unread_and_the_sender_read(
        self, store: SqliteInboxStore
    ) -> None:
        """Every distinct recipient is updated before the call returns; the sender, listed or
        not, gets the thread read; a repeated id counts once."""
        inbox = service(store)
        result = await inbox.post(Post("t1", 5, "boss", ["a", "b", "a", "boss", "c"]))
        assert result == PostResult(True, "", 4)  # the sender and a, b, c
        assert await unread(store, ["a", "b", "c", "boss"]) == [1, 1, 1, 0]
        entries = await store.scan_inbox("boss", 10)
        assert [(e.thread_id, e.last_message_id, e.is_read) for e in entries] == [("t1", 5, True)]

    async def test_a_later_message_makes_a_read_thread_unread_again(
        self, store: SqliteInboxStore
    ) -> None:
        """Delivery moves last_message_id forward and marks the thread unread again."""
        inbox = service(store)
        await inbox.post(Post("t1", 1, "boss", ["a"]))
        await inbox.mark("a", None, read=True)
        await inbox.post(Post("t1", 2, "boss", ["a"]))
        assert await inbox.unread_count("a") == 1
        assert [e.last_message_id for e in await store.scan_inbox("a", 10)] == [2]


class TestPostInTheBackground:
    async def test_a_large_post_is_accepted_then_delivered_by_the_stage(
        self, store: SqliteInboxStore, started: InboxService
    ) -> None:
        """Above sync_fanout_max the call returns the delivery id with only the sender
        updated; the stage then delivers every recipient and GetDelivery says DONE."""
        result = await started.post(Post("t1", 9, "boss", MANY))
        delivery_id = delivery_id_for("t1", 9, "boss", MANY)
        assert (result.delivered, result.delivery_id) == (False, delivery_id)
        assert result.inboxes_updated >= 1

        async def progress() -> DeliveryRecord:
            return await started.get_delivery(delivery_id)

        done = await eventually(progress, lambda d: d.state == "done")
        assert (done.done, done.total, done.error) == (8, 8, "")
        assert await unread(store, MANY) == [1] * 8
        # Done: the stored recipient list, needed only to resume, is dropped.
        await eventually(lambda: store.load_recipients(delivery_id), lambda r: r is None)
        again = await started.post(Post("t1", 9, "boss", MANY))  # a retry after the end
        assert again == PostResult(True, delivery_id, 9)

    async def test_a_retry_of_a_queued_post_finds_the_same_delivery(
        self, store: SqliteInboxStore
    ) -> None:
        """While the fan-out is queued, a retry returns its delivery id and queues nothing."""
        inbox = service(store)
        first = await inbox.post(Post("t1", 9, "boss", MANY))
        again = await inbox.post(Post("t1", 9, "boss", MANY))
        assert again == PostResult(False, first.delivery_id, 1)
        assert inbox.fanout.depth() == 1

    async def test_a_full_queue_refuses_before_touching_any_inbox(
        self, store: SqliteInboxStore
    ) -> None:
        """The second large post finds the queue (of one) full: RESOURCE_EXHAUSTED, and
        neither its sender nor any recipient was written."""
        inbox = service(store)
        await inbox.post(Post("t1", 9, "boss", MANY))
        others = [f"o{i}" for i in range(8)]
        with pytest.raises(ResourceExhausted):
            await inbox.post(Post("t2", 1, "chief", others))
        assert await store.scan_inbox("chief", 10) == []
        assert await unread(store, others) == [0] * 8
        assert await store.get_delivery(delivery_id_for("t2", 1, "chief", others)) is None

    async def test_a_failed_delivery_is_resumed_by_a_retry_from_its_progress(
        self, store: SqliteInboxStore, started: InboxService
    ) -> None:
        """A stored FAILED delivery with 4 of 8 done: the retried post resumes it at 4 (the
        first four recipients are not written again) and finishes it."""
        delivery_id = delivery_id_for("t1", 9, "boss", MANY)
        await store.save_delivery(
            DeliveryRecord(
                delivery_id=delivery_id,
                thread_id="t1",
                message_id=9,
                sender_inbox_id="boss",
                total=8,
                done=4,
                state="failed",
                error="storage failure: gone",
                updated_at_ms=int(NOW_S * 1000),
            )
        )
        result = await started.post(Post("t1", 9, "boss", MANY))
        assert result.delivery_id == delivery_id
        assert result.inboxes_updated >= 5

        async def progress() -> DeliveryRecord:
            return await started.get_delivery(delivery_id)

        done = await eventually(progress, lambda d: d.state == "done")
        assert (done.done, done.error) == (8, "")
        assert await unread(store, MANY) == [0] * 4 + [1] * 4


class TestAdmit:
    async def test_a_large_post_is_refused_before_it_is_parsed(
        self, store: SqliteInboxStore
    ) -> None:
        """With the queue full, a large PostMessage is shed without parsing its recipients,
        and the refusal is counted."""
        inbox = service(store)
        await inbox.post(Post("t1", 9, "boss", MANY))

        def parse() -> Post:
            raise AssertionError("a refused post must not be parsed")

        with pytest.raises(ResourceExhausted):
            await inbox.admit("t2", 1, len(MANY), parse)
        assert inbox.fanout.refused == 1

    async def test_a_retry_of_a_running_post_is_let_through(self, store: SqliteInboxStore) -> None:
        """A full queue still admits the retry of the post it holds, so the caller learns
        its delivery id; small posts are never shed."""
        inbox = service(store)
        await inbox.post(Post("t1", 9, "boss", MANY))
        again = await inbox.admit("t1", 9, len(MANY), lambda: Post("t1", 9, "boss", MANY))
        assert again.delivery_id == delivery_id_for("t1", 9, "boss", MANY)
        small = await inbox.admit("t3", 1, 1, lambda: Post("t3", 1, "boss", ["a"]))
        assert small == PostResult(True, "", 2)
        assert inbox.fanout.refused == 0


class TestGetDelivery:
    async def test_an_unknown_delivery_is_not_found(self, store: SqliteInboxStore) -> None:
        """No such delivery, live or stored: NOT_FOUND."""
        with pytest.raises(NotFound):
            await service(store).get_delivery("dlv_nope")

    async def test_a_stalled_delivery_says_it_waits_for_adoption(
        self, store: SqliteInboxStore
    ) -> None:
        """A stored RUNNING delivery with no progress for longer than stall_after_s reports
        how long it has been silent; a recent one reports no error."""
        inbox = service(store)
        for name, age_s in (("stalled", 45), ("recent", 5)):
            await store.save_delivery(
                DeliveryRecord(
                    delivery_id=name,
                    thread_id="t",
                    message_id=1,
                    sender_inbox_id="boss",
                    total=10,
                    done=3,
                    state="running",
                    error="",
                    updated_at_ms=int((NOW_S - age_s) * 1000),
                )
            )
        stalled = await inbox.get_delivery("stalled")
        assert stalled.error == "no progress for 45 s; a server will resume it"
        assert (await inbox.get_delivery("recent")).error == ""


class TestListAndMark:
    async def test_a_listing_is_newest_first_filtered_and_paged(
        self, store: SqliteInboxStore
    ) -> None:
        """Newest activity first; UNREAD and READ filter on the read flag; a page token
        continues strictly after the last entry returned."""
        inbox = service(store)
        for message_id, thread in enumerate(["t1", "t2", "t3"], start=1):
            await inbox.post(Post(thread, message_id, "boss", ["a"]))
        await inbox.mark("a", ["t2"], read=True)
        assert await threads(inbox, "a", InboxFilter.ALL) == ["t3", "t2", "t1"]
        assert await threads(inbox, "a", InboxFilter.UNREAD) == ["t3", "t1"]
        assert await threads(inbox, "a", InboxFilter.READ) == ["t2"]
        first = await inbox.list_inbox("a", InboxFilter.ALL, 0, None)  # 0: the default, 2
        assert [e.thread_id for e in first.entries] == ["t3", "t2"]
        after = pagetoken.decode(first.next_page_token, "a")
        rest = await inbox.list_inbox("a", InboxFilter.ALL, 0, after)
        assert ([e.thread_id for e in rest.entries], rest.next_page_token) == (["t1"], "")

    async def test_an_inbox_seen_above_its_cap_is_queued_for_a_trim(
        self, store: SqliteInboxStore
    ) -> None:
        """Listing reads the whole inbox; past max_entries (3) it asks for a trim."""
        inbox = service(store)
        for message_id in range(1, 4):
            await inbox.post(Post(f"t{message_id}", message_id, "boss", ["a"]))
        await inbox.list_inbox("a", InboxFilter.ALL, 10, None)
        assert inbox.trimmer.pending == 0
        await inbox.post(Post("t4", 4, "boss", ["a"]))
        await inbox.list_inbox("a", InboxFilter.ALL, 10, None)
        assert inbox.trimmer.pending == 1

    async def test_marking_changes_only_what_differs_and_the_count_follows(
        self, store: SqliteInboxStore
    ) -> None:
        """MarkThreads reports the rows it changed and the unread count after it."""
        inbox = service(store)
        for message_id, thread in enumerate(["t1", "t2", "t3"], start=1):
            await inbox.post(Post(thread, message_id, "boss", ["a"]))
        marked = await inbox.mark("a", ["t1", "t2"], read=True)
        assert (marked.changed, marked.unread_count) == (2, 1)
        again = await inbox.mark("a", ["t1"], read=True)
        assert (again.changed, again.unread_count) == (0, 1)
        everything = await inbox.mark("a", None, read=False)
        assert (everything.changed, everything.unread_count) == (2, 3)
        assert await inbox.unread_count("a") == 3
