"""UnweaveThreads, UnweaveMailbox and GetOperation over gRPC, on every ThreadWeaver engine:
removed threads leave every read, what they alone joined comes apart, stats are recounted;
bad input is INVALID_ARGUMENT naming the field; repeats and unknown ids are no error; and on
SQLite no byte of an erased gid is left in the files once the operation is DONE."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

from server.config import Settings
from storage.ports import ThreadKey, ThreadStore
from tests.engines import settings_for
from tests.serving import Running, running_server, violations

Stub = threadweaver_pb2_grpc.ThreadWeaverStub


@pytest.fixture(scope="module")
def weaver_settings(weaver_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """As the package's, with a short grace period so operations finish within a test."""
    data = Path(tmp_path_factory.mktemp(f"unweave-{weaver_engine}"))
    settings = settings_for(weaver_engine, data, threadweaver_store=weaver_engine)
    return replace(settings, threadweaver=replace(settings.threadweaver, retire_grace_s=0.2))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def weaver_server(weaver_settings: Settings) -> AsyncIterator[Running]:
    async with running_server(weaver_settings) as running:
        yield running


def _woven(gid: str, thread: str, rfc: str, second: int) -> threadweaver_pb2.WovenMessage:
    return threadweaver_pb2.WovenMessage(
        gid=gid, thread_id=thread, rfc_message_id=rfc, sent_at=Timestamp(seconds=second)
    )


def _ref(gid: str, thread: str) -> common_pb2.ThreadRef:
    return common_pb2.ThreadRef(gid=gid, thread_id=thread)


async def _done(stub: Stub, op: common_pb2.Operation) -> common_pb2.Operation:
    """Polls GetOperation until the operation is no longer running (the lead's helper)."""
    for _ in range(600):
        now = await stub.GetOperation(common_pb2.GetOperationRequest(operation_id=op.operation_id))
        if now.state != common_pb2.OPERATION_STATE_RUNNING:
            return now
        await asyncio.sleep(0.05)
    raise AssertionError(f"operation {op.operation_id} still running")


async def _chain(stub: Stub, tag: str) -> tuple[str, str, str]:
    """alice -m1- bob -m2- carol, plus a message each of their own; returns the gids."""
    alice, bob, carol = f"{tag}alice", f"{tag}bob", f"{tag}carol"
    await stub.WeaveMessages(
        threadweaver_pb2.WeaveMessagesRequest(
            messages=[
                _woven(alice, "a", f"<{tag}m1>", 1),
                _woven(alice, "a", f"<{tag}m0>", 5),
                _woven(bob, "b", f"<{tag}m1>", 1),
                _woven(bob, "b", f"<{tag}m2>", 2),
                _woven(bob, "b", f"<{tag}bob-only>", 9),
                _woven(carol, "c", f"<{tag}m2>", 2),
                _woven(carol, "c", f"<{tag}m3>", 3),
            ]
        )
    )
    return alice, bob, carol


async def _view(stub: Stub, gid: str, thread: str) -> threadweaver_pb2.GetUnifiedThreadResponse:
    return await stub.GetUnifiedThread(
        threadweaver_pb2.GetUnifiedThreadRequest(gid=gid, thread_id=thread)
    )


async def test_removing_the_bridge_splits_the_conversation_and_recounts(
    weaver_server: Running,
) -> None:
    """Alice and Carol were one conversation only through Bob: removing Bob's thread splits
    them, each with its own messages counted, and Bob's thread is no longer woven."""
    stub = Stub(weaver_server.channel)
    alice, bob, carol = await _chain(stub, uuid.uuid4().hex[:8])
    before = await _view(stub, alice, "a")
    assert len(before.threads) == 3
    assert before.stats.message_count == 5
    reply = await stub.UnweaveThreads(
        threadweaver_pb2.UnweaveThreadsRequest(threads=[_ref(bob, "b")])
    )
    assert reply.operation.kind == "unweave_threads"
    assert reply.operation.operation_id
    a, c = await _view(stub, alice, "a"), await _view(stub, carol, "c")
    assert [t.gid for t in a.threads] == [alice]
    assert a.stats.message_count == 2
    assert a.stats.last_message_at.seconds == 5
    assert [t.gid for t in c.threads] == [carol]
    assert c.stats.message_count == 2
    assert c.stats.last_message_at.seconds == 3
    assert a.unified_thread_ids != c.unified_thread_ids
    resolved = await stub.ResolveThreads(
        threadweaver_pb2.ResolveThreadsRequest(
            threads=[_ref(alice, "a"), _ref(bob, "b"), _ref(carol, "c")]
        )
    )
    assert [r.found for r in resolved.threads] == [True, False, True]
    assert resolved.threads[0].unified_thread_id == a.unified_thread_ids[0]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _view(stub, bob, "b")
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert (await _done(stub, reply.operation)).state == common_pb2.OPERATION_STATE_DONE
    # Weaving Bob's message again joins them again, as a new weave would.
    await stub.WeaveMessage(
        threadweaver_pb2.WeaveMessageRequest(message=_woven(bob, "b", f"<{alice[:8]}m1>", 1))
    )
    await stub.WeaveMessage(
        threadweaver_pb2.WeaveMessageRequest(message=_woven(bob, "b", f"<{alice[:8]}m2>", 2))
    )
    assert len((await _view(stub, carol, "c")).threads) == 3


