"""A background fan-out stopped half-way resumes on retry, on the real embedded engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import InboxSettings
from server.inbox.model import Post
from server.inbox.service import InboxService
from storage.sqlite.inbox import SqliteInboxStore
from tests.serving import eventually


@pytest.mark.parametrize("chunks_in_flight", [1, 4])
async def test_interrupted_delivery_is_failed_then_resumed_without_double_delivery(
    tmp_path: Path, chunks_in_flight: int
) -> None:
    """Stopping the service marks the fan-out FAILED at its progress; a retry finishes it.

    With several chunks in flight, the stored progress is the finished prefix only, so the
    retry re-delivers the chunks that were in flight (idempotently) and none is skipped.
    """
    store = await SqliteInboxStore.open(tmp_path / "inbox.sqlite3", synchronous="NORMAL")
    settings = InboxSettings(
        sync_fanout_max=10,
        fanout_chunk=10,
        fanout_workers=1,
        progress_interval_s=0.0,
        fanout_chunks_in_flight=chunks_in_flight,
    )
    recipients = [f"u{i}" for i in range(3000)]
    announcement = Post("news", 42, "ceo", recipients)
    try:
        first = InboxService(store, settings)
        first.start()
        accepted = await first.post(announcement)
        await eventually(
            lambda: first.get_delivery(accepted.delivery_id),
            lambda d: d.done >= 500,
            interval_s=0.001,
        )
        await first.stop()
        stopped = await store.get_delivery(accepted.delivery_id)
        assert stopped is not None
        assert stopped.state == "failed"
        assert "retry PostMessage" in stopped.error
        assert 0 < stopped.done < len(recipients)

        second = InboxService(store, settings)
        second.start()
        try:
            again = await second.post(announcement)
            assert again.delivery_id == accepted.delivery_id
            assert again.inboxes_updated == 1 + stopped.done  # resumed, not restarted
            done = await eventually(
                lambda: second.get_delivery(accepted.delivery_id), lambda d: d.state == "done"
            )
            assert (done.done, done.total, done.error) == (3000, 3000, "")
        finally:
            await second.stop()
        counts = {await store.unread_count(r) for r in recipients}
        assert counts == {1}
    finally:
        await store.close()
