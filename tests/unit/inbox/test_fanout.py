"""FanoutStage over the embedded engine: chunked delivery, the resume point, the bounded
queue, and what a stopping server leaves for the next one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from server.inbox.fanout import RELEASED_MS, FanoutJob, FanoutStage
from server.runtime.errors import ResourceExhausted
from storage.ports import DeliveryRecord
from storage.sqlite.inbox import SqliteInboxStore
from tests.serving import eventually
from tests.unit.inbox.stages import quiet_trimmer

RECIPIENTS = [f"u{i:02}" for i in range(23)]


def stage(
    store: SqliteInboxStore, *, queue_size: int = 4, chunks_in_flight: int = 1
) -> FanoutStage:
    return FanoutStage(
        store,
        quiet_trimmer(store),
        workers=1,
        queue_size=queue_size,
        chunk_size=5,
        progress_interval_s=0.0,
        chunks_in_flight=chunks_in_flight,
        clock=lambda: 1_000.0,
    )


def running(delivery_id: str, *, total: int, done: int = 0) -> DeliveryRecord:
    return DeliveryRecord(
        delivery_id=delivery_id,
        thread_id="t",
        message_id=7,
        sender_inbox_id="boss",
        total=total,
        done=done,
        state="running",
        error="",
        updated_at_ms=1,
    )


async def unread(store: SqliteInboxStore, inboxes: list[str]) -> list[int]:
    return [await store.unread_count(inbox) for inbox in inboxes]


async def finished(store: SqliteInboxStore, delivery_id: str) -> DeliveryRecord:
    async def stored() -> DeliveryRecord | None:
        return await store.get_delivery(delivery_id)

    done = await eventually(stored, lambda r: r is not None and r.state != "running")
    assert done is not None
    return done


@pytest.fixture
async def started(store: SqliteInboxStore) -> AsyncIterator[FanoutStage]:
    fanout = stage(store, chunks_in_flight=3)
    fanout.start()
    yield fanout
    await fanout.stop()


class TestDelivery:
    @pytest.mark.parametrize("chunks_in_flight", [1, 3], ids=["one-chunk", "three-chunks"])
    async def test_every_recipient_gets_the_thread_unread_once(
        self, store: SqliteInboxStore, chunks_in_flight: int
    ) -> None:
        """23 recipients in chunks of 5 (the last one short): each inbox ends with the thread
        unread, and the stored record is DONE with done == total, stamped by the stage's clock."""
        fanout = stage(store, chunks_in_flight=chunks_in_flight)
        fanout.start()
        try:
            await store.save_delivery(running("d1", total=len(RECIPIENTS)))
            accepted = fanout.submit(FanoutJob(running("d1", total=len(RECIPIENTS)), RECIPIENTS))
            assert accepted.delivery_id == "d1"
            done = await finished(store, "d1")
        finally:
            await fanout.stop()
        assert (done.state, done.done, done.total, done.error) == ("done", 23, 23, "")
        assert done.updated_at_ms == 1_000_000
        assert await unread(store, RECIPIENTS) == [1] * 23
        assert fanout.live("d1") is None  # finished jobs leave the stage

    async def test_a_job_resumes_at_its_stored_progress(
        self, store: SqliteInboxStore, started: FanoutStage
    ) -> None:
        """`done` is the resume point: the recipients before it are not delivered again."""
        job = FanoutJob(running("d2", total=len(RECIPIENTS), done=10), RECIPIENTS)
        started.submit(job)
        done = await finished(store, "d2")
        assert (done.state, done.done) == ("done", 23)
        assert await unread(store, RECIPIENTS[:10]) == [0] * 10
        assert await unread(store, RECIPIENTS[10:]) == [1] * 13


class TestQueue:
    async def test_submitting_an_active_delivery_again_changes_nothing(
        self, store: SqliteInboxStore
    ) -> None:
        """A retry of a queued delivery gets its current record; no second job is queued."""
        fanout = stage(store, queue_size=4)  # not started: jobs stay queued
        first = fanout.submit(FanoutJob(running("d1", total=3), ["a", "b", "c"]))
        again = fanout.submit(FanoutJob(running("d1", total=3, done=2), ["a", "b", "c"]))
        assert again == first
        assert (fanout.depth(), fanout.room()) == (1, 3)
        assert fanout.live("d1") == first

    async def test_a_full_queue_refuses_and_counts_the_refusal(
        self, store: SqliteInboxStore
    ) -> None:
        """Past `queue_size` waiting jobs, submit raises RESOURCE_EXHAUSTED at once."""
        fanout = stage(store, queue_size=2)
        fanout.submit(FanoutJob(running("d1", total=1), ["a"]))
        assert fanout.has_room()
        fanout.submit(FanoutJob(running("d2", total=1), ["b"]))
        assert not fanout.has_room()
        assert fanout.room() == 0
        with pytest.raises(ResourceExhausted):
            fanout.submit(FanoutJob(running("d3", total=1), ["c"]))
        assert fanout.refused == 1
        assert fanout.live("d3") is None


class TestStop:
    async def test_stopping_releases_unfinished_jobs_at_their_progress(
        self, store: SqliteInboxStore
    ) -> None:
        """A job left when the server stops is stored RUNNING at its progress, with the
        released claim time (adoptable at once) and the reason; no inbox was touched."""
        fanout = stage(store)
        fanout.submit(FanoutJob(running("d1", total=5, done=2), ["a", "b", "c", "d", "e"]))
        await fanout.stop()
        stored = await store.get_delivery("d1")
        assert stored is not None
        assert (stored.state, stored.done, stored.updated_at_ms) == ("running", 2, RELEASED_MS)
        assert "shutdown" in stored.error
        assert fanout.live("d1") is None
        assert await unread(store, ["a", "b", "c", "d", "e"]) == [0] * 5
