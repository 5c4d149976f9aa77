"""Inbox deletions over gRPC on every InboxStore engine: DeleteThreads (exact reads at once,
the sweep, GetOperation), RemoveThreads, DeleteInbox, and their bad input."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from loom.v1 import common_pb2, inbox_pb2, inbox_pb2_grpc

from server.config import Settings
from server.inbox.portable import InboxData
from storage import factory
from storage.engines import INBOX_STORES
from storage.ports import PortableInboxStore
from tests.conftest import selected_engines
from tests.e2e.test_inbox_grpc import fresh, listing, post, threads_of, unread
from tests.engines import settings_for
from tests.operation_waits import wait_done
from tests.serving import Running, running_server, violations

DONE = common_pb2.OPERATION_STATE_DONE


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "inbox_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, INBOX_STORES.names)
        metafunc.parametrize("inbox_engine", engines, ids=engines, scope="module")


@pytest.fixture(scope="module")
def settings(inbox_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data = Path(tmp_path_factory.mktemp(f"inbox-del-{inbox_engine}"))
    base = settings_for(inbox_engine, data, inbox_store=inbox_engine)
    inbox = replace(
        base.inbox,
        sync_fanout_max=20,
        delete_settle_s=0.2,
        sweep_interval_s=0.5,
        sweep_page=50,
        progress_interval_s=0.0,
    )
    return replace(base, inbox=inbox)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(settings: Settings) -> AsyncIterator[Running]:
    async with running_server(settings) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def store(settings: Settings) -> AsyncIterator[PortableInboxStore]:
    """Another client of the server's store, to look at the rows themselves."""
    opened = await factory.open_inbox_store(settings)
    try:
        yield opened
    finally:
        await opened.close()


def stub(running: Running) -> inbox_pb2_grpc.InboxStub:
    return inbox_pb2_grpc.InboxStub(running.channel)


async def delete(s: inbox_pb2_grpc.InboxStub, *threads: str) -> common_pb2.Operation:
    reply = await s.DeleteThreads(inbox_pb2.DeleteThreadsRequest(thread_ids=list(threads)))
    return reply.operation


async def finished(s: inbox_pb2_grpc.InboxStub, operation_id: str) -> common_pb2.Operation:
    return await wait_done(s.GetOperation, operation_id)


async def rows_of(store: PortableInboxStore, thread: str) -> list[str]:
    """Every inbox holding a row of `thread`."""
    return [i async for page in store.scan_entries(500) for i, e in page if e.thread_id == thread]


class TestDeleteThreads:
    async def test_reads_exact_at_once_pages_full_then_rows_swept(
        self, server: Running, store: PortableInboxStore
    ) -> None:
        s = stub(server)
        alice, bob, carol = fresh("alice"), fresh("bob"), fresh("carol")
        dead, live = fresh("dead"), [fresh("t") for _ in range(4)]
        await post(s, live[0], 1, alice, [bob, carol])
        await post(s, live[1], 2, alice, [bob])
        await post(s, dead, 3, alice, [bob, carol])
        await post(s, live[2], 4, alice, [bob])
        await post(s, live[3], 5, alice, [bob])
        assert (await unread(s, bob), await unread(s, carol)) == (5, 2)

        op = await delete(s, dead)
        assert op.kind == "delete_threads"
        assert op.operation_id
        # From the answer on: counts exclude it, listings skip it with full pages in order.
        assert (await unread(s, bob), await unread(s, carol)) == (4, 1)
        first = await listing(s, bob, size=2)
        second = await listing(s, bob, size=2, token=first.next_page_token)
        assert threads_of(first) + threads_of(second) == [live[3], live[2], live[1], live[0]]
        assert len(first.entries) == len(second.entries) == 2
        assert dead not in threads_of(await listing(s, alice))

        done = await finished(s, op.operation_id)
        assert done.progress.done == done.progress.total > 0
        assert await rows_of(store, dead) == []
        assert (await unread(s, bob), await unread(s, carol)) == (4, 1)

    async def test_idempotent_and_a_post_to_a_deleted_thread_is_refused(
        self, server: Running
    ) -> None:
        s = stub(server)
        sender, rcpt = fresh("s"), fresh("r")
        thread, never = fresh("thread"), fresh("never-posted")
        await post(s, thread, 1, sender, [rcpt])
        first = await delete(s, thread, never)
        again = await delete(s, never, thread, thread)  # order and duplicates do not matter
        assert again.operation_id == first.operation_id
        await finished(s, first.operation_id)
        assert (await delete(s, thread, never)).state == DONE
        for t in (thread, never):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await post(s, t, 2, sender, [rcpt])
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert await unread(s, rcpt) == 0

    async def test_background_fan_out_of_a_deleted_thread_leaves_no_row(
        self, server: Running, store: PortableInboxStore
    ) -> None:
        s = stub(server)
        sender, thread = fresh("s"), fresh("announce")
        recipients = [fresh("r") for _ in range(300)]
        reply = await post(s, thread, 1, sender, recipients)
        assert reply.delivery_id  # above sync_fanout_max: a background fan-out
        op = await delete(s, thread)
        assert [await unread(s, r) for r in recipients[::50]] == [0] * 6
        await finished(s, op.operation_id)
        assert await rows_of(store, thread) == []
        assert await unread(s, recipients[-1]) == 0


