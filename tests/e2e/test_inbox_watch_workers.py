"""WatchInbox across the processes of `loom serve --workers 2`, and resume over random
disconnects.

Watchers sit on eight connections, which the kernel spreads over both processes; posts and
marks go in through all of them at once, into the same inboxes. Every watcher must get every
change of its inbox, in the order the store applied them (the order GetInboxChanges reads
back), and its last event's unread count must be the inbox's count.
"""

from __future__ import annotations

import asyncio
import random
from contextlib import AsyncExitStack
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from tests.e2e.test_inbox_grpc import post
from tests.e2e.test_inbox_watch import _settings
from tests.inbox_watching import Watcher, changes_after, watching
from tests.replicas import CONNECTIONS, bounded, worker_channels, workload_workers
from tests.serving import loom_process, running_server

K = inbox_pb2


async def test_two_workers_stream_every_change_in_store_order(tmp_path: Path) -> None:
    inboxes = [f"wk-{k}" for k in range(4)]
    rng = random.Random(35)
    async with loom_process(tmp_path, "--workers", "2") as served, AsyncExitStack() as stack:
        chans = await worker_channels(served, stack, 2)
        stubs = [inbox_pb2_grpc.InboxStub(c) for c in chans]
        watchers = [Watcher(stubs[i % CONNECTIONS], inboxes[i % len(inboxes)]) for i in range(16)]
        for w in watchers:
            await w.synced()
        posts = [(f"wk-t{i}", i + 1, rng.sample(inboxes, rng.randint(1, 3))) for i in range(120)]

        async def one(i: int, thread: str, message_id: int, recipients: list[str]) -> None:
            stub = stubs[i % CONNECTIONS]
            await post(stub, thread, message_id, "wk-sender", recipients)
            if i % 5 == 0:
                await stub.MarkThreads(
                    K.MarkThreadsRequest(
                        inbox_id=recipients[0], threads=K.ThreadIdList(thread_ids=[thread])
                    ),
                    timeout=30,
                )

        await bounded([one(i, *p) for i, p in enumerate(posts)])
        for w in watchers:
            start = w.events[0].resume_token
            truth = await changes_after(stubs[0], w.inbox_id, start)
            got = await w.count(len(truth), timeout_s=60)
            await asyncio.sleep(0.3)
            assert [e.resume_token for e in w.changes] == [e.resume_token for e in truth]
            count = await stubs[1].GetUnreadCount(K.GetUnreadCountRequest(inbox_id=w.inbox_id))
            assert got[-1].unread_count == count.unread_count
            await w.close()
    workers = workload_workers(served)
    assert workers == {0, 1}


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["post", "mark", "remove", "drop"]), st.integers(0, 5)),
        min_size=1,
        max_size=25,
    )
)
async def test_resume_over_random_disconnects_sees_every_change_once(
    tmp_path: Path, ops: list[tuple[str, int]]
) -> None:
    """Random changes with the watcher dropped at random points ("drop") and resumed from
    its last token: the events received, joined, are the inbox's changes, once each, in order."""
    config = _settings("sqlite", tmp_path)
    inbox = f"p-{random.getrandbits(40):x}"
    async with running_server(config) as one:
        stub = inbox_pb2_grpc.InboxStub(one.channel)
        received: list[inbox_pb2.InboxEvent] = []
        w = Watcher(stub, inbox)
        await w.synced()
        start = token = w.events[0].resume_token
        message = 0
        for op, k in ops:
            thread = f"t{k}"
            if op == "post":
                message += 1
                await post(stub, thread, message, "sender", [inbox])
            elif op == "mark":
                await stub.MarkThreads(
                    K.MarkThreadsRequest(
                        inbox_id=inbox, threads=K.ThreadIdList(thread_ids=[thread]), read=k % 2 == 0
                    )
                )
            elif op == "remove":
                await stub.RemoveThreads(
                    K.RemoveThreadsRequest(inbox_id=inbox, thread_ids=[thread])
                )
            else:
                await asyncio.sleep(k * 0.01)
                await w.close()
                received += w.changes
                token = w.last_token or token
                w = Watcher(stub, inbox, token)
        truth = await changes_after(stub, inbox, start)
        await w.close()
        received += w.changes
        token = w.last_token or token
        if len(received) < len(truth):
            async with watching(stub, inbox, token) as tail:
                await tail.count(len(truth) - len(received), timeout_s=30)
                await asyncio.sleep(0.2)
                received += tail.changes
        assert [e.resume_token for e in received] == [e.resume_token for e in truth]
