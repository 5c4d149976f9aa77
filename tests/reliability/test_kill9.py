"""kill -9 of the server mid-load, then a restart: every acknowledged write is there, and the
announcement that was half-way through its fan-out finishes.

Per engine set, `loom serve` runs as a process while writers keep calling WeaveMessage,
PostMessage and RecordDeliveryEvents, remembering what the server acknowledged. Once every
writer has some acknowledgements the process gets SIGKILL — no drain, no flush, whatever
was in flight is lost with it — and a new process starts on the same data (the same SQLite
directory, keyspace, table prefixes). Everything acknowledged must read back. (The Iterator's
SIGKILL test is `test_iterator_kill9.py`.)
"""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
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

from tests.engines import server_env
from tests.serving import eventually, loom_process

ACKS_BEFORE_KILL = 40
"""Acknowledged calls per writer before the kill."""
ANNOUNCED = [f"k9-all{i}" for i in range(200_000)]
STALL_AFTER_S = "2"
"""The restarted server adopts the dead one's fan-out once it has been silent this long."""


@dataclass
class Acked:
    """What the killed server acknowledged."""

    threads: list[tuple[str, str]] = field(default_factory=list)
    posts: list[tuple[str, int, list[str]]] = field(default_factory=list)
    events: dict[str, set[str]] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def counts(self) -> tuple[int, int, int]:
        return len(self.threads), len(self.posts), sum(map(len, self.events.values()))


Writer = Callable[[grpc.aio.Channel, Acked, int], Coroutine[Any, Any, None]]


async def weaver(channel: grpc.aio.Channel, acked: Acked, w: int) -> None:
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    for i in itertools.count():
        if acked.stop.is_set():
            return
        gid, thread = f"k9-{w}", f"t{i}"
        message = threadweaver_pb2.WovenMessage(
            gid=gid, thread_id=thread, rfc_message_id=f"<k9-{w}-{i}@kill.example>",
            sent_at=Timestamp(seconds=1_700_000_000 + i),
        )  # fmt: skip
        try:
            await stub.WeaveMessage(
                threadweaver_pb2.WeaveMessageRequest(message=message), timeout=10
            )
        except grpc.aio.AioRpcError:
            return  # the server is gone
        acked.threads.append((gid, thread))


async def poster(channel: grpc.aio.Channel, acked: Acked, w: int) -> None:
    stub = inbox_pb2_grpc.InboxStub(channel)
    for i in itertools.count(1):
        if acked.stop.is_set():
            return
        thread, recipients = f"k9-{w}-{i}", [f"k9-r{(i + k) % 17}" for k in range(3)]
        request = inbox_pb2.PostMessageRequest(
            thread_id=thread, message_id=i, sender_inbox_id=f"k9-s{w}", recipient_inbox_ids=recipients
        )  # fmt: skip
        try:
            await stub.PostMessage(request, timeout=10)
        except grpc.aio.AioRpcError:
            return
        acked.posts.append((thread, i, recipients))


async def recorder(channel: grpc.aio.Channel, acked: Acked, w: int) -> None:
    stub = summary_pb2_grpc.SummaryStub(channel)
    for i in itertools.count():
        if acked.stop.is_set():
            return
        message, recipient = f"k9-m{i % 5}", f"k9-{w}-{i}"
        event = summary_pb2.DeliveryEvent(
            recipient_id=recipient, status=summary_pb2.DELIVERY_STATUS_DELIVERED
        )
        try:
            await stub.RecordDeliveryEvents(
                summary_pb2.RecordDeliveryEventsRequest(message_id=message, events=[event]),
                timeout=10,
            )
        except grpc.aio.AioRpcError:
            return
        acked.events.setdefault(message, set()).add(recipient)


async def announce_part_way(channel: grpc.aio.Channel) -> str:
    """Posts the announcement and waits until its fan-out has started but not finished."""
    stub = inbox_pb2_grpc.InboxStub(channel)
    request = inbox_pb2.PostMessageRequest(
        thread_id="k9-news", message_id=10**9, sender_inbox_id="k9-ceo",
        recipient_inbox_ids=ANNOUNCED,
    )  # fmt: skip
    reply = await stub.PostMessage(request, timeout=60)
    assert reply.delivery_id, "a 200,000-recipient post runs in the background"
    progress = await eventually(
        lambda: stub.GetDelivery(inbox_pb2.GetDeliveryRequest(delivery_id=reply.delivery_id)),
        lambda d: d.progress.done > 0,
        timeout_s=60.0,
        interval_s=0.01,
    )
    assert progress.state == inbox_pb2.DELIVERY_STATE_RUNNING, "finished before the kill"
    return str(reply.delivery_id)


