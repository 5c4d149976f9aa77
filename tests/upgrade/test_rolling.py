"""Rolling upgrades: a 1.0.0 replica and today's serving one Cassandra keyspace together, and
the one case the docs warn against (TemplateInduction on Bigtable).

What `docs/operations/upgrades.md` promises for ThreadWeaver and Inbox on Cassandra: the new
replica migrates the keyspace at start-up (it records the stores' versions in
``loom_schema``, a table 1.0.0 never reads) while the 1.0.0 replica keeps serving; both then
give the same answers, each sees what the other writes, and a 1.0.0 replica started after
the migration (a rollback) still opens the keyspace and serves it. The other services stay
on each replica's own SQLite files here: they are not shared between replicas.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from loom.v1 import (
    common_pb2,
    inbox_pb2,
    inbox_pb2_grpc,
    templates_pb2,
    templates_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)

from tests.engines import server_env
from tests.serving import loom_process
from tests.upgrade import release, workload


async def _resolve(channel: grpc.aio.Channel, gid: str, thread: str) -> str:
    reply = await threadweaver_pb2_grpc.ThreadWeaverStub(channel).ResolveThreads(
        threadweaver_pb2.ResolveThreadsRequest(
            threads=[common_pb2.ThreadRef(gid=gid, thread_id=thread)]
        )
    )
    return str(reply.threads[0].unified_thread_id)


async def _weave(channel: grpc.aio.Channel, gid: str, thread: str, rfc: str) -> None:
    message = threadweaver_pb2.WovenMessage(gid=gid, thread_id=thread, rfc_message_id=rfc)
    message.sent_at.seconds = 1_700_001_000
    await threadweaver_pb2_grpc.ThreadWeaverStub(channel).WeaveMessage(
        threadweaver_pb2.WeaveMessageRequest(message=message)
    )


async def _post(channel: grpc.aio.Channel, thread: str, message_id: int, inbox: str) -> None:
    await inbox_pb2_grpc.InboxStub(channel).PostMessage(
        inbox_pb2.PostMessageRequest(
            thread_id=thread,
            message_id=message_id,
            sender_inbox_id="s",
            recipient_inbox_ids=[inbox],
        )
    )


async def _unread(channel: grpc.aio.Channel, inbox: str) -> int:
    reply = await inbox_pb2_grpc.InboxStub(channel).GetUnreadCount(
        inbox_pb2.GetUnreadCountRequest(inbox_id=inbox)
    )
    return int(reply.unread_count)


@pytest.mark.engine("cassandra")
async def test_a_1_0_0_replica_and_a_new_one_share_a_keyspace(tmp_path: Path) -> None:
    """Through the new replica's migration, both replicas answer alike and see each other's
    writes; a 1.0.0 replica started afterwards still serves the migrated keyspace."""
    env = {
        **server_env(threadweaver_store="cassandra", inbox_store="cassandra"),
        "LOOM_TEMPLATES__K_ANONYMITY": str(workload.K),
    }
    old_env = {**env, **release.env()}
    old_program = release.program()
    old_server = loom_process(tmp_path, env=old_env, data_dir=tmp_path / "a", program=old_program)
    async with old_server as old, grpc.aio.insecure_channel(old.target) as a:
        await _weave(a, "alice", "a1", "<r1@x.example>")
        await _weave(a, "bob", "b1", "<r1@x.example>")
        await _post(a, "t1", 1, "i1")
        before = await _resolve(a, "bob", "b1")
        # The new replica starts (and migrates the keyspace) while 1.0.0 serves.
        new_server = loom_process(tmp_path, env=env, data_dir=tmp_path / "b")
        async with new_server as new, grpc.aio.insecure_channel(new.target) as b:
            upgraded = {
                (x.get("event"), str(x["store"]).rsplit(" ", 1)[-1])
                for x in new.log_lines()
                if str(x.get("event")).startswith("store ") and "cassandra" in str(x["store"])
            }
            # Unrecorded 1.0.0 tables, both migrated: threads to 2 (edges), inbox to 2.
            assert ("store upgraded", "(inbox)") in upgraded
            assert ("store upgraded", "(threads)") in upgraded
            assert await _resolve(b, "bob", "b1") == before == await _resolve(a, "alice", "a1")
            # Writes through each replica are read through the other.
            await _weave(b, "carol", "c1", "<r1@x.example>")
            await _weave(a, "dave", "d1", "<r2@x.example>")
            await _weave(b, "dave", "d2", "<r2@x.example>")
            assert await _resolve(a, "carol", "c1") == before
            assert await _resolve(a, "dave", "d2") == await _resolve(b, "dave", "d1")
            await _post(b, "t2", 2, "i1")
            await _post(a, "t3", 3, "i1")
            assert await _unread(a, "i1") == await _unread(b, "i1") == 3
            both = [await workload.read_shared(c) for c in (a, b)]
            assert both[0] == both[1]
    # A 1.0.0 replica started after the migration (a rollback) opens the keyspace as it is.
    rolled_back = loom_process(tmp_path, env=old_env, data_dir=tmp_path / "c", program=old_program)
    async with rolled_back as old, grpc.aio.insecure_channel(old.target) as c:
        assert await workload.read_shared(c) == both[0]
        await _post(c, "t4", 4, "i1")
        assert await _unread(c, "i1") == 4


@pytest.mark.engine("bigtable")
async def test_templates_formed_by_the_new_release_are_unreadable_by_1_0_0(
    tmp_path: Path,
) -> None:
    """What the docs warn of: TemplateInduction on one Bigtable namespace cannot run both
    releases, because a template the new release forms is encoded v2, which 1.0.0 answers
    UNAVAILABLE for (if this starts to pass, the warning can go)."""
    env = {
        **server_env(templates_store="bigtable"),
        "LOOM_TEMPLATES__K_ANONYMITY": str(workload.K),
    }
    async with (
        loom_process(tmp_path, env=env, data_dir=tmp_path / "new") as new,
        grpc.aio.insecure_channel(new.target) as b,
    ):
        template_id = await workload.form_template(b)
    old_env = {**env, **release.env()}
    old_server = loom_process(
        tmp_path, env=old_env, data_dir=tmp_path / "old", program=release.program()
    )
    async with old_server as old, grpc.aio.insecure_channel(old.target) as a:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await templates_pb2_grpc.TemplateInductionStub(a).GetTemplate(
                templates_pb2.GetTemplateRequest(template_id=template_id)
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
