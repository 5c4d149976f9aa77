"""PostMessage's idempotency key over the embedded engine: one rule for both sizes (a post
reusing (thread, message id) for other recipients reaches them too, a large one with a
delivery of its own), identical retries stay idempotent, and retries of deliveries 1.0.0
stored under its key-only id still find them."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator

import pytest

from server.inbox.model import Post, PostResult, delivery_id_for, legacy_delivery_id_for
from server.inbox.service import InboxService
from server.inbox.settings import InboxSettings
from server.runtime.errors import ResourceExhausted
from storage.ports import DeliveryRecord, DeliveryState
from storage.sqlite.inbox import SqliteInboxStore
from tests.serving import eventually

SETTINGS = InboxSettings(
    trim_probability=0.0,
    sync_fanout_max=5,
    fanout_workers=1,
    fanout_queue=1,
    fanout_chunk=2,
    progress_interval_s=0.0,
    adopt_interval_s=3600.0,
)
FIRST = [f"a{i}" for i in range(8)]
SECOND = [f"b{i}" for i in range(8)]  # as many as FIRST, other inboxes
LEGACY = legacy_delivery_id_for("t", 7)


def service(store: SqliteInboxStore) -> InboxService:
    return InboxService(store, SETTINGS, rng=random.Random(1))


@pytest.fixture
async def started(store: SqliteInboxStore) -> AsyncIterator[InboxService]:
    inbox = service(store)
    inbox.start()
    yield inbox
    await inbox.stop()


async def unread(store: SqliteInboxStore, inboxes: list[str]) -> list[int]:
    return [await store.unread_count(inbox) for inbox in inboxes]


async def finished(inbox: InboxService, delivery_id: str) -> DeliveryRecord:
    return await eventually(lambda: inbox.get_delivery(delivery_id), lambda d: d.state == "done")


def legacy(state: DeliveryState, *, total: int = len(FIRST), done: int = 0) -> DeliveryRecord:
    """A delivery as 1.0.0 stored it: under the id of (thread, message) alone."""
    return DeliveryRecord(
        delivery_id=LEGACY,
        thread_id="t",
        message_id=7,
        sender_inbox_id="boss",
        total=total,
        done=done,
        state=state,
        error="",
        updated_at_ms=int(time.time() * 1000),  # fresh: no adopter takes it meanwhile
    )


class TestReusedKey:
    async def test_a_small_post_reaches_the_new_recipients(self, store: SqliteInboxStore) -> None:
        """Within the call: the second post's recipients get the thread, the first post's
        keep theirs once, and an inbox that read it is not made unread again."""
        inbox = service(store)
        assert await inbox.post(Post("t", 7, "boss", ["a", "b"])) == PostResult(True, "", 3)
        await inbox.mark("a", None, read=True)
        assert await inbox.post(Post("t", 7, "boss", ["a", "c"])) == PostResult(True, "", 3)
        assert await unread(store, ["a", "b", "c"]) == [0, 1, 1]

    async def test_a_large_post_gets_a_delivery_of_its_own(
        self, store: SqliteInboxStore, started: InboxService
    ) -> None:
        """The same key with other recipients: another delivery id, and GetDelivery of each
        reports its own recipients delivered; every inbox counts the thread once."""
        first = await started.post(Post("t", 7, "boss", FIRST))
        await finished(started, first.delivery_id)
        second = await started.post(Post("t", 7, "boss", [*SECOND, FIRST[0]]))
        assert second.delivery_id not in ("", first.delivery_id)
        assert not second.delivered
        done = await finished(started, second.delivery_id)
        assert (done.done, done.total) == (9, 9)
        assert (await started.get_delivery(first.delivery_id)).total == 8
        assert await unread(store, [*FIRST, *SECOND]) == [1] * 16

    async def test_another_sender_is_another_delivery(
        self, store: SqliteInboxStore, started: InboxService
    ) -> None:
        """Same key and recipients, another sender: not a retry, the new sender gets it."""
        first = await started.post(Post("t", 7, "boss", FIRST))
        second = await started.post(Post("t", 7, "chief", FIRST))
        assert second.delivery_id != first.delivery_id
        await finished(started, second.delivery_id)
        assert [e.thread_id for e in await store.scan_inbox("chief", 10)] == ["t"]

    async def test_an_identical_retry_finds_its_delivery_in_any_order(
        self, store: SqliteInboxStore, started: InboxService
    ) -> None:
        """Reordered, duplicated, the sender listed too: the same request, the same id."""
        first = await started.post(Post("t", 7, "boss", FIRST))
        await finished(started, first.delivery_id)
        again = await started.post(Post("t", 7, "boss", [*reversed(FIRST), FIRST[1], "boss"]))
        assert again == PostResult(True, first.delivery_id, 9)
        assert await unread(store, [*FIRST, "boss"]) == [1] * 8 + [0]

    async def test_a_full_queue_refuses_a_reused_key_before_touching_an_inbox(
        self, store: SqliteInboxStore
    ) -> None:
        """The queue holds the first post: its retry is let through, but the same key with
        other recipients needs a fan-out of its own and is refused, writing nothing."""
        inbox = service(store)  # not started: the first job stays queued
        first = await inbox.post(Post("t", 7, "boss", FIRST))
        retry = await inbox.admit("t", 7, len(FIRST), lambda: Post("t", 7, "boss", FIRST))
        assert retry.delivery_id == first.delivery_id
        with pytest.raises(ResourceExhausted):
            await inbox.admit("t", 7, len(SECOND), lambda: Post("t", 7, "boss", SECOND))
        assert await unread(store, SECOND) == [0] * 8
        assert await store.get_delivery(delivery_id_for("t", 7, "boss", SECOND)) is None


class TestDeliveriesStoredByOneZeroZero:
    async def test_a_retry_finds_a_done_delivery_and_delivers_it_again(
        self, store: SqliteInboxStore, started: InboxService
    ) -> None:
        """A done 1.0.0 delivery kept no recipient list: a retry with its sender and count
        answers its id and runs it again for the retry's recipients, so none is left out,
        and an inbox that has the message (read since) is left as it is."""
        await store.save_delivery(legacy("done", done=8))
        await store.deliver_unread("t", 7, FIRST[:4])
        await store.set_read(FIRST[0], None, read=True)
        again = await started.post(Post("t", 7, "boss", FIRST))
        assert again.delivery_id == LEGACY
        done = await finished(started, LEGACY)
        assert (done.done, done.total) == (8, 8)
        assert await unread(store, FIRST) == [0] + [1] * 7

    async def test_a_running_delivery_with_the_same_list_is_resumed(
        self, store: SqliteInboxStore, started: InboxService
    ) -> None:
        """A running 1.0.0 delivery whose stored list names the retry's recipients."""
        await store.save_delivery(legacy("failed", done=4))
        await store.save_recipients(LEGACY, list(reversed(FIRST)))
        await store.deliver_unread("t", 7, list(reversed(FIRST))[:4])
        again = await started.post(Post("t", 7, "boss", FIRST))
        assert again.delivery_id == LEGACY
        await finished(started, LEGACY)
        assert await unread(store, FIRST) == [1] * 8

    async def test_other_recipients_are_not_taken_for_a_retry(
        self, store: SqliteInboxStore, started: InboxService
    ) -> None:
        """Same sender and count but another stored list, or another count: a post of
        its own, which reaches its recipients; the 1.0.0 delivery is left as it was."""
        await store.save_delivery(legacy("failed", done=0))
        await store.save_recipients(LEGACY, FIRST)
        second = await started.post(Post("t", 7, "boss", SECOND))
        assert second.delivery_id == delivery_id_for("t", 7, "boss", SECOND)
        await finished(started, second.delivery_id)
        await store.save_delivery(legacy("done", total=3, done=3))
        third = await started.post(Post("t", 7, "boss", FIRST))
        assert third.delivery_id == delivery_id_for("t", 7, "boss", FIRST)
        await finished(started, third.delivery_id)
        assert await unread(store, [*FIRST, *SECOND]) == [1] * 16
        assert (await started.get_delivery(LEGACY)).total == 3
