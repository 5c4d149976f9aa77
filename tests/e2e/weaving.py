"""The union-find oracle for ThreadWeaver, shared by the one- and two-server property tests.

Random corpora of users, threads and Message-IDs are woven by several concurrent clients
(spread over every server given) in random order and random batch shapes (WeaveMessage and
WeaveMessages mixed). Afterwards, for every thread, the unified thread any server reports
must be exactly the connected component that a union-find over (thread <-> Message-ID)
gives, with its distinct messages counted once; and the stored links must be star-complete
(every UT of a component linked to its smallest), which is what keeps reads at a constant
number of round trips.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import strategies as st
from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

from loadtest.corpora.unionfind import UnionFind
from storage.ports import ThreadKey, ThreadStore

Stub = threadweaver_pb2_grpc.ThreadWeaverStub


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
    Its spelling varies as mail APIs vary it (brackets or not, stray whitespace): the
    server must still see one message.
    """
    ns = uuid.uuid4().hex[:8]
    spellings = ("<{}>", "{}", " <{}> ")
    return [
        Woven(
            f"{ns}-u{u}",
            f"t{t}",
            spellings[(u + t) % 3].format(f"{r}@{ns}.example") if r else "",
            int(r) + 1 if r else s,
        )
        for u, t, r, s in raw
    ]


def _message_key(m: Woven) -> str:
    """The Message-ID as the contract says it is keyed: trimmed, one pair of brackets off,
    trimmed again (so ``< id >`` is ``id``)."""
    text = m.rfc.strip()
    if len(text) >= 2 and text[0] == "<" and text[-1] == ">":
        text = text[1:-1].strip()
    return text


def expected_components(messages: list[Woven]) -> UnionFind[tuple[str, str]]:
    uf: UnionFind[tuple[str, str]] = UnionFind()
    by_rfc: dict[str, tuple[str, str]] = {}
    for m in messages:
        thread = (m.gid, m.thread_id)
        uf.add(thread)
        if m.rfc:
            first = by_rfc.setdefault(_message_key(m), thread)
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
    stubs: Sequence[Stub], messages: list[Woven], rng: random.Random, *, clients: int = 4
) -> None:
    """`clients` concurrent callers, caller i on server i mod len(stubs), random batches."""
    order = messages[:]
    rng.shuffle(order)
    shares = [order[i::clients] for i in range(clients)]

    async def client(stub: Stub, share: list[Woven]) -> None:
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

    await asyncio.gather(*(client(stubs[i % len(stubs)], s) for i, s in enumerate(shares)))


async def weave_chain_at_once(stubs: Sequence[Stub], length: int) -> list[Woven]:
    """`length` unified threads (one thread each), then the `length - 1` messages that chain
    them, sent concurrently (12 calls in flight per server) in a shuffled order across
    `stubs`: merges race on one component from every side. Returns everything woven."""
    ns = uuid.uuid4().hex[:8]
    own = [Woven(f"{ns}-u{i:03d}", "t", f"<own-{i}@{ns}>", i + 1) for i in range(length)]
    await asyncio.gather(
        *(
            stubs[i % len(stubs)].WeaveMessage(
                threadweaver_pb2.WeaveMessageRequest(message=proto(m))
            )
            for i, m in enumerate(own)
        )
    )
    links = [
        [Woven(f"{ns}-u{i + d:03d}", "t", f"<link-{i}@{ns}>", 1000) for d in (0, 1)]
        for i in range(length - 1)
    ]
    random.Random(length).shuffle(links)
    gates = [asyncio.Semaphore(12) for _ in stubs]  # under WeaveMessages' bulkhead

    async def weave(i: int, pair: list[Woven]) -> None:
        async with gates[i % len(stubs)]:
            await stubs[i % len(stubs)].WeaveMessages(
                threadweaver_pb2.WeaveMessagesRequest(messages=[proto(m) for m in pair])
            )

    await asyncio.gather(*(weave(i, pair) for i, pair in enumerate(links)))
    return own + [m for pair in links for m in pair]


async def assert_union_find(stubs: Sequence[Stub], messages: list[Woven]) -> None:
    """Every server's ResolveThreads and GetUnifiedThread agree with the union-find."""
    uf = expected_components(messages)
    threads = sorted({(m.gid, m.thread_id) for m in messages})
    refs = [common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in threads]
    canonical: dict[tuple[str, str], str] = {}
    for stub in stubs:
        answer: dict[tuple[str, str], str] = {}
        for start in range(0, len(refs), 100):  # ResolveThreads takes up to 100 threads
            page = threadweaver_pb2.ResolveThreadsRequest(threads=refs[start : start + 100])
            resolved = await stub.ResolveThreads(page)
            assert all(r.found for r in resolved.threads)
            answer.update(
                ((r.thread.gid, r.thread.thread_id), r.unified_thread_id) for r in resolved.threads
            )
        assert canonical in ({}, answer)  # every server names the unified threads alike
        canonical = answer
    for a in threads:
        for b in threads:
            assert (canonical[a] == canonical[b]) == uf.connected(a, b), (a, b)

    for i, (gid, thread_id) in enumerate(threads):
        view = await stubs[i % len(stubs)].GetUnifiedThread(
            threadweaver_pb2.GetUnifiedThreadRequest(gid=gid, thread_id=thread_id)
        )
        got = {(t.gid, t.thread_id) for t in view.threads}
        component = {t for t in threads if uf.connected(t, (gid, thread_id))}
        assert got == component
        assert view.unified_thread_ids[0] == canonical[(gid, thread_id)]
        in_component = [m for m in messages if (m.gid, m.thread_id) in component]
        distinct = {_message_key(m) for m in in_component if m.rfc} | {
            (m.gid, m.thread_id, m.sent_at_s) for m in in_component if not m.rfc
        }
        assert view.stats.message_count == len(distinct)
        assert view.stats.last_message_at.seconds == max(m.sent_at_s for m in in_component)


async def assert_star_complete(store: ThreadStore, messages: list[Woven]) -> None:
    """Each component's UTs (found by walking links from its threads' UTs) all link to the
    smallest: a read from any thread is then thread -> UT -> smallest -> members."""
    found = await store.get_thread_uts(sorted({ThreadKey(m.gid, m.thread_id) for m in messages}))
    seen: set[str] = set()
    for start in sorted(set(found.values())):
        if start in seen:
            continue
        component, frontier = {start}, {start}
        while frontier:
            links = await store.get_links(sorted(frontier))
            frontier = {x for ut in frontier for x in links.get(ut, ())} - component
            component |= frontier
        seen |= component
        smallest = min(component)
        links = await store.get_links(sorted(component))
        unlinked = sorted(u for u in component - {smallest} if smallest not in links.get(u, ()))
        assert unlinked == [], f"not linked to {smallest}: {unlinked}"