async def test_repeats_and_unknown_threads_are_no_error(weaver_server: Running) -> None:
    """Unweaving twice is unweaving once; unknown threads and mailboxes do nothing."""
    stub = Stub(weaver_server.channel)
    tag = uuid.uuid4().hex[:8]
    alice, bob, carol = await _chain(stub, tag)
    request = threadweaver_pb2.UnweaveThreadsRequest(
        threads=[_ref(bob, "b"), _ref(bob, "b"), _ref(f"{tag}nobody", "x")]
    )
    first = await stub.UnweaveThreads(request)
    second = await stub.UnweaveThreads(request)
    for reply in (first, second):
        assert (await _done(stub, reply.operation)).state == common_pb2.OPERATION_STATE_DONE
    assert [t.gid for t in (await _view(stub, alice, "a")).threads] == [alice]
    assert [t.gid for t in (await _view(stub, carol, "c")).threads] == [carol]
    unknown = await stub.UnweaveMailbox(threadweaver_pb2.UnweaveMailboxRequest(gid=f"{tag}x"))
    assert (await _done(stub, unknown.operation)).state == common_pb2.OPERATION_STATE_DONE


async def test_unweave_mailbox_removes_every_thread_of_the_gid(
    weaver_server: Running, weaver_store: ThreadStore
) -> None:
    """Every thread of the mailbox goes; nothing of it is left in the store once DONE."""
    stub = Stub(weaver_server.channel)
    tag = uuid.uuid4().hex[:8]
    alice, bob, _ = await _chain(stub, tag)
    await stub.WeaveMessage(threadweaver_pb2.WeaveMessageRequest(message=_woven(bob, "b2", "", 7)))
    reply = await stub.UnweaveMailbox(threadweaver_pb2.UnweaveMailboxRequest(gid=bob))
    assert reply.operation.kind == "unweave_mailbox"
    assert (await _done(stub, reply.operation)).state == common_pb2.OPERATION_STATE_DONE
    assert await weaver_store.get_mailbox_threads(bob) == []
    gone = [ThreadKey(bob, "b"), ThreadKey(bob, "b2")]
    assert await weaver_store.get_thread_uts(gone) == {}
    a = await _view(stub, alice, "a")
    assert all(bob not in ut for ut in a.unified_thread_ids)
    assert [t.gid for t in a.threads] == [alice]


async def test_get_operation_of_an_unknown_id_is_not_found(weaver_server: Running) -> None:
    """GetOperation answers NOT_FOUND for an id this server never issued."""
    stub = Stub(weaver_server.channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetOperation(common_pb2.GetOperationRequest(operation_id="nope"))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND


class TestBadInput:
    @pytest.mark.parametrize(
        ("refs", "field"),
        [
            ([], "threads"),
            ([_ref("", "t")], "threads[0].gid"),
            ([_ref("g", "t"), _ref("g", "x" * 513)], "threads[1].thread_id"),
            ([_ref("g", "t")] * 1001, "threads"),
        ],
        ids=["none", "empty-gid", "long-thread", "too-many"],
    )
    async def test_unweave_threads_names_the_bad_field(
        self, weaver_server: Running, refs: list[common_pb2.ThreadRef], field: str
    ) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await Stub(weaver_server.channel).UnweaveThreads(
                threadweaver_pb2.UnweaveThreadsRequest(threads=refs)
            )
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert field in violations(caught.value)

    @pytest.mark.parametrize("gid", ["", "a\x00b", "g" * 513])
    async def test_unweave_mailbox_names_the_gid(self, weaver_server: Running, gid: str) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await Stub(weaver_server.channel).UnweaveMailbox(
                threadweaver_pb2.UnweaveMailboxRequest(gid=gid)
            )
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "gid" in violations(caught.value)

    async def test_get_operation_names_the_id(self, weaver_server: Running) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await Stub(weaver_server.channel).GetOperation(common_pb2.GetOperationRequest())
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "operation_id" in violations(caught.value)


async def test_sqlite_files_hold_no_byte_of_an_erased_gid(tmp_path: Path) -> None:
    """After UnweaveMailbox is DONE, neither the SQLite file nor its WAL holds the gid."""
    settings = settings_for("sqlite", tmp_path, threadweaver_store="sqlite")
    settings = replace(settings, threadweaver=replace(settings.threadweaver, retire_grace_s=0.1))
    async with running_server(settings) as running:
        stub = Stub(running.channel)
        tag = "erase" + uuid.uuid4().hex[:8]
        alice, bob, _ = await _chain(stub, tag)
        reply = await stub.UnweaveMailbox(threadweaver_pb2.UnweaveMailboxRequest(gid=bob))
        assert (await _done(stub, reply.operation)).state == common_pb2.OPERATION_STATE_DONE
        contents = await asyncio.to_thread(_files, Path(settings.sqlite.data_dir))
        assert contents
        for path, data in contents.items():
            assert bob.encode() not in data, path
        assert any(alice.encode() in data for data in contents.values())  # ids are visible


def _files(data_dir: Path) -> dict[Path, bytes]:
    """Every ThreadWeaver SQLite file (database, WAL, shared memory) and its bytes."""
    return {p: p.read_bytes() for p in data_dir.rglob("threadweaver*") if p.is_file()}
