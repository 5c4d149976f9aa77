"""DeleteThreads through one replica is exact at once through another: two servers on one
Cassandra keyspace (each with its own session, as two replicas run)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from tests.e2e.test_inbox_grpc import listing, post, threads_of, unread
from tests.engines import settings_for
from tests.serving import running_server

pytestmark = pytest.mark.engine("cassandra")


async def test_a_deletion_acknowledged_by_one_replica_holds_at_once_on_the_other(
    tmp_path: Path,
) -> None:
    base = settings_for("cassandra", tmp_path, inbox_store="cassandra")
    # A long settle keeps the rows in place while the second replica reads: what it shows
    # comes from the deletion markers, not from rows already swept.
    settings = replace(base, inbox=replace(base.inbox, delete_settle_s=60.0))
    async with running_server(settings) as one, running_server(settings) as two:
        a, b = inbox_pb2_grpc.InboxStub(one.channel), inbox_pb2_grpc.InboxStub(two.channel)
        for m, thread in enumerate(["keep-1", "dead", "keep-2"], start=1):
            await post(a, thread, m, "alice", ["bob", "carol"])
        assert await unread(b, "bob") == 3
        reply = await a.DeleteThreads(inbox_pb2.DeleteThreadsRequest(thread_ids=["dead"]))
        assert reply.operation.operation_id
        assert (await unread(b, "bob"), await unread(b, "carol")) == (2, 2)
        assert threads_of(await listing(b, "bob", size=1)) == ["keep-2"]
        page = await listing(b, "carol", size=2)
        assert threads_of(page) == ["keep-2", "keep-1"]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await post(b, "dead", 9, "carol", ["bob"])
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
