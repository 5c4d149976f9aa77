"""ThreadWeaver over gRPC: bad input, limits, bulkheads and deadlines, as a caller sees them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

from server.config import Settings
from server.runtime.policies import MethodPolicy
from tests.engines import settings_for
from tests.serving import Running, running_server, violations

TS = Timestamp(seconds=1_700_000_000)
TW = "loom.v1.ThreadWeaver/"


def woven(gid: str = "g", thread: str = "t", rfc: str = "<m@x>") -> threadweaver_pb2.WovenMessage:
    return threadweaver_pb2.WovenMessage(gid=gid, thread_id=thread, rfc_message_id=rfc, sent_at=TS)


@pytest.fixture
async def sqlite_server(tmp_path: Path) -> AsyncIterator[Running]:
    async with running_server(settings_for("sqlite", tmp_path)) as running:
        yield running


def stub(running: Running) -> threadweaver_pb2_grpc.ThreadWeaverStub:
    return threadweaver_pb2_grpc.ThreadWeaverStub(running.channel)


class TestBadInput:
    @pytest.mark.parametrize(
        ("message", "field"),
        [
            (woven(gid=""), "message.gid"),
            (woven(thread="x" * 513), "message.thread_id"),
            (woven(rfc="<" + "m" * 1000 + ">"), "message.rfc_message_id"),
            (threadweaver_pb2.WovenMessage(gid="g", thread_id="t"), "message.sent_at"),
            (woven(gid="a\x00b"), "message.gid"),
        ],
        ids=["empty-gid", "long-thread", "long-rfc", "no-sent-at", "nul-in-gid"],
    )
    async def test_bad_message_names_the_field(
        self, sqlite_server: Running, message: threadweaver_pb2.WovenMessage, field: str
    ) -> None:
        """Each malformed field comes back as INVALID_ARGUMENT with its path."""
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub(sqlite_server).WeaveMessage(
                threadweaver_pb2.WeaveMessageRequest(message=message)
            )
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert field in violations(caught.value)

    async def test_batch_over_the_limit_is_refused_whole(self, sqlite_server: Running) -> None:
        """1,001 messages are refused; nothing of the batch is woven."""
        batch = [woven(thread=f"t{i}", rfc=f"<{i}@x>") for i in range(1001)]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub(sqlite_server).WeaveMessages(
                threadweaver_pb2.WeaveMessagesRequest(messages=batch)
            )
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "messages" in violations(caught.value)
        resolved = await stub(sqlite_server).ResolveThreads(
            threadweaver_pb2.ResolveThreadsRequest(
                threads=[common_pb2.ThreadRef(gid="g", thread_id="t0")]
            )
        )
        assert not resolved.threads[0].found

    async def test_every_bad_item_of_a_batch_is_reported(self, sqlite_server: Running) -> None:
        """Violations carry the item index, all of them in one answer."""
        batch = [woven(), woven(gid=""), woven(thread="")]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub(sqlite_server).WeaveMessages(
                threadweaver_pb2.WeaveMessagesRequest(messages=batch)
            )
        assert set(violations(caught.value)) == {"messages[1].gid", "messages[2].thread_id"}

    async def test_a_thousand_bad_items_still_answer_invalid_argument(
        self, sqlite_server: Running
    ) -> None:
        """A bad field in each of 1,000 items: INVALID_ARGUMENT naming the first ones and how
        many more, never a status too large for the client's metadata limit."""
        batch = [woven(gid="") for _ in range(1000)]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub(sqlite_server).WeaveMessages(
                threadweaver_pb2.WeaveMessagesRequest(messages=batch)
            )
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        found = violations(caught.value)
        assert "messages[0].gid" in found
        named = len(found) - 1
        assert 10 < named < 1000
        assert found[""] == f"and {1000 - named} more violations"

    async def test_resolve_limits_and_read_bounds(self, sqlite_server: Running) -> None:
        """ResolveThreads takes 1..100 threads; max_threads is bounded; unknown is NOT_FOUND."""
        s = stub(sqlite_server)
        refs = [common_pb2.ThreadRef(gid="g", thread_id=f"t{i}") for i in range(101)]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await s.ResolveThreads(threadweaver_pb2.ResolveThreadsRequest(threads=refs))
        assert "threads" in violations(caught.value)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await s.GetUnifiedThread(
                threadweaver_pb2.GetUnifiedThreadRequest(gid="g", thread_id="t", max_threads=-1)
            )
        assert "max_threads" in violations(caught.value)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await s.GetUnifiedThread(
                threadweaver_pb2.GetUnifiedThreadRequest(gid="g", thread_id="nope")
            )
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND

    async def test_request_id_is_echoed(self, sqlite_server: Running) -> None:
        """The caller's x-request-id comes back in the trailers, for log correlation."""
        call = stub(sqlite_server).WeaveMessage(
            threadweaver_pb2.WeaveMessageRequest(message=woven()),
            metadata=(("x-request-id", "req-42"),),
        )
        await call
        assert ("x-request-id", "req-42") in tuple(await call.trailing_metadata())


