"""Workloads whose outcome is known exactly, for checking several server processes at once.

Used by `--workers N` (tests/e2e/test_workers.py) and by two replicas on the distributed
engines (tests/reliability/test_two_replicas.py): whatever process serves each call, the
unified threads must equal union-find's components, unread counts must be exact and no
delivery event may be lost.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Sequence
from contextlib import AsyncExitStack

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import (
    common_pb2,
    inbox_pb2,
    inbox_pb2_grpc,
    summary_pb2,
    summary_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)

from loadtest.corpora.unionfind import UnionFind
from tests.serving import Served, eventually

__all__ = [
    "channels",
    "post_and_count",
    "record_and_sum",
    "weave_and_check",
    "worker_channels",
    "workload_workers",
]

CONNECTIONS = 8
_OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
"""Channel options: a connection of the channel's own, never a shared subchannel."""
IN_FLIGHT = 8
"""Calls outstanding at once per phase: under every method's bulkhead, so none is shed."""


async def bounded(calls: list[Awaitable[None]]) -> None:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(call: Awaitable[None]) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(c) for c in calls))


DELIVERED, READ = summary_pb2.DELIVERY_STATUS_DELIVERED, summary_pb2.DELIVERY_STATUS_READ


async def channels(targets: Sequence[str], stack: AsyncExitStack) -> list[grpc.aio.Channel]:
    """CONNECTIONS channels over `targets`, each with its own connection (no shared
    subchannel), so the kernel (SO_REUSEPORT) or the targets spread them over processes."""
    return [
        await stack.enter_async_context(
            grpc.aio.insecure_channel(targets[k % len(targets)], options=_OWN_CONNECTION)
        )
        for k in range(CONNECTIONS)
    ]


_PROBE = "worker-probe-"
"""Request-id prefix of `worker_channels`' probe calls (`workload_workers` leaves them out)."""


def _served_by(served: Served) -> dict[object, object]:
    """Each logged call's request id, and the worker that served it."""
    return {
        line.get("request_id"): line.get("worker")
        for line in served.log_lines()
        if line.get("event") == "rpc"
    }


def workload_workers(served: Served) -> set[object]:
    """The workers that served calls other than `worker_channels`' probes."""
    return {w for rid, w in _served_by(served).items() if not str(rid).startswith(_PROBE)}


async def worker_channels(
    served: Served, stack: AsyncExitStack, workers: int
) -> list[grpc.aio.Channel]:
    """CONNECTIONS channels to `loom serve --workers N` with every worker holding at least
    one of them.

    The kernel hashes each connection to one of the SO_REUSEPORT listeners, so eight
    connections all land on one of two workers once in 128. Each channel makes one read
    (request id `_PROBE`…), whose log line names the worker that took it; while a worker holds
    none, further connections are opened and one that reaches it replaces a channel of a
    worker holding several.
    """
    held: list[tuple[grpc.aio.Channel, object]] = []
    for n in range(CONNECTIONS + 64):
        chan = await stack.enter_async_context(
            grpc.aio.insecure_channel(served.target, options=_OWN_CONNECTION)
        )
        request_id = f"{_PROBE}{n}"
        await inbox_pb2_grpc.InboxStub(chan).GetUnreadCount(
            inbox_pb2.GetUnreadCountRequest(inbox_id="worker-probe"),
            metadata=(("x-request-id", request_id),),
            timeout=30,
        )

        async def logged(request_id: str = request_id) -> bool:
            return request_id in _served_by(served)

        await eventually(logged, bool, timeout_s=30.0)
        worker = _served_by(served)[request_id]
        counts = Counter(w for _, w in held)
        if len(held) < CONNECTIONS:
            held.append((chan, worker))
        elif worker not in counts:
            crowded = counts.most_common(1)[0][0]
            held.pop(next(i for i, (_, w) in enumerate(held) if w == crowded))
            held.append((chan, worker))
        if len(held) == CONNECTIONS and len({w for _, w in held}) >= workers:
            return [c for c, _ in held]
    raise AssertionError(f"{CONNECTIONS + 64} connections reached only workers {set(counts)}")