async def verify_announcement(channel: grpc.aio.Channel, delivery_id: str) -> None:
    """The dead server's fan-out is adopted and reaches every recipient."""
    stub = inbox_pb2_grpc.InboxStub(channel)
    done = await eventually(
        lambda: stub.GetDelivery(inbox_pb2.GetDeliveryRequest(delivery_id=delivery_id)),
        lambda d: d.state == inbox_pb2.DELIVERY_STATE_DONE,
        timeout_s=300.0,
        interval_s=0.2,
    )
    assert done.progress.done == done.progress.total == len(ANNOUNCED)
    for recipient in (ANNOUNCED[0], ANNOUNCED[len(ANNOUNCED) // 2], ANNOUNCED[-1]):
        page = await stub.ListInbox(inbox_pb2.ListInboxRequest(inbox_id=recipient))
        assert [e.thread_id for e in page.entries] == ["k9-news"]


async def verify(channel: grpc.aio.Channel, acked: Acked) -> None:
    weave = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    for start in range(0, len(acked.threads), 100):
        refs = [
            common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in acked.threads[start : start + 100]
        ]
        reply = await weave.ResolveThreads(threadweaver_pb2.ResolveThreadsRequest(threads=refs))
        lost = [f"{r.thread.gid}/{r.thread.thread_id}" for r in reply.threads if not r.found]
        assert lost == [], f"acknowledged weaves lost: {lost[:5]}"
    inbox = inbox_pb2_grpc.InboxStub(channel)
    wanted: dict[str, dict[str, int]] = {}
    for thread, message_id, recipients in acked.posts:
        for r in recipients:
            wanted.setdefault(r, {})[thread] = message_id
    for recipient, threads in wanted.items():
        page = await inbox.ListInbox(inbox_pb2.ListInboxRequest(inbox_id=recipient, page_size=500))
        found = {e.thread_id: e.last_message_id for e in page.entries}
        missing = {t for t, m in threads.items() if found.get(t) != m}
        assert missing == set(), f"{recipient}: acknowledged posts lost: {sorted(missing)[:5]}"
    summary = summary_pb2_grpc.SummaryStub(channel)
    for message, delivered_to in acked.events.items():
        reply = await summary.GetMessageSummary(
            summary_pb2.GetMessageSummaryRequest(message_id=message)
        )
        delivered = next(
            s for s in reply.statuses if s.status == summary_pb2.DELIVERY_STATUS_DELIVERED
        )
        assert delivered.exact  # a few hundred recipients: the exact tier
        assert set(delivered.recipient_ids) >= delivered_to, "acknowledged delivery events lost"


@pytest.mark.parametrize(
    "stores",
    [
        pytest.param({"threadweaver_store": "sqlite", "inbox_store": "sqlite", "summary_store": "sqlite"}, id="sqlite"),
        pytest.param(
            {"threadweaver_store": "cassandra", "inbox_store": "cassandra", "summary_store": "dynamodb"},
            id="cassandra+dynamodb",
            marks=[pytest.mark.engine("cassandra"), pytest.mark.engine("dynamodb")],
        ),
        pytest.param(
            {"threadweaver_store": "bigtable", "inbox_store": "sqlite", "summary_store": "sqlite"},
            id="bigtable",
            marks=pytest.mark.engine("bigtable"),
        ),
    ],
)  # fmt: skip
async def test_acknowledged_writes_survive_sigkill(tmp_path: Path, stores: dict[str, str]) -> None:
    """kill -9 mid-load: after a restart on the same data every acknowledged write is there and the
    cut fan-out completes."""
    env = server_env(**stores)
    data = tmp_path / "data"
    acked = Acked()
    writers: list[Writer] = [weaver, weaver, poster, poster, recorder, recorder]
    async with loom_process(tmp_path, env=env, data_dir=data) as served:
        async with grpc.aio.insecure_channel(served.target) as channel:
            tasks = [asyncio.create_task(w(channel, acked, i)) for i, w in enumerate(writers)]
            await eventually(
                lambda: asyncio.sleep(0, acked.counts()),
                lambda c: min(c) >= ACKS_BEFORE_KILL,
                timeout_s=120.0,
            )
            delivery = await announce_part_way(channel)
            served.process.send_signal(signal.SIGKILL)
            await asyncio.gather(*tasks)
            acked.stop.set()
        assert await asyncio.to_thread(served.process.wait, 30) == -signal.SIGKILL
    env_again = {**env, "LOOM_INBOX__STALL_AFTER_S": STALL_AFTER_S}
    async with (
        loom_process(tmp_path, env=env_again, data_dir=data) as again,
        grpc.aio.insecure_channel(again.target) as channel,
    ):
        await verify(channel, acked)
        await verify_announcement(channel, delivery)
    print(f"\nkill -9 ({'/'.join(sorted(set(stores.values())))}): acknowledged weaves, posts, "
          f"events before the kill {acked.counts()}, all present after restart")  # fmt: skip
