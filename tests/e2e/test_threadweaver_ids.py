"""Unified-thread ids through the real server on every engine: distinct threads never share
one, whatever their ids hold, and unified threads stored before ids were escaped
(``gid:thread``) still read, resolve and merge.

Stored data is written here as the server before this change wrote it: through the store
port, the Message-ID mapping then the thread mapping, both to ``f"{gid}:{thread_id}"``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

from server.threadweaver.model import Message, default_ut, rfc_key
from storage.ports import MessageMapping, ThreadKey, ThreadStore
from tests.e2e.weaving import Woven, assert_star_complete, assert_union_find
from tests.serving import Running
from tests.thread_ids import valid_ids

Stub = threadweaver_pb2_grpc.ThreadWeaverStub


def old_ut(thread: ThreadKey) -> str:
    """The id a new unified thread got before ids were escaped (the seed's)."""
    return f"{thread.gid}:{thread.thread_id}"


async def store_as_before(store: ThreadStore, thread: ThreadKey, rfc: str, sent_s: int) -> None:
    """What weaving `rfc` into a new `thread` left in the store before this change."""
    ut = old_ut(thread)
    key = rfc_key(Message(thread, rfc, sent_s * 1000))
    await store.put_message_uts_if_absent(
        [MessageMapping(rfc_key=key, ut=ut, sent_at_ms=sent_s * 1000)]
    )
    await store.put_thread_uts_if_absent([(thread, ut)])


async def resolve(stub: Stub, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
    refs = [common_pb2.ThreadRef(gid=t.gid, thread_id=t.thread_id) for t in threads]
    reply = await stub.ResolveThreads(threadweaver_pb2.ResolveThreadsRequest(threads=refs))
    assert all(r.found for r in reply.threads)
    return {ThreadKey(r.thread.gid, r.thread.thread_id): r.unified_thread_id for r in reply.threads}


async def weave(stub: Stub, thread: ThreadKey, rfc: str, sent_s: int) -> str:
    reply: threadweaver_pb2.WeaveMessageResponse = await stub.WeaveMessage(
        threadweaver_pb2.WeaveMessageRequest(
            message=threadweaver_pb2.WovenMessage(
                gid=thread.gid,
                thread_id=thread.thread_id,
                rfc_message_id=rfc,
                sent_at=Timestamp(seconds=sent_s),
            )
        )
    )
    return reply.unified_thread_id


async def view(stub: Stub, thread: ThreadKey) -> threadweaver_pb2.GetUnifiedThreadResponse:
    reply: threadweaver_pb2.GetUnifiedThreadResponse = await stub.GetUnifiedThread(
        threadweaver_pb2.GetUnifiedThreadRequest(gid=thread.gid, thread_id=thread.thread_id)
    )
    return reply


_SEPARATORS = st.sampled_from([":", "/", "%", "%3A", "%2F", "%25", "::"])
_PART = valid_ids(max_bytes=160)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    drawn=st.lists(
        st.tuples(_PART, _PART, _PART, _SEPARATORS, st.booleans(), st.booleans()),
        min_size=1,
        max_size=4,
    )
)
async def test_threads_never_share_an_id_and_stored_ids_still_read(
    weaver_server: Running,
    weaver_store: ThreadStore,
    drawn: list[tuple[str, str, str, str, bool, bool]],
) -> None:
    """Pairs of threads that differ only by where a separator sits, (a+sep+b, c) and
    (a, b+sep+c), with ids full of ':', '/' and '%', each thread with a message of its own,
    some stored before (old ids) and the rest woven now. Every thread woven now is a
    unified thread of its own (one thread, one message) under `default_ut`; stored ones
    read under the id they were stored with, together only with threads stored under
    that same old id."""
    stub = Stub(weaver_server.channel)
    ns = uuid.uuid4().hex[:8]  # a fresh gid prefix per example: examples never meet
    threads: dict[ThreadKey, bool] = {}  # thread -> stored before
    for a, b, c, sep, first_before, second_before in drawn:
        threads.setdefault(ThreadKey(f"{ns}{a}{sep}{b}", c), first_before)
        threads.setdefault(ThreadKey(f"{ns}{a}", f"{b}{sep}{c}"), second_before)
    spellings = ("<{}>", "{}", "  <{}> ")
    for i, (t, before) in enumerate(threads.items()):
        rfc = spellings[i % 3].format(f"{i}@{ns}.example")
        if before:
            await store_as_before(weaver_store, t, rfc, i + 1)
        else:
            assert await weave(stub, t, rfc, i + 1) == default_ut(t)

    def group(t: ThreadKey) -> tuple[str, object]:
        return ("stored", old_ut(t)) if threads[t] else ("new", t)

    assert await resolve(stub, list(threads)) == {
        t: old_ut(t) if before else default_ut(t) for t, before in threads.items()
    }
    for t in threads:
        together = sorted(u for u in threads if group(u) == group(t))
        got = await view(stub, t)
        assert [ThreadKey(r.gid, r.thread_id) for r in got.threads] == together
        assert got.stats.message_count == len(together)


async def test_the_issues_pair_is_two_unified_threads(weaver_server: Running) -> None:
    """<x@1> woven into (a:b, c) and <y@1> into (a, b:c): two unified threads of one message
    each (they shared the id "a:b:c", and so one unified thread, before ids were escaped)."""
    stub = Stub(weaver_server.channel)
    ns = uuid.uuid4().hex[:8]
    first, second = ThreadKey(f"{ns}a:b", "c"), ThreadKey(f"{ns}a", "b:c")
    assert old_ut(first) == old_ut(second)
    ids = [await weave(stub, first, f"<x@1.{ns}>", 1), await weave(stub, second, f"<y@1.{ns}>", 2)]
    assert ids == [f"{ns}a%3Ab/c", f"{ns}a/b%3Ac"]
    for t in (first, second):
        got = await view(stub, t)
        assert [(r.gid, r.thread_id) for r in got.threads] == [(t.gid, t.thread_id)]
        assert got.stats.message_count == 1


async def test_stored_unified_threads_keep_their_ids_and_merge_with_new_ones(
    weaver_server: Running, weaver_store: ThreadStore
) -> None:
    """A unified thread stored with an old id reads and resolves under it; a new mailbox
    receiving its message joins it (no new id); a merge with a new unified thread joins
    both, named by the smaller id, one link from every UT as usual."""
    stub = Stub(weaver_server.channel)
    ns = uuid.uuid4().hex[:8]
    old = ThreadKey(f"google:{ns}1", "gmail:x")
    await store_as_before(weaver_store, old, f"<m1@{ns}>", 10)
    got = await view(stub, old)
    assert list(got.unified_thread_ids) == [f"google:{ns}1:gmail:x"]
    assert got.stats.message_count == 1
    assert await resolve(stub, [old]) == {old: f"google:{ns}1:gmail:x"}

    joiner = ThreadKey(f"google:{ns}2", "gmail:y")
    assert await weave(stub, joiner, f"m1@{ns}", 10) == f"google:{ns}1:gmail:x"
    assert await weave(stub, old, f"<m2@{ns}>", 20) == f"google:{ns}1:gmail:x"

    fresh = ThreadKey(f"google:{ns}3", "gmail:z")
    assert await weave(stub, fresh, f"<m3@{ns}>", 30) == f"google%3A{ns}3/gmail%3Az"
    await weave(stub, fresh, f" <m2@{ns}> ", 20)  # joins the stored and the new thread
    canonical = min(f"google:{ns}1:gmail:x", f"google%3A{ns}3/gmail%3Az")
    assert canonical == f"google%3A{ns}3/gmail%3Az"  # '%' sorts before ':'
    trio = [old, joiner, fresh]
    assert await resolve(stub, trio) == dict.fromkeys(trio, canonical)
    got = await view(stub, joiner)
    assert list(got.unified_thread_ids) == [canonical, f"google:{ns}1:gmail:x"]
    assert {(r.gid, r.thread_id) for r in got.threads} == {(t.gid, t.thread_id) for t in trio}
    assert got.stats.message_count == 3
    woven = [
        Woven(old.gid, old.thread_id, f"<m1@{ns}>", 10),
        Woven(joiner.gid, joiner.thread_id, f"<m1@{ns}>", 10),
        Woven(old.gid, old.thread_id, f"<m2@{ns}>", 20),
        Woven(fresh.gid, fresh.thread_id, f"<m3@{ns}>", 30),
        Woven(fresh.gid, fresh.thread_id, f"<m2@{ns}>", 20),
    ]
    await assert_star_complete(weaver_store, woven)
    await assert_union_find([stub], woven)


async def test_threads_stored_under_one_old_id_stay_one_unified_thread(
    weaver_server: Running, weaver_store: ThreadStore
) -> None:
    """Two threads whose old ids collided were stored in one unified thread; weaving more of
    their messages now keeps them there (which message came from which is not stored)."""
    stub = Stub(weaver_server.channel)
    ns = uuid.uuid4().hex[:8]
    first, second = ThreadKey(f"{ns}a:b", "c"), ThreadKey(f"{ns}a", "b:c")
    await store_as_before(weaver_store, first, f"<x@{ns}>", 1)
    await store_as_before(weaver_store, second, f"<y@{ns}>", 2)
    assert await weave(stub, second, f"<z@{ns}>", 3) == f"{ns}a:b:c"
    got = await view(stub, first)
    assert list(got.unified_thread_ids) == [f"{ns}a:b:c"]
    assert [(r.gid, r.thread_id) for r in got.threads] == [
        (second.gid, second.thread_id),
        (first.gid, first.thread_id),
    ]
    assert got.stats.message_count == 3
