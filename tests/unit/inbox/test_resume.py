"""A background fan-out stopped half-way is finished by the next server, on the real
embedded engine: adopted on its own after a restart, or resumed by a retried PostMessage."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.inbox.fanout import RELEASED_MS
from server.inbox.model import Post, legacy_delivery_id_for
from server.inbox.service import InboxService
from server.inbox.settings import InboxSettings
from storage.ports import DeliveryRecord
from storage.sqlite.inbox import SqliteInboxStore
from tests.serving import eventually

RECIPIENTS = [f"u{i}" for i in range(3000)]
ANNOUNCEMENT = Post("news", 42, "ceo", RECIPIENTS)


def fanout_settings(chunks_in_flight: int, adopt_interval_s: float) -> InboxSettings:
    return InboxSettings(
        sync_fanout_max=10,
        fanout_chunk=10,
        fanout_workers=1,
        progress_interval_s=0.0,
        fanout_chunks_in_flight=chunks_in_flight,
        adopt_interval_s=adopt_interval_s,
    )


async def interrupted(store: SqliteInboxStore, settings: InboxSettings) -> DeliveryRecord:
    """Posts the announcement, stops the service part-way; the stored record."""
    first = InboxService(store, settings)
    first.start()
    accepted = await first.post(ANNOUNCEMENT)
    await eventually(
        lambda: first.get_delivery(accepted.delivery_id), lambda d: d.done >= 500, interval_s=0.001
    )
    await first.stop()
    stopped = await store.get_delivery(accepted.delivery_id)
    assert stopped is not None
    return stopped


async def assert_delivered_once(store: SqliteInboxStore) -> None:
    counts = {await store.unread_count(r) for r in RECIPIENTS}
    assert counts == {1}


@pytest.mark.parametrize("chunks_in_flight", [1, 4])
async def test_a_restarted_server_adopts_a_released_delivery(
    tmp_path: Path, chunks_in_flight: int
) -> None:
    """Stopping releases the fan-out at its progress; the next server finishes it unasked.

    With several chunks in flight, the stored progress is the finished prefix only, so the
    chunks that were in flight are delivered again (idempotently) and none is skipped.
    """
    store = await SqliteInboxStore.open(tmp_path / "inbox.sqlite3", synchronous="NORMAL")
    settings = fanout_settings(chunks_in_flight, adopt_interval_s=0.05)
    try:
        stopped = await interrupted(store, settings)
        assert (stopped.state, stopped.updated_at_ms) == ("running", RELEASED_MS)
        assert 0 < stopped.done < len(RECIPIENTS)
        second = InboxService(store, settings)
        second.start()
        try:
            done = await eventually(
                lambda: second.get_delivery(stopped.delivery_id), lambda d: d.state == "done"
            )
            assert (done.done, done.total, done.error) == (3000, 3000, "")
            assert second.adopter.adopted == 1
        finally:
            await second.stop()
        await assert_delivered_once(store)
    finally:
        await store.close()


async def test_a_retried_post_resumes_from_the_stored_progress(tmp_path: Path) -> None:
    """Before any adoption, the client's retry of PostMessage resumes the same delivery."""
    store = await SqliteInboxStore.open(tmp_path / "inbox.sqlite3", synchronous="NORMAL")
    settings = fanout_settings(1, adopt_interval_s=3600.0)
    try:
        stopped = await interrupted(store, settings)
        second = InboxService(store, settings)
        second.start()  # its first look adopts at once: the retry finds the delivery live
        try:
            again = await second.post(ANNOUNCEMENT)
            assert again.delivery_id == stopped.delivery_id
            assert again.inboxes_updated >= 1 + stopped.done  # resumed, not restarted
            done = await eventually(
                lambda: second.get_delivery(stopped.delivery_id), lambda d: d.state == "done"
            )
            assert (done.done, done.total) == (3000, 3000)
        finally:
            await second.stop()
        await assert_delivered_once(store)
    finally:
        await store.close()


async def test_a_retry_resumes_a_list_stored_in_another_order(tmp_path: Path) -> None:
    """A delivery 1.0.0 stored (its id from the key alone, its recipient list in request
    order, not sorted): the retry resumes that stored list from its progress under that id,
    skipping no one."""
    store = await SqliteInboxStore.open(tmp_path / "inbox.sqlite3", synchronous="NORMAL")
    settings = fanout_settings(1, adopt_interval_s=3600.0)
    try:
        old_order = list(reversed(RECIPIENTS))
        service = InboxService(store, settings)
        delivery_id = (await store.create_delivery(_running(service, done=1000))).delivery_id
        await store.save_recipients(delivery_id, old_order)
        for start in range(0, 1000, 100):
            await store.deliver_unread("news", 42, old_order[start : start + 100])
        service.start()
        try:
            again = await service.post(ANNOUNCEMENT)
            assert again.delivery_id == delivery_id
            await eventually(lambda: service.get_delivery(delivery_id), lambda d: d.state == "done")
        finally:
            await service.stop()
        await assert_delivered_once(store)
    finally:
        await store.close()


def _running(service: InboxService, *, done: int) -> DeliveryRecord:
    return DeliveryRecord(
        delivery_id=legacy_delivery_id_for("news", 42),
        thread_id="news",
        message_id=42,
        sender_inbox_id="ceo",
        total=len(RECIPIENTS),
        done=done,
        state="running",
        error="",
        updated_at_ms=service.fanout.now_ms(),
    )
