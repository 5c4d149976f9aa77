"""Stores worth moving, built the way users build them: through the gRPC API, from the load
harness's corpora at a modest size (ThreadWeaver's generated mail threads, inbox posts, delivery
events, and the templates corpus's vendor emails), plus finished Iterator jobs written to the
job store (a job's life through the API is the Iterator tests' subject)."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import (
    inbox_pb2,
    inbox_pb2_grpc,
    summary_pb2,
    summary_pb2_grpc,
    templates_pb2,
    templates_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)

from loadtest.corpora.threadweaver import CorpusParams, generate
from server.config import Settings
from storage import factory
from storage.ports import JobRecord, TaskRecord
from tests.templates_corpus import NAMES, receipt, reset

__all__ = ["build_everything", "finished_jobs", "store_files"]


async def weave(channel: grpc.aio.Channel, seed: int = 1) -> int:
    """A generated corpus woven message by message; returns the messages woven."""
    corpus = generate(
        CorpusParams(
            users=6, messages_per_discussion=120, short_threads=25, automated_messages=10,
            automated_senders=2, seed=seed,
        )
    )  # fmt: skip
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    for m in corpus.messages:
        sent = Timestamp()
        sent.FromMilliseconds(m.sent_at_ms)
        message = threadweaver_pb2.WovenMessage(
            gid=m.gid, thread_id=m.thread_id, rfc_message_id=m.rfc_message_id, sent_at=sent
        )
        await stub.WeaveMessage(threadweaver_pb2.WeaveMessageRequest(message=message))
    return len(corpus.messages)


async def post(channel: grpc.aio.Channel, rng: random.Random, posts: int = 120) -> None:
    """Posts to 40 inboxes (some read afterwards); message ids grow with time."""
    stub = inbox_pb2_grpc.InboxStub(channel)
    inboxes = [f"pi{k}" for k in range(40)]
    for n in range(1, posts + 1):
        sender, *recipients = rng.sample(inboxes, rng.randint(2, 6))
        await stub.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id=f"pt{rng.randrange(30)}", message_id=1_000 + n,
                sender_inbox_id=sender, recipient_inbox_ids=recipients,
            )
        )  # fmt: skip
    for inbox in rng.sample(inboxes, 10):
        await stub.MarkThreads(inbox_pb2.MarkThreadsRequest(inbox_id=inbox, all=True, read=True))


async def record(channel: grpc.aio.Channel, rng: random.Random, messages: int = 20) -> None:
    """Delivery events for messages from a few recipients to 3,000 (sketched, not exact)."""
    stub = summary_pb2_grpc.SummaryStub(channel)
    statuses = [summary_pb2.DELIVERY_STATUS_DELIVERED, summary_pb2.DELIVERY_STATUS_READ]
    for k in range(messages):
        size = rng.choice([3, 40, 800, 3000])
        events = [
            summary_pb2.DeliveryEvent(recipient_id=f"r{k}-{i}", status=rng.choice(statuses))
            for i in range(size)
        ]
        for start in range(0, len(events), 500):
            await stub.RecordDeliveryEvents(
                summary_pb2.RecordDeliveryEventsRequest(
                    message_id=f"pm{k}", events=events[start : start + 500]
                )
            )


async def submit(channel: grpc.aio.Channel, rng: random.Random, emails: int = 120) -> None:
    """Vendor receipts and password resets (enough per layout for templates to form)."""
    stub = templates_pb2_grpc.TemplateInductionStub(channel)
    now = Timestamp()
    now.FromMilliseconds(int(time.time() * 1000))
    batch = []
    for k in range(emails):
        name = rng.choice(NAMES)
        subject, html = receipt(rng, name) if k % 3 else reset(rng, name)
        batch.append(
            templates_pb2.Email(
                email_id=f"pe{k}", sender="orders@acme.example", recipient_id=f"u{k}",
                subject=subject, html_body=html, received_at=now,
            )
        )  # fmt: skip
        if len(batch) == 20:
            await stub.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=batch))
            batch = []
    if batch:
        await stub.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=batch))
    # The pipeline stores and forms in the background: wait until it has taken every email.
    ask = templates_pb2.GetInductionStatsRequest()
    for _ in range(600):
        stats = await stub.GetInductionStats(ask)
        idle = not (stats.cpu_queue_depth or stats.io_queue_depth or stats.formation_queue_depth)
        if stats.processed + stats.failed + stats.skipped_full >= stats.accepted and idle:
            break
        await asyncio.sleep(0.1)


async def finished_jobs(settings: Settings, count: int = 5) -> None:
    """`count` finished Iterator jobs with counters, written to the configured job store."""
    store = await factory.open_job_store(settings)
    try:
        for k in range(count):
            job = JobRecord(
                job_id=f"job-{k}", created_ms=1_700_000_000_000 + k, spec=f'{{"scope": {k}}}',
                state=("completed", "cancelled", "failed")[k % 3], rate=k * 10, paused_by="",
                error="source gone" if k % 3 == 2 else "", finished_ms=1_700_000_100_000 + k,
                version=3,
            )  # fmt: skip
            root = TaskRecord(
                task_id="root", level=0, parents=(), first=(), last=(), after=(), upto=(),
                seq=0, done=True, rows=0, started_ms=job.created_ms, spawned=(),
            )  # fmt: skip
            await store.create_job(job, root, {"emitted": 100 + k, "acked": 100 + k})
    finally:
        await store.close()


async def build_everything(channel: grpc.aio.Channel, settings: Settings) -> None:
    """Every service's store, through the API (and the job store)."""
    rng = random.Random(7)
    await weave(channel)
    await post(channel, rng)
    await record(channel, rng)
    await submit(channel, rng)
    await finished_jobs(settings)


def store_files(data_dir: Path) -> list[str]:
    """The SQLite stores in `data_dir`."""
    return sorted(p.name for p in data_dir.glob("*.sqlite3"))