class TestRemoveThreads:
    async def test_one_inbox_drops_a_thread_and_a_later_message_brings_it_back(
        self, server: Running
    ) -> None:
        s = stub(server)
        alice, bob, carol = fresh("alice"), fresh("bob"), fresh("carol")
        thread, other = fresh("t"), fresh("t")
        await post(s, thread, 1, alice, [bob, carol])
        await post(s, other, 2, alice, [bob])
        request = inbox_pb2.RemoveThreadsRequest(inbox_id=bob, thread_ids=[thread, "nope"])
        reply = await s.RemoveThreads(request)
        assert (reply.removed, reply.unread_count) == (1, 1)
        assert threads_of(await listing(s, bob)) == [other]
        assert threads_of(await listing(s, carol)) == [thread]
        repeat = await s.RemoveThreads(request)
        assert (repeat.removed, repeat.unread_count) == (0, 1)

        await post(s, thread, 3, carol, [bob])  # a later reply brings it back, unread
        page = await listing(s, bob)
        assert threads_of(page) == [thread, other]
        assert not page.entries[0].is_read
        assert await unread(s, bob) == 2


class TestDeleteInbox:
    async def test_every_row_and_count_gone_and_idempotent(
        self, server: Running, store: PortableInboxStore
    ) -> None:
        s = stub(server)
        alice, bob = fresh("alice"), fresh("bob")
        for m in range(1, 4):
            await post(s, fresh("t"), m, alice, [bob])
        reply = await s.DeleteInbox(inbox_pb2.DeleteInboxRequest(inbox_id=bob))
        assert reply.removed == 3
        assert (await unread(s, bob), threads_of(await listing(s, bob))) == (0, [])
        assert await store.scan_inbox(bob, 100) == []
        assert len(threads_of(await listing(s, alice))) == 3
        again = await s.DeleteInbox(inbox_pb2.DeleteInboxRequest(inbox_id=bob))
        assert again.removed == 0
        unknown = await s.DeleteInbox(inbox_pb2.DeleteInboxRequest(inbox_id=fresh("nobody")))
        assert unknown.removed == 0


class TestBadInput:
    async def test_malformed_ids_are_invalid_argument_with_field_violations(
        self, server: Running
    ) -> None:
        s = stub(server)
        calls = [
            (s.DeleteThreads(inbox_pb2.DeleteThreadsRequest()), "thread_ids"),
            (
                s.DeleteThreads(inbox_pb2.DeleteThreadsRequest(thread_ids=["ok", ""])),
                "thread_ids[1]",
            ),
            (
                s.DeleteThreads(inbox_pb2.DeleteThreadsRequest(thread_ids=["x"] * 1001)),
                "thread_ids",
            ),
            (s.RemoveThreads(inbox_pb2.RemoveThreadsRequest(thread_ids=["t"])), "inbox_id"),
            (s.RemoveThreads(inbox_pb2.RemoveThreadsRequest(inbox_id="b")), "thread_ids"),
            (s.DeleteInbox(inbox_pb2.DeleteInboxRequest(inbox_id="x" * 257)), "inbox_id"),
            (s.GetOperation(common_pb2.GetOperationRequest()), "operation_id"),
        ]
        for call, field in calls:
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await call
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert field in violations(bad.value)

    async def test_unknown_operation_is_not_found(self, server: Running) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub(server).GetOperation(common_pb2.GetOperationRequest(operation_id="op_x"))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


class TestDump:
    async def test_a_dump_carries_nothing_of_a_deleted_thread_even_before_the_sweep(
        self, settings: Settings, store: PortableInboxStore, tmp_path: Path
    ) -> None:
        """No row or delivery of the deleted thread, only its marker; loaded elsewhere the
        thread is deleted there too (a post to it is refused)."""
        dead, live = fresh("dump-dead"), fresh("dump-live")
        await store.deliver(dead, 1, unread=["u1", "u2"])
        await store.deliver(live, 2, unread=["u1"])
        await store.mark_deleted([dead], "op_dump", 0)
        data = InboxData(store, settings.inbox)
        dumped = [(kind, r) async for kind, records in data.scan() for r in records]
        holding = {kind for kind, r in dumped if getattr(r, "thread_id", "") == dead}
        assert holding == {"deleted_threads"}
        assert any(getattr(r, "thread_id", "") == live for _, r in dumped)
        target_settings = settings_for("sqlite", tmp_path)
        target = InboxData(await factory.open_inbox_store(target_settings), settings.inbox)
        try:
            for kind in [k.name for k in InboxData.kinds]:
                await target.load(kind, [r for k, r in dumped if k == kind])
            assert await target.store.deleted_threads([dead, live]) == {dead}
            assert await target.store.unread_count("u1") >= 1
        finally:
            await target.close()
