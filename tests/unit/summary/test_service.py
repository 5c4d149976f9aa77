"""SummaryService's optimistic-concurrency loop, on the real embedded store (no fakes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.runtime.errors import NotFound, Unavailable
from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary
from server.summary.service import SummaryService
from storage.sqlite.summaries import SqliteSummaryStore

D = DeliveryStatus.DELIVERED


def evs(*ids: str) -> list[DeliveryEvent]:
    return [DeliveryEvent(i, D) for i in ids]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteSummaryStore]:
    s = await SqliteSummaryStore.open(tmp_path / "s.sqlite3", synchronous="NORMAL")
    try:
        yield s
    finally:
        await s.close()


class InterferingStore:
    """The real store, but before each of the first `n` writes another server writes first."""

    def __init__(self, inner: SqliteSummaryStore, n: int) -> None:
        self.inner, self.left, self.writes = inner, n, 0
        self.get = inner.get
        self.close = inner.close
        self.scan = inner.scan
        self.page_after = inner.page_after
        self.scrub = inner.scrub

    async def put_if_version(self, message_id: str, data: bytes, expected: int | None) -> bool:
        if self.left > 0:
            self.left -= 1
            rival = SummaryService(self.inner)
            await rival.record(message_id, evs(f"rival-{self.left}"))
        self.writes += 1
        return await self.inner.put_if_version(message_id, data, expected)


async def test_lost_race_is_retried_and_both_writers_survive(store: SqliteSummaryStore) -> None:
    """A writer that loses three races re-reads and re-applies; nobody's events are lost."""
    racy = InterferingStore(store, 3)
    outcome = await SummaryService(racy, sleep=lambda _s: asyncio.sleep(0)).record("m", evs("me"))
    assert outcome.written
    assert outcome.attempts == 4
    view = (await SummaryService(store).view("m")).statuses[D]
    assert list(view.recipient_ids) == ["me", "rival-0", "rival-1", "rival-2"]


async def test_exhausted_retries_are_unavailable(store: SqliteSummaryStore) -> None:
    """After max_attempts lost races the call fails UNAVAILABLE (retry later)."""
    racy = InterferingStore(store, 100)
    service = SummaryService(racy, max_attempts=3, sleep=lambda _s: asyncio.sleep(0))
    with pytest.raises(Unavailable):
        await service.record("m", evs("me"))
    assert racy.writes == 3


async def test_unchanged_batch_is_not_written(store: SqliteSummaryStore) -> None:
    """Replaying a batch skips the write: the version does not move."""
    service = SummaryService(store)
    first = await service.record("m", evs("a", "b"))
    again = await service.record("m", evs("b", "a"))
    assert (first.written, first.version) == (True, 1)
    assert (again.written, again.version) == (False, 1)
    stored = await store.get("m")
    assert stored is not None
    assert stored.version == 1
    assert MessageSummary.decode(stored.data).view().statuses[D].count == 2


async def test_concurrent_writers_in_one_process_queue_instead_of_conflicting(
    store: SqliteSummaryStore,
) -> None:
    """20 concurrent batches for one message in one server: all land, each on its first try."""
    service = SummaryService(store, max_attempts=1)
    outcomes = await asyncio.gather(*(service.record("hot", evs(f"r{i}")) for i in range(20)))
    assert all(o.attempts == 1 for o in outcomes)
    assert (await service.view("hot")).statuses[D].count == 20


async def test_unknown_message_is_not_found(store: SqliteSummaryStore) -> None:
    """Reading a message nobody recorded raises NotFound."""
    with pytest.raises(NotFound):
        await SummaryService(store).view("nope")
