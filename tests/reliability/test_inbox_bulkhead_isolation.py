"""Bulkhead isolation, tested for what is deterministic: a fan-out flood is refused, never queued
without bound, never fails an unread count, and loses none of what it was promised.

Yammer's inbox went down because one kind of work could take every resource of the service.
Loom gives every method its own bulkhead and runs large fan-outs in a bounded background
stage. How *fast* GetUnreadCount stays under the flood is a figure measured by
``python -m loadtest inbox-isolation`` (README), never a bound here: this suite runs on shared
machines where a slow neighbour must not fail a correct build. What a caller can rely on
whatever the machine's load is checked instead:

- PostMessage is refused with RESOURCE_EXHAUSTED once its bulkhead and the fan-out queue are
  full, and the stage never holds more than its queue plus its workers;
- every GetUnreadCount issued during the flood answers OK with the right count;
- every post that was accepted is delivered to every one of its recipients.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.traffic.inbox_flood import FloodResult, FloodSpec, recipients, run_flood
from server.config import Settings
from tests.engines import settings_for
from tests.serving import eventually, running_server

INBOXES = 100  # probe inboxes, each with UNREAD unread threads
UNREAD = 3
FANOUT_QUEUE = 4
FANOUT_WORKERS = 2
SIZES = (2_000, 3_000, 4_000, 5_000)  # all above sync_fanout_max: background fan-outs


def flood_settings(tmp: Path) -> Settings:
    """A small fan-out queue, so a flood of 24 posters overflows it at once."""
    base = settings_for("sqlite", tmp, inbox_store="sqlite")
    inbox = replace(base.inbox, fanout_queue=FANOUT_QUEUE, fanout_workers=FANOUT_WORKERS)
    return replace(base, inbox=inbox)


async def seed(stub: inbox_pb2_grpc.InboxStub) -> None:
    for t in range(UNREAD):
        await stub.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id=f"seed-{t}",
                message_id=t + 1,
                sender_inbox_id="seeder",
                recipient_inbox_ids=[f"probe-{i}" for i in range(INBOXES)],
            )
        )


async def probe_until(stub: inbox_pb2_grpc.InboxStub, done: asyncio.Event) -> Counter[str]:
    """GetUnreadCount round the probe inboxes until `done`: outcome -> calls."""
    seen: Counter[str] = Counter()
    i = 0
    while not done.is_set():
        request = inbox_pb2.GetUnreadCountRequest(inbox_id=f"probe-{i % INBOXES}")
        try:
            reply = await stub.GetUnreadCount(request, timeout=30.0)
        except grpc.aio.AioRpcError as error:
            seen[error.code().name] += 1
        else:
            seen["OK" if reply.unread_count == UNREAD else f"count {reply.unread_count}"] += 1
        i += 1
    return seen


async def states(stub: inbox_pb2_grpc.InboxStub, flood: FloodResult) -> Counter[str]:
    replies = await asyncio.gather(
        *(stub.GetDelivery(inbox_pb2.GetDeliveryRequest(delivery_id=d)) for *_, d in flood.accepted)
    )
    return Counter(inbox_pb2.DeliveryState.Name(r.state) for r in replies)


async def inbox_threads(stub: inbox_pb2_grpc.InboxStub, inbox: str) -> dict[str, int]:
    reply = await stub.ListInbox(inbox_pb2.ListInboxRequest(inbox_id=inbox, page_size=500))
    return {e.thread_id: e.last_message_id for e in reply.entries}


async def test_a_fanout_flood_is_shed_and_every_promise_kept(tmp_path: Path) -> None:
    """Under a flood of large posts: the excess is refused with RESOURCE_EXHAUSTED, every
    unread count asked meanwhile answers right, and every accepted post reaches every recipient
    (the three promises of the module docstring)."""
    async with running_server(flood_settings(tmp_path)) as running:
        stub = inbox_pb2_grpc.InboxStub(running.channel)
        await seed(stub)
        spec = FloodSpec(
            target=running.target,
            start_at=time.monotonic(),
            duration_s=4.0,
            posters=24,
            sizes=SIZES,
        )
        stop_probing = asyncio.Event()
        probing = asyncio.create_task(probe_until(stub, stop_probing))
        try:
            # The flood runs in a process of its own, as a separate client. (In a thread, its
            # asyncio.run shared the process's task registry with this loop, and on a starved
            # machine its closing all_tasks() failed: "Set changed size during iteration".)
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                flood = await asyncio.get_running_loop().run_in_executor(pool, run_flood, spec)
            # The flood has just stopped posting: whatever it left queued is bounded.
            left = await states(stub, flood)
        finally:
            stop_probing.set()
            probed = await probing

        # PostMessage was saturated and shed, not queued without bound.
        assert flood.outcomes["RESOURCE_EXHAUSTED"] > 0, dict(flood.outcomes)
        assert flood.outcomes["ACCEPTED"] >= FANOUT_QUEUE, dict(flood.outcomes)
        assert set(flood.outcomes) <= {"ACCEPTED", "RESOURCE_EXHAUSTED"}, dict(flood.outcomes)
        assert left["DELIVERY_STATE_RUNNING"] <= FANOUT_QUEUE + FANOUT_WORKERS, dict(left)
        assert left["DELIVERY_STATE_FAILED"] == 0, dict(left)

        # Every unread count issued during the flood answered, with the right count.
        assert set(probed) == {"OK"}, dict(probed)
        assert probed["OK"] >= 20

        # Every accepted post reaches every recipient: the newest accepted message of each
        # thread is in the first and in the last inbox of its recipient list, and unread.
        await eventually(
            lambda: states(stub, flood),
            lambda s: s["DELIVERY_STATE_DONE"] == len(flood.accepted),
            timeout_s=180.0,
            interval_s=0.2,
        )
        newest: dict[str, int] = {}
        for thread, message_id, _, _ in flood.accepted:
            newest[thread] = max(newest.get(thread, 0), message_id)
        assert await inbox_threads(stub, "fan-0") == newest
        for thread, message_id, size, _ in flood.accepted:
            if message_id == newest[thread]:
                last = recipients(size)[-1]
                assert (await inbox_threads(stub, last)).get(thread) == message_id
        unread = await stub.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id="fan-0"))
        assert unread.unread_count == len(newest)
