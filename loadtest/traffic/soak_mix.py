"""The soak's traffic: one driver per service, each a few fixed-rate loops until a deadline.

Every call's outcome is kept as (minute, method, latency ms, status name); the loops are open
loop (arrival ``i`` is due at ``start + i / rate``) with a bound on calls in flight, beyond
which an arrival is counted as DROPPED rather than queued without bound in the client.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import (
    common_pb2,
    inbox_pb2,
    inbox_pb2_grpc,
    iterator_pb2_grpc,
    summary_pb2,
    summary_pb2_grpc,
    templates_pb2,
    templates_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)
from loom.v1 import iterator_pb2 as it

from loadtest.corpora.synthetic_emails import SyntheticEmail, ZipfStream

__all__ = ["DRIVERS", "Outcomes"]

MAX_IN_FLIGHT = 200
_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


@dataclass
class Outcomes:
    """Every call of the soak."""

    started: float = field(default_factory=time.monotonic)
    rows: list[tuple[int, str, float, str]] = field(default_factory=list)

    async def timed(self, method: str, call: Awaitable[object]) -> object | None:
        t0 = time.monotonic()
        try:
            reply = await call
        except grpc.aio.AioRpcError as error:
            self._add(t0, method, error.code().name)
            return None
        self._add(t0, method, "OK")
        return reply

    def _add(self, t0: float, method: str, code: str) -> None:
        now = time.monotonic()
        self.rows.append((int((t0 - self.started) // 60), method, (now - t0) * 1000, code))


async def every(
    rate: float,
    deadline: float,
    method: str,
    outcomes: Outcomes,
    op: Callable[[int], Awaitable[object]],
) -> None:
    """Calls `op(i)` at `rate`/s until `deadline`, timing each as `method`."""
    if rate <= 0:
        return
    start = time.monotonic()
    in_flight: set[asyncio.Task[object]] = set()
    for i in itertools.count():
        due = start + i / rate
        if due >= deadline:
            break
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if len(in_flight) >= MAX_IN_FLIGHT:
            outcomes.rows.append((int((due - outcomes.started) // 60), method, 0.0, "DROPPED"))
            continue
        task = asyncio.create_task(outcomes.timed(method, op(i)))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    await asyncio.gather(*in_flight)


async def threadweaver(target: str, scale: float, deadline: float, out: Outcomes) -> None:
    rng = random.Random(1)
    woven: list[tuple[str, str]] = [("soak-u0", "t0")]
    async with grpc.aio.insecure_channel(target, options=_OPTIONS) as channel:
        stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)

        def weave(i: int) -> Awaitable[object]:
            batch = []
            for k in range(20):
                gid, thread = f"soak-u{rng.randrange(200)}", f"t{(i * 20 + k) // 60}"
                message = threadweaver_pb2.WovenMessage(
                    gid=gid, thread_id=thread, rfc_message_id=f"<s{(i * 20 + k) // 3}@soak>",
                    sent_at=Timestamp(seconds=1_700_000_000 + i),
                )  # fmt: skip
                batch.append(message)
                woven.append((gid, thread))
            del woven[: max(0, len(woven) - 5000)]
            return stub.WeaveMessages(
                threadweaver_pb2.WeaveMessagesRequest(messages=batch), timeout=30
            )

        def read(_: int) -> Awaitable[object]:
            gid, thread = rng.choice(woven)
            return stub.GetUnifiedThread(
                threadweaver_pb2.GetUnifiedThreadRequest(gid=gid, thread_id=thread), timeout=5
            )

        def resolve(_: int) -> Awaitable[object]:
            refs = [
                common_pb2.ThreadRef(gid=g, thread_id=t)
                for g, t in rng.sample(woven, min(50, len(woven)))
            ]
            return stub.ResolveThreads(
                threadweaver_pb2.ResolveThreadsRequest(threads=refs), timeout=5
            )

        await asyncio.gather(
            every(5 * scale, deadline, "ThreadWeaver/WeaveMessages", out, weave),
            every(20 * scale, deadline, "ThreadWeaver/GetUnifiedThread", out, read),
            every(5 * scale, deadline, "ThreadWeaver/ResolveThreads", out, resolve),
        )


async def inbox(target: str, scale: float, deadline: float, out: Outcomes) -> None:
    rng = random.Random(2)
    inboxes = [f"soak-i{k}" for k in range(500)]
    async with grpc.aio.insecure_channel(target, options=_OPTIONS) as channel:
        stub = inbox_pb2_grpc.InboxStub(channel)
        ids = itertools.count(1)

        def unread(_: int) -> Awaitable[object]:
            return stub.GetUnreadCount(
                inbox_pb2.GetUnreadCountRequest(inbox_id=rng.choice(inboxes)), timeout=1
            )

        def listing(_: int) -> Awaitable[object]:
            return stub.ListInbox(
                inbox_pb2.ListInboxRequest(inbox_id=rng.choice(inboxes)), timeout=5
            )

        def post(_: int) -> Awaitable[object]:
            n = next(ids)
            request = inbox_pb2.PostMessageRequest(
                thread_id=f"soak-t{n % 400}", message_id=n, sender_inbox_id=rng.choice(inboxes),
                recipient_inbox_ids=rng.sample(inboxes, rng.randint(1, 50)),
            )  # fmt: skip
            return stub.PostMessage(request, timeout=10)

        def mark(_: int) -> Awaitable[object]:
            request = inbox_pb2.MarkThreadsRequest(
                inbox_id=rng.choice(inboxes), all=True, read=True
            )
            return stub.MarkThreads(request, timeout=5)

        def announce(_: int) -> Awaitable[object]:
            n = next(ids)
            request = inbox_pb2.PostMessageRequest(
                thread_id=f"soak-news{n}", message_id=n, sender_inbox_id="soak-ceo",
                recipient_inbox_ids=[f"soak-all{k}" for k in range(20_000)],
            )  # fmt: skip
            return stub.PostMessage(request, timeout=30)

        await asyncio.gather(
            every(150 * scale, deadline, "Inbox/GetUnreadCount", out, unread),
            every(15 * scale, deadline, "Inbox/ListInbox", out, listing),
            every(5 * scale, deadline, "Inbox/PostMessage", out, post),
            every(2 * scale, deadline, "Inbox/MarkThreads", out, mark),
            every(1 / 300, deadline, "Inbox/PostMessage(20K)", out, announce),
        )


async def summary(target: str, scale: float, deadline: float, out: Outcomes) -> None:
    rng = random.Random(3)
    async with grpc.aio.insecure_channel(target, options=_OPTIONS) as channel:
        stub = summary_pb2_grpc.SummaryStub(channel)

        def record(i: int) -> Awaitable[object]:
            events = [
                summary_pb2.DeliveryEvent(
                    recipient_id=f"r{rng.randrange(100_000)}",
                    status=summary_pb2.DeliveryStatus.ValueType(rng.randint(1, 3)),
                )
                for _ in range(50)
            ]
            request = summary_pb2.RecordDeliveryEventsRequest(
                message_id=f"soak-m{i % 200}", events=events
            )
            return stub.RecordDeliveryEvents(request, timeout=10)

        def get(_: int) -> Awaitable[object]:
            request = summary_pb2.GetMessageSummaryRequest(message_id=f"soak-m{rng.randrange(200)}")
            return stub.GetMessageSummary(request, timeout=5)

        await asyncio.gather(
            every(20 * scale, deadline, "Summary/RecordDeliveryEvents", out, record),
            every(10 * scale, deadline, "Summary/GetMessageSummary", out, get),
        )


async def iterator(target: str, scale: float, deadline: float, out: Outcomes) -> None:
    """One iteration job at a time over the generated source, streamed and acknowledged."""
    async with grpc.aio.insecure_channel(target, options=_OPTIONS) as channel:
        stub = iterator_pb2_grpc.IteratorStub(channel)
        while time.monotonic() < deadline:
            request = it.StartIterationRequest(
                enterprise_range=it.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=3),
                level="file", require_ack=True, rate_limit_per_second=int(20_000 * scale),
            )  # fmt: skip
            job = await out.timed(
                "Iterator/StartIteration", stub.StartIteration(request, timeout=10)
            )
            if not isinstance(job, it.Job):
                await asyncio.sleep(5)
                continue
            t0 = time.monotonic()
            try:
                async for batch in stub.StreamObjects(it.StreamObjectsRequest(job_id=job.job_id)):
                    acks = [c.chunk_id for c in batch.chunks]
                    await out.timed(
                        "Iterator/AckObjects",
                        stub.AckObjects(
                            it.AckObjectsRequest(job_id=job.job_id, chunk_ids=acks), timeout=10
                        ),
                    )
                out._add(t0, "Iterator/StreamObjects(job)", "OK")
            except grpc.aio.AioRpcError as error:
                out._add(t0, "Iterator/StreamObjects(job)", error.code().name)
            await asyncio.sleep(min(30.0, max(0.0, deadline - time.monotonic())))


def _email(e: SyntheticEmail) -> templates_pb2.Email:
    return templates_pb2.Email(
        email_id=e.email_id, sender=e.sender, recipient_id=e.recipient, subject=e.subject,
        html_body=e.html, received_at=Timestamp(seconds=int(time.time())),
    )  # fmt: skip


async def templates(target: str, scale: float, deadline: float, out: Outcomes) -> None:
    """Crusher's stream (Zipf over 2,000 templates, 10 KB bodies): submitted and annotated."""
    stream = iter(ZipfStream(alpha=1.1, templates=2000, max_per_template=10**9, seed=5))
    async with grpc.aio.insecure_channel(target, options=_OPTIONS) as channel:
        stub = templates_pb2_grpc.TemplateInductionStub(channel)

        def submit(_: int) -> Awaitable[object]:
            emails = [_email(next(stream)) for _ in range(20)]
            return stub.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=emails), timeout=10)

        def annotate(_: int) -> Awaitable[object]:
            request = templates_pb2.AnnotateEmailRequest(email=_email(next(stream)))
            return stub.AnnotateEmail(request, timeout=5)

        await asyncio.gather(
            every(10 * scale, deadline, "TemplateInduction/SubmitEmails", out, submit),
            every(10 * scale, deadline, "TemplateInduction/AnnotateEmail", out, annotate),
        )


DRIVERS: list[Callable[[str, float, float, Outcomes], Coroutine[Any, Any, None]]] = [
    threadweaver,
    inbox,
    summary,
    iterator,
    templates,
]
"""One per service."""