def tight(settings: Settings, **policies: MethodPolicy) -> Settings:
    return replace(settings, policies={TW + name: p for name, p in policies.items()})


FULL = MethodPolicy(max_concurrency=1, max_waiting=0, max_wait_s=0.0, deadline_s=30.0)


def big_batch(tag: str, n: int = 1000) -> threadweaver_pb2.WeaveMessagesRequest:
    return threadweaver_pb2.WeaveMessagesRequest(
        messages=[woven(gid=f"{tag}", thread=f"t{i // 10}", rfc=f"<{tag}-{i}@x>") for i in range(n)]
    )


CALLS = {
    "WeaveMessage": lambda s, i: s.WeaveMessage(
        threadweaver_pb2.WeaveMessageRequest(message=woven(thread=f"c{i}", rfc=f"<c{i}@x>"))
    ),
    "WeaveMessages": lambda s, i: s.WeaveMessages(big_batch(f"b{i}", 200)),
    "GetUnifiedThread": lambda s, i: s.GetUnifiedThread(
        threadweaver_pb2.GetUnifiedThreadRequest(gid="seed", thread_id="t0")
    ),
    "ResolveThreads": lambda s, i: s.ResolveThreads(
        threadweaver_pb2.ResolveThreadsRequest(
            threads=[common_pb2.ThreadRef(gid="seed", thread_id=f"t{j}") for j in range(100)]
        )
    ),
}


class TestBulkheadsAndDeadlines:
    @pytest.mark.parametrize("method", sorted(CALLS))
    async def test_full_bulkhead_answers_resource_exhausted(
        self, tmp_path: Path, method: str
    ) -> None:
        """A method whose one slot is busy refuses the others at once; the rest still work."""
        settings = tight(settings_for("sqlite", tmp_path), **{method: FULL})
        async with running_server(settings) as running:
            s = stub(running)
            await s.WeaveMessages(big_batch("seed"))
            results = await asyncio.gather(
                *(CALLS[method](s, i) for i in range(64)), return_exceptions=True
            )
        codes = [
            r.code() if isinstance(r, grpc.aio.AioRpcError) else grpc.StatusCode.OK for r in results
        ]
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
        assert grpc.StatusCode.OK in codes
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}

    async def test_default_deadline_shorter_than_the_work(self, tmp_path: Path) -> None:
        """A method deadline shorter than the work answers DEADLINE_EXCEEDED."""
        settings = tight(
            settings_for("sqlite", tmp_path),
            WeaveMessages=MethodPolicy(deadline_s=0.001),
        )
        async with running_server(settings) as running:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub(running).WeaveMessages(big_batch("slow"))
            assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            # The server is fine afterwards.
            ok = await stub(running).WeaveMessage(
                threadweaver_pb2.WeaveMessageRequest(message=woven())
            )
            assert ok.unified_thread_id == "g/t"

    async def test_client_deadline_wins_when_shorter(self, sqlite_server: Running) -> None:
        """A client deadline shorter than the method default is the one applied."""
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub(sqlite_server).WeaveMessages(big_batch("client"), timeout=0.005)
        assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
