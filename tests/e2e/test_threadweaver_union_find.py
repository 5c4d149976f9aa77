"""Property: weaving through the real server yields exactly union-find's components.

Random corpora of users, threads and Message-IDs are woven by several concurrent clients
in random order and random batch shapes (WeaveMessage and WeaveMessages mixed). For every
thread, the unified thread the server reports must be exactly the connected component that
a union-find over (thread <-> Message-ID) gives, and its message count the number of
distinct messages in that component. Runs against every ThreadWeaver engine.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

from loadtest.corpora.unionfind import UnionFind
from tests.serving import Running


@dataclass(frozen=True)
class Woven:
    gid: str
    thread_id: str
    rfc: str
    sent_at_s: int


corpora = st.lists(
    st.tuples(
        st.integers(0, 5),  # user
        st.integers(0, 3),  # thread within the user's mailbox
        st.one_of(st.integers(0, 11).map(str), st.just("")),  # Message-ID ("" = none)
        st.integers(1, 5),  # sent_at seconds
    ),
    min_size=1,
    max_size=40,
)


def namespace(raw: list[tuple[int, int, str, int]]) -> list[Woven]:
    """Fresh ids per example so examples sharing one server never meet.

    One message has one send time wherever it is delivered, so a Message-ID fixes sent_at.
    """
    ns = uuid.uuid4().hex[:8]
    return [
        Woven(f"{ns}-u{u}", f"t{t}", f"<{r}@{ns}>" if r else "", int(r) + 1 if r else s)
        for u, t, r, s in raw
    ]


def expected_components(messages: list[Woven]) -> UnionFind[tuple[str, str]]:
    uf: UnionFind[tuple[str, str]] = UnionFind()
    by_rfc: dict[str, tuple[str, str]] = {}
    for m in messages:
        thread = (m.gid, m.thread_id)
        uf.add(thread)
        if m.rfc:
            first = by_rfc.setdefault(m.rfc, thread)
            uf.union(first, thread)
    return uf


def proto(m: Woven) -> threadweaver_pb2.WovenMessage:
    return threadweaver_pb2.WovenMessage(
        gid=m.gid,
        thread_id=m.thread_id,
        rfc_message_id=m.rfc,
        sent_at=Timestamp(seconds=m.sent_at_s),
    )


async def weave_concurrently(
    stub: threadweaver_pb2_grpc.ThreadWeaverStub, messages: list[Woven], rng: random.Random
) -> None:
    order = messages[:]
    rng.shuffle(order)
    clients = 3
    shares = [order[i::clients] for i in range(clients)]

    async def client(share: list[Woven]) -> None:
        i = 0
        while i < len(share):
            size = rng.randint(1, 7)
            chunk = share[i : i + size]
            i += size
            if len(chunk) == 1:
                await stub.WeaveMessage(
                    threadweaver_pb2.WeaveMessageRequest(message=proto(chunk[0]))
                )
            else:
                await stub.WeaveMessages(
                    threadweaver_pb2.WeaveMessagesRequest(messages=[proto(m) for m in chunk])
                )

    await asyncio.gather(*(client(s) for s in shares))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=corpora, rng=st.randoms(use_true_random=False))
async def test_unified_threads_are_union_find_components(
    weaver_server: Running, raw: list[tuple[int, int, str, int]], rng: random.Random
) -> None:
    """Every thread's unified thread equals its union-find component, messages counted once."""
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(weaver_server.channel)
    messages = namespace(raw)
    await weave_concurrently(stub, messages, rng)
    uf = expected_components(messages)
    threads = sorted({(m.gid, m.thread_id) for m in messages})

    resolved = await stub.ResolveThreads(
        threadweaver_pb2.ResolveThreadsRequest(
            threads=[common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in threads]
        )
    )
    canonical = {(r.thread.gid, r.thread.thread_id): r.unified_thread_id for r in resolved.threads}
    assert all(r.found for r in resolved.threads)
    for a in threads:
        for b in threads:
            assert (canonical[a] == canonical[b]) == uf.connected(a, b), (a, b)

    for gid, thread_id in threads:
        view = await stub.GetUnifiedThread(
            threadweaver_pb2.GetUnifiedThreadRequest(gid=gid, thread_id=thread_id)
        )
        got = {(t.gid, t.thread_id) for t in view.threads}
        component = {t for t in threads if uf.connected(t, (gid, thread_id))}
        assert got == component
        assert view.unified_thread_ids[0] == canonical[(gid, thread_id)]
        in_component = [m for m in messages if (m.gid, m.thread_id) in component]
        distinct = {m.rfc for m in in_component if m.rfc} | {
            (m.gid, m.thread_id, m.sent_at_s) for m in in_component if not m.rfc
        }
        assert view.stats.message_count == len(distinct)
        assert view.stats.last_message_at.seconds == max(m.sent_at_s for m in in_component)
