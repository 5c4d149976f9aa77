"""WatchInbox and GetInboxChanges through two replicas on one store (SQLite files shared by
two servers; one Cassandra keyspace): every change type reaches a watcher on the other
replica, resumes have no gap and no duplicate, tokens fail cleanly, slow consumers and the
drain end streams with RESUME, and the stream bulkhead refuses at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from server.config import Settings
from server.runtime.policies import MethodPolicy
from tests.e2e.test_inbox_grpc import post
from tests.engines import settings_for
from tests.inbox_watching import Watcher, changes_after, reason, watching
from tests.serving import Running, eventually, running_server, violations

K = inbox_pb2
ENGINES = [pytest.param("sqlite"), pytest.param("cassandra", marks=pytest.mark.engine("cassandra"))]


def _settings(engine: str, tmp_path: Path, **inbox: object) -> Settings:
    base = settings_for(engine, tmp_path, inbox_store=engine)
    fast = {"sweep_interval_s": 0.2, "delete_settle_s": 0.2, **inbox}
    return replace(base, inbox=replace(base.inbox, **fast))  # type: ignore[arg-type]


@asynccontextmanager
async def replicas(settings: Settings) -> AsyncIterator[tuple[Running, Running]]:
    async with running_server(settings) as one, running_server(settings) as two:
        yield one, two


def stubs(one: Running, two: Running) -> tuple[inbox_pb2_grpc.InboxStub, inbox_pb2_grpc.InboxStub]:
    return inbox_pb2_grpc.InboxStub(one.channel), inbox_pb2_grpc.InboxStub(two.channel)


def kinds(events: list[inbox_pb2.InboxEvent]) -> list[tuple[int, list[str]]]:
    return [(e.kind, list(e.thread_ids)) for e in events]


@pytest.mark.parametrize("engine", ENGINES)
async def test_every_change_type_reaches_a_watcher_on_the_other_replica(
    engine: str, tmp_path: Path
) -> None:
    async with replicas(_settings(engine, tmp_path)) as (one, two):
        watch, write = stubs(one, two)
        async with watching(watch, "bob") as w:
            assert w.events[0].kind == K.INBOX_EVENT_KIND_SYNCED
            assert w.events[0].unread_count == 0
            await post(write, "t1", 1, "alice", ["bob"])
            await post(write, "t2", 2, "alice", ["bob"])
            got = await w.count(2)
            assert [(e.kind, e.message_id) for e in got] == [
                (K.INBOX_EVENT_KIND_DELIVERED, 1),
                (K.INBOX_EVENT_KIND_DELIVERED, 2),
            ]
            assert got[-1].unread_count == 2
            await write.MarkThreads(
                K.MarkThreadsRequest(
                    inbox_id="bob", threads=K.ThreadIdList(thread_ids=["t1"]), read=True
                )
            )
            await write.MarkThreads(K.MarkThreadsRequest(inbox_id="bob", all=True, read=False))
            await write.RemoveThreads(K.RemoveThreadsRequest(inbox_id="bob", thread_ids=["t2"]))
            await write.DeleteThreads(K.DeleteThreadsRequest(thread_ids=["t1"]))
            got = await w.count(6)
            assert kinds(got[2:6]) == [
                (K.INBOX_EVENT_KIND_MARKED_READ, ["t1"]),
                (K.INBOX_EVENT_KIND_MARKED_UNREAD, []),
                (K.INBOX_EVENT_KIND_REMOVED, ["t2"]),
                (K.INBOX_EVENT_KIND_DELETED, ["t1"]),
            ]
            assert got[3].all_threads
            assert got[5].unread_count == 0
            # An erasure logs nothing naming the inbox: the server that erased it tells its
            # own watchers.
            await watch.DeleteInbox(K.DeleteInboxRequest(inbox_id="bob"))
            got = await w.until(lambda c: c[-1].kind == K.INBOX_EVENT_KIND_INBOX_DELETED)
            # Both replicas sweep: on Cassandra each may log the deleted row it removed, so
            # DELETED may come twice (an event is a state; applying it twice is harmless).
            assert kinds(got[5:-1]) in (
                [(K.INBOX_EVENT_KIND_DELETED, ["t1"])],
                [(K.INBOX_EVENT_KIND_DELETED, ["t1"])] * 2,
            )
            tokens = [e.resume_token for e in w.events]
            assert len(set(tokens)) == len(tokens)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_listing_then_a_watch_from_its_sync_token_misses_nothing(
    engine: str, tmp_path: Path
) -> None:
    async with replicas(_settings(engine, tmp_path)) as (one, two):
        watch, write = stubs(one, two)
        await post(write, "t1", 1, "alice", ["bob"])
        page = await watch.ListInbox(K.ListInboxRequest(inbox_id="bob"))
        assert page.sync_token
        await post(write, "t2", 2, "alice", ["bob"])  # between the listing and the watch
        async with watching(watch, "bob", page.sync_token) as w:
            await w.until(lambda c: 2 in [e.message_id for e in c])
            await asyncio.sleep(0.5)
            ids = [e.message_id for e in w.changes]
            # The token may come before changes the page already shows (Cassandra's is the
            # settle window behind "now"), never after one it does not show.
            assert ids == ([2] if engine == "sqlite" else ids)
            assert ids[-1] == 2
            assert set(ids) <= {1, 2}


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_killed_stream_resumes_with_no_gap_and_no_duplicate(
    engine: str, tmp_path: Path
) -> None:
    async with replicas(_settings(engine, tmp_path)) as (one, two):
        a, b = stubs(one, two)
        async with watching(a, "bob") as first:
            start = first.events[0].resume_token
            for m in range(1, 4):
                await post(b, f"t{m}", m, "alice", ["bob"])
            await first.count(3)
        token = first.last_token
        for m in range(4, 7):  # while nobody watches
            await post(a, f"t{m}", m, "alice", ["bob"])
        async with watching(b, "bob", token) as second:  # the other replica
            await second.count(3)
            await post(b, "t7", 7, "alice", ["bob"])
            await second.count(4)
            await asyncio.sleep(0.5)
            assert [e.message_id for e in second.changes] == [4, 5, 6, 7]
        every = await changes_after(a, "bob", start)
        assert [e.message_id for e in every] == [1, 2, 3, 4, 5, 6, 7]
        assert [e.resume_token for e in every] == [
            e.resume_token for e in first.changes[:3] + second.changes
        ]


@pytest.mark.parametrize("engine", ENGINES)
async def test_posts_through_both_replicas_at_once_stream_in_store_order(
    engine: str, tmp_path: Path
) -> None:
    """Both replicas post into one inbox at once; a watcher on each gets every change in the
    order the store holds them (what GetInboxChanges reads back), its last count exact."""
    async with replicas(_settings(engine, tmp_path)) as (one, two):
        a, b = stubs(one, two)
        async with watching(a, "bob") as on_a, watching(b, "bob") as on_b:
            start = on_a.events[0].resume_token
            await asyncio.gather(
                *(post(a if m % 2 else b, f"t{m}", m, "alice", ["bob"]) for m in range(1, 41))
            )
            truth = await eventually(
                lambda: changes_after(a, "bob", start), lambda t: len(t) >= 40, what="40 changes"
            )
            count = (await a.GetUnreadCount(K.GetUnreadCountRequest(inbox_id="bob"))).unread_count
            for w in (on_a, on_b):
                got = await w.until(lambda c: len(c) >= len(truth) and c[-1].unread_count == count)
                assert {e.message_id for e in got} == set(range(1, 41))
                await asyncio.sleep(0.3)
        expected = [e.resume_token for e in truth]
        assert [e.resume_token for e in on_a.changes][-len(expected) :] == expected
        assert [e.resume_token for e in on_b.changes][-len(expected) :] == expected


@pytest.mark.parametrize("engine", ENGINES)
async def test_tokens_past_retention_and_malformed_ones_fail_cleanly(
    engine: str, tmp_path: Path
) -> None:
    async with replicas(_settings(engine, tmp_path, change_retention_s=2.0)) as (one, _):
        stub = inbox_pb2_grpc.InboxStub(one.channel)
        async with watching(stub, "nobody-yet") as w:  # an unknown inbox is empty, not an error
            old = w.events[0].resume_token
            assert w.events[0].unread_count == 0
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.GetInboxChanges(K.GetInboxChangesRequest(inbox_id="bob", since_token=old))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # another inbox's
        assert "since_token" in violations(bad.value)
        late = Watcher(stub, "bob", "not-a-token")
        error = await late.ended()
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "resume_token" in violations(error)
        await asyncio.sleep(2.5)
        late = Watcher(stub, "nobody-yet", old)
        error = await late.ended()
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert reason(error) == "RESYNC_REQUIRED"
        assert "ListInbox" in (error.details() or "")


async def test_a_slow_consumer_ends_with_resume_and_its_token_resumes(tmp_path: Path) -> None:
    """A client that stops reading: the server gives up on it after its patience (holding
    one batch, not the backlog), ends the stream UNAVAILABLE/RESUME, and the client resumes."""
    settings = _settings("sqlite", tmp_path, watch_slow_consumer_s=1.0, watch_batch=50)
    async with running_server(settings) as one:
        stub = inbox_pb2_grpc.InboxStub(one.channel)
        threads = [f"{'x' * 200}-{i}" for i in range(1000)]
        for m, thread in enumerate(threads, start=1):
            await post(stub, thread, m, "alice", ["bob"])
        call = stub.WatchInbox(K.WatchInboxRequest(inbox_id="bob"))
        first = await call.read()
        assert first.kind == K.INBOX_EVENT_KIND_SYNCED
        toggles = 60  # each event names 1,000 threads of 200 bytes: ~12 MB in all
        for i in range(toggles):
            await stub.MarkThreads(
                K.MarkThreadsRequest(
                    inbox_id="bob", threads=K.ThreadIdList(thread_ids=threads), read=i % 2 == 0
                )
            )
        await asyncio.sleep(4)  # not reading
        got: list[inbox_pb2.InboxEvent] = []
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await _read_all(call, got)
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert reason(ended.value) == "RESUME"
        assert 0 < len(got) < toggles
        async with watching(stub, "bob", got[-1].resume_token) as resumed:
            rest = await resumed.count(toggles - len(got))
            assert len(got) + len(rest) == toggles


async def test_the_drain_ends_streams_with_resume(tmp_path: Path) -> None:
    settings = _settings("sqlite", tmp_path)
    async with running_server(settings) as one:
        w = Watcher(inbox_pb2_grpc.InboxStub(one.channel), "bob")
        await w.synced()
        stopping = asyncio.ensure_future(one.loom.stop())
        error = await w.ended(timeout_s=10)
        await stopping
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert reason(error) == "RESUME"


async def test_streams_past_the_cap_are_refused_at_once_and_others_keep_serving(
    tmp_path: Path,
) -> None:
    base = _settings("sqlite", tmp_path)
    cap = MethodPolicy(max_concurrency=3, max_waiting=0, max_wait_s=0.0, scope="inbox:read")
    settings = replace(base, policies={"loom.v1.Inbox/WatchInbox": cap})
    async with running_server(settings) as one:
        stub = inbox_pb2_grpc.InboxStub(one.channel)
        held = [Watcher(stub, f"u{i}") for i in range(3)]
        for w in held:
            await w.synced()
        refused = Watcher(stub, "u9")
        error = await refused.ended(timeout_s=5)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await post(stub, "t1", 1, "alice", ["u0"])
        count = await stub.GetUnreadCount(K.GetUnreadCountRequest(inbox_id="u0"), timeout=2)
        assert count.unread_count == 1
        await held[0].count(1)
        for w in held:
            await w.close()


async def _read_all(
    call: grpc.aio.UnaryStreamCall[K.WatchInboxRequest, K.InboxEvent],
    into: list[inbox_pb2.InboxEvent],
) -> None:
    while True:
        event = await call.read()
        if event is grpc.aio.EOF:
            return
        into.append(event)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_killed_replica_s_watchers_resume_on_the_other_with_no_gap(
    engine: str, tmp_path: Path
) -> None:
    """A replica that dies without draining: its streams fail, and their clients resume on
    the other replica from their last token, missing nothing."""
    settings = _settings(engine, tmp_path)
    async with running_server(settings) as survivor:
        stub = inbox_pb2_grpc.InboxStub(survivor.channel)
        async with running_server(settings) as doomed:
            w = Watcher(inbox_pb2_grpc.InboxStub(doomed.channel), "bob")
            await w.synced()
            start = w.events[0].resume_token
            for m in range(1, 4):
                await post(stub, f"t{m}", m, "alice", ["bob"])
            await w.count(3)
            await doomed.loom.server.stop(None)  # no drain: calls are cut
            error = await w.ended(timeout_s=10)
            assert error.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
        for m in range(4, 6):
            await post(stub, f"t{m}", m, "alice", ["bob"])
        async with watching(stub, "bob", w.last_token) as resumed:
            await resumed.count(2)
            await asyncio.sleep(0.3)
            joined = w.changes + resumed.changes
            assert [e.message_id for e in joined] == [1, 2, 3, 4, 5]
            truth = await changes_after(stub, "bob", start)
            assert [e.resume_token for e in joined] == [e.resume_token for e in truth]


async def test_thousands_of_streams_opened_at_once_all_start(tmp_path: Path) -> None:
    """4,000 watchers connecting at once (a drained replica's clients, say): every stream
    starts, none is cancelled by grpc's default 3,000 pending calls, and unary calls keep
    being answered meanwhile. They share one connection here, so its stream limit is raised
    past them (at the default, 1,000, the rest would wait in the client)."""
    settings = _settings("sqlite", tmp_path)
    settings = replace(settings, server=replace(settings.server, max_streams_per_connection=5_000))
    async with running_server(settings) as one:
        stub = inbox_pb2_grpc.InboxStub(one.channel)
        many = [Watcher(stub, f"crowd-{i}") for i in range(4_000)]
        count = await stub.GetUnreadCount(K.GetUnreadCountRequest(inbox_id="x"), timeout=10)
        assert count.unread_count == 0
        for w in many:
            await w.synced(timeout_s=120)
        assert all(w.error is None for w in many)
        await asyncio.gather(*(w.close() for w in many))