async def weave_and_check(chans: list[grpc.aio.Channel], rng: random.Random) -> None:
    messages = [(f"u{rng.randrange(20)}", f"t{rng.randrange(4)}", f"<m{rng.randrange(120)}@w>")
                for _ in range(400)]  # fmt: skip
    truth: UnionFind[tuple[str, str]] = UnionFind()
    first: dict[str, tuple[str, str]] = {}
    for gid, thread, rfc in messages:
        truth.add((gid, thread))
        truth.union(first.setdefault(rfc, (gid, thread)), (gid, thread))

    async def weave(i: int, gid: str, thread: str, rfc: str) -> None:
        stub = threadweaver_pb2_grpc.ThreadWeaverStub(chans[i % CONNECTIONS])
        message = threadweaver_pb2.WovenMessage(
            gid=gid, thread_id=thread, rfc_message_id=rfc, sent_at=Timestamp(seconds=int(rfc[2:-3]) + 1)
        )  # fmt: skip
        await stub.WeaveMessage(threadweaver_pb2.WeaveMessageRequest(message=message), timeout=30)

    await bounded([weave(i, *m) for i, m in enumerate(messages)])
    threads = sorted(truth)
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(chans[0])
    resolved: dict[tuple[str, str], str] = {}
    for start in range(0, len(threads), 100):
        refs = [common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in threads[start : start + 100]]
        reply = await stub.ResolveThreads(threadweaver_pb2.ResolveThreadsRequest(threads=refs))
        resolved.update(
            {(r.thread.gid, r.thread.thread_id): r.unified_thread_id for r in reply.threads}
        )
    by_component: dict[tuple[str, str], set[str]] = {}
    by_unified: dict[str, set[tuple[str, str]]] = {}
    for key in threads:
        by_component.setdefault(truth.find(key), set()).add(resolved[key])
        by_unified.setdefault(resolved[key], set()).add(truth.find(key))
    assert all(len(uts) == 1 for uts in by_component.values()), "a component was split"
    assert all(len(roots) == 1 for roots in by_unified.values()), "components were merged"


async def post_and_count(chans: list[grpc.aio.Channel], rng: random.Random) -> None:
    inboxes = [f"w-i{k}" for k in range(20)]
    posts = [(f"w-t{i}", i + 1, rng.sample(inboxes, rng.randint(1, 5))) for i in range(300)]
    expected = {inbox: 0 for inbox in inboxes}
    for _, _, recipients in posts:
        for r in recipients:
            expected[r] += 1

    async def post(i: int, thread: str, message_id: int, recipients: list[str]) -> None:
        stub = inbox_pb2_grpc.InboxStub(chans[i % CONNECTIONS])
        request = inbox_pb2.PostMessageRequest(
            thread_id=thread, message_id=message_id, sender_inbox_id="w-sender",
            recipient_inbox_ids=recipients,
        )  # fmt: skip
        await stub.PostMessage(request, timeout=30)

    await bounded([post(i, *p) for i, p in enumerate(posts)])
    counts = {}
    for i, inbox in enumerate(inboxes):
        stub = inbox_pb2_grpc.InboxStub(chans[i % CONNECTIONS])
        reply = await stub.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id=inbox))
        counts[inbox] = reply.unread_count
    assert counts == expected


async def record_and_sum(chans: list[grpc.aio.Channel], rng: random.Random) -> None:
    events = [(f"w-m{rng.randrange(4)}", f"r{rng.randrange(150)}", rng.choice([DELIVERED, READ]))
              for _ in range(600)]  # fmt: skip

    async def record(
        i: int, message: str, recipient: str, status: summary_pb2.DeliveryStatus.ValueType
    ) -> None:
        stub = summary_pb2_grpc.SummaryStub(chans[i % CONNECTIONS])
        event = summary_pb2.DeliveryEvent(recipient_id=recipient, status=status)
        await stub.RecordDeliveryEvents(
            summary_pb2.RecordDeliveryEventsRequest(message_id=message, events=[event]), timeout=30
        )

    await bounded([record(i, *e) for i, e in enumerate(events)])
    stub = summary_pb2_grpc.SummaryStub(chans[0])
    for message in {m for m, _, _ in events}:
        reply = await stub.GetMessageSummary(
            summary_pb2.GetMessageSummaryRequest(message_id=message)
        )
        got = {s.status: set(s.recipient_ids) for s in reply.statuses}
        read = {r for m, r, s in events if m == message and s == READ}
        delivered = {r for m, r, _ in events if m == message}  # READ implies DELIVERED
        assert got.get(READ, set()) == read
        assert got[DELIVERED] == delivered
