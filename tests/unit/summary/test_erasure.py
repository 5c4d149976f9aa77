"""SummaryService's deletions and erasures, on the real embedded store (no fakes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.runtime.errors import NotFound
from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary
from server.summary.operations import OperationState
from server.summary.portable import SummaryData
from server.summary.recipients import SketchParams, Tier
from server.summary.service import SummaryService
from server.summary.settings import SummarySettings
from storage.sqlite.summaries import SqliteSummaryStore

D, R, F = DeliveryStatus.DELIVERED, DeliveryStatus.READ, DeliveryStatus.FAILED


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteSummaryStore]:
    s = await SqliteSummaryStore.open(tmp_path / "s.sqlite3", synchronous="NORMAL")
    try:
        yield s
    finally:
        await s.close()


async def test_deleted_summary_is_not_found_and_late_events_are_ignored(
    store: SqliteSummaryStore,
) -> None:
    """After a deletion the summary reads NOT_FOUND, and a late event does not bring it back."""
    service = SummaryService(store)
    await service.record("m", [DeliveryEvent("alice", D)])
    await service.delete_messages(["m", "m"])
    with pytest.raises(NotFound):
        await service.view("m")
    outcome = await service.record("m", [DeliveryEvent("bob", R)])
    assert outcome.ignored
    assert not outcome.written
    with pytest.raises(NotFound):
        await service.view("m")
    stored = await store.get("m")
    assert stored is not None
    assert b"alice" not in stored.data
    assert b"bob" not in stored.data


async def test_deleting_twice_or_an_unknown_id_is_not_an_error(store: SqliteSummaryStore) -> None:
    """Unknown ids are marked deleted too: their first event, when it comes, is ignored."""
    service = SummaryService(store)
    await service.delete_messages(["never"])
    await service.delete_messages(["never"])
    assert (await service.record("never", [DeliveryEvent("x", D)])).ignored
    with pytest.raises(NotFound):
        await service.view("never")


async def test_erasure_removes_the_id_from_every_exact_set(store: SqliteSummaryStore) -> None:
    """The erased id leaves DELIVERED, READ and FAILED of every message; counts follow."""
    service = SummaryService(store)
    service.erase_page = 2
    for i in range(5):
        await service.record(
            f"m{i}",
            [DeliveryEvent("erased", R), DeliveryEvent("kept", D), DeliveryEvent("erased", F)],
        )
    op = await service.erase_recipients(["erased", "nobody"])
    await service.operations.wait(op.operation_id)
    assert op.state is OperationState.DONE
    assert op.done == 5
    assert op.total == 5
    for i in range(5):
        view = await service.view(f"m{i}")
        assert view.statuses[D].recipient_ids == ("kept",)
        assert view.statuses[D].count == 1
        assert view.statuses[R].count == 0
        assert view.statuses[F].count == 0
        stored = await store.get(f"m{i}")
        assert stored is not None
        assert b"erased" not in MessageSummary.decode(stored.data).encode()


async def test_reads_leave_the_id_out_while_the_erasure_runs(store: SqliteSummaryStore) -> None:
    """From the acknowledgement on, a read no longer shows the id, before the walk reaches it."""
    service = SummaryService(store)
    await service.record("m", [DeliveryEvent("erased", D), DeliveryEvent("kept", D)])
    op = await service.erase_recipients(["erased"])
    view = await service.view("m")  # the operation's task has not run yet
    assert view.statuses[D].recipient_ids == ("kept",)
    await service.operations.wait(op.operation_id)
    assert (await service.view("m")).statuses[D].recipient_ids == ("kept",)


async def test_a_sketch_keeps_its_estimate(store: SqliteSummaryStore) -> None:
    """A set past the exact threshold is a sketch: it cannot forget one member."""
    service = SummaryService(store, params=SketchParams(exact_threshold=3))
    await service.record("big", [DeliveryEvent(f"r{i}", D) for i in range(50)])
    before = await service.view("big")
    assert before.statuses[D].tier is Tier.CPC
    op = await service.erase_recipients(["r1"])
    await service.operations.wait(op.operation_id)
    assert (await service.view("big")).statuses[D].count == before.statuses[D].count


async def test_a_loaded_dump_never_brings_a_deleted_summary_back(tmp_path: Path) -> None:
    """The marker is dumped like a summary and wins the load's merge, on either side."""
    source = await SqliteSummaryStore.open(tmp_path / "a.sqlite3", synchronous="NORMAL")
    target = await SqliteSummaryStore.open(tmp_path / "b.sqlite3", synchronous="NORMAL")
    try:
        await SummaryService(source).record("m", [DeliveryEvent("a", D)])
        await SummaryService(target).record("m", [DeliveryEvent("b", D)])
        await SummaryService(source).delete_messages(["m"])
        data = SummaryData(target, SummarySettings())
        async for kind, records in SummaryData(source, SummarySettings()).scan():
            await data.load(kind, records)
        with pytest.raises(NotFound):
            await SummaryService(target).view("m")
        await SummaryService(target).record("n", [DeliveryEvent("b", D)])
        await SummaryService(target).delete_messages(["n"])
        await SummaryService(source).record("n", [DeliveryEvent("a", D)])
        async for kind, records in SummaryData(source, SummarySettings()).scan():
            await data.load(kind, records)
        with pytest.raises(NotFound):
            await SummaryService(target).view("n")
    finally:
        await source.close()
        await target.close()


async def test_no_erased_byte_is_left_in_the_sqlite_files(tmp_path: Path) -> None:
    """Once the operation is DONE, neither the database file nor its WAL holds the id."""
    path = tmp_path / "s.sqlite3"
    store = await SqliteSummaryStore.open(path, synchronous="NORMAL")
    try:
        service = SummaryService(store)
        for i in range(20):
            await service.record(f"m{i}", [DeliveryEvent("zz-erased-zz", D), DeliveryEvent("k", D)])
        assert holding(tmp_path, b"zz-erased-zz")
        op = await service.erase_recipients(["zz-erased-zz"])
        await service.operations.wait(op.operation_id)
        assert op.state is OperationState.DONE
        assert holding(tmp_path, b"zz-erased-zz") == []
    finally:
        await store.close()


def holding(directory: Path, needle: bytes) -> list[str]:
    """The names of the files (database, WAL) in `directory` that hold `needle`."""
    return [f.name for f in directory.iterdir() if needle in f.read_bytes()]
