"""Erasing one subject from all five services, per engine set: each erasure's time to
acknowledge and to DONE, against a bare scan of the same store in the same run.

``source .engines/env && python -m loadtest.benches.erase_subject --others 2000``

A real server (`server.app.build_server`) per engine set: ``sqlite`` (every store embedded)
and ``distributed`` (ThreadWeaver and Inbox on Cassandra, Summary and the Iterator's jobs on
DynamoDB Local, TemplateInduction on the Bigtable emulator). Through the gRPC API it writes
`--others` other people's data beside one subject's: a thread per mailbox (every tenth
sharing a Message-ID with the subject's, so the subject's unified thread has members to
split off), a post to every inbox, one summary of `--others` recipients, a receipt email per
recipient, and a finished job each. Then the subject is erased service by service, as an
operator would: UnweaveMailbox, DeleteInbox, both EraseRecipients, DeleteJob, each polled
with GetOperation until DONE. The floor each is compared with is `loom dump`'s scan of the
same service's store (`transfer.dump`), measured right after: what reading the whole store
once costs on that engine, which an erasure that must scan cannot beat.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import (
    common_pb2,
    inbox_pb2,
    inbox_pb2_grpc,
    iterator_pb2,
    iterator_pb2_grpc,
    summary_pb2,
    summary_pb2_grpc,
    templates_pb2,
    templates_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)

from server.app import build_server
from server.config import Settings, load_settings
from server.portable import transfer
from storage import factory
from storage.ports import JobRecord, TaskRecord

__all__ = ["main"]

SUBJECT = "bench-subject"
DISTRIBUTED = {
    "threadweaver_store": "cassandra",
    "inbox_store": "cassandra",
    "summary_store": "dynamodb",
    "templates_store": "bigtable",
    "iterator_state": "dynamodb",
}
_HTML = (
    "<html><body><p>Hi {name},</p><table><tr><td>Order</td><td>{order}</td></tr>"
    "<tr><td>Total</td><td>${total}.00</td></tr></table><p>Thanks, Acme</p></body></html>"
)


def _settings(engines: str, data_dir: Path) -> Settings:
    ns = f"es{os.getpid()}{int(time.time()) % 100000}"
    stores = DISTRIBUTED if engines == "distributed" else {}
    return load_settings(
        env={},
        overrides={
            "server": {"port": 0, "use_uvloop": False, "grace_s": 1.0},
            "sqlite": {"data_dir": str(data_dir), "synchronous": "NORMAL"},
            "cassandra": {
                "contact_points": os.environ.get("LOOM_TEST_CASSANDRA_CONTACT_POINTS", "127.0.0.1"),
                "port": int(os.environ.get("LOOM_TEST_CASSANDRA_PORT", "9042")),
                "keyspace": f"loom_{ns}",
                "create_schema": True,
            },
            "bigtable": {"project": "loom-test", "instance": "loom-test",
                         "table_prefix": f"{ns}-", "create_tables": True},
            "dynamodb": {"endpoint_url": os.environ.get("LOOM_TEST_DYNAMODB_ENDPOINT", ""),
                         "table_prefix": f"{ns}-", "create_tables": True},
            "threadweaver": {"retire_grace_s": 0.5},
            "storage": stores,
        },
    )  # fmt: skip


def _job_id(subject: str) -> str:
    return hashlib.md5(subject.encode()).hexdigest()


async def _write(channel: grpc.aio.Channel, settings: Settings, others: int) -> None:
    people = [SUBJECT, *(f"bench-{k}" for k in range(others))]
    sent = Timestamp()
    sent.FromMilliseconds(1_700_000_000_000)
    weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    messages = [
        threadweaver_pb2.WovenMessage(
            gid=p, thread_id="t", sent_at=sent,
            rfc_message_id="<shared@bench>" if k % 10 == 0 else f"<{p}@bench>",
        )
        for k, p in enumerate(people)
    ]  # fmt: skip
    for start in range(0, len(messages), 500):
        await weaver.WeaveMessages(
            threadweaver_pb2.WeaveMessagesRequest(messages=messages[start : start + 500])
        )
    inbox = inbox_pb2_grpc.InboxStub(channel)
    for start in range(0, len(people), 1000):
        await inbox.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id=f"bench-{start}", message_id=1 + start, sender_inbox_id="bench-sender",
                recipient_inbox_ids=people[start : start + 1000],
            )
        )  # fmt: skip
    summary = summary_pb2_grpc.SummaryStub(channel)
    for start in range(0, len(people), 500):
        await summary.RecordDeliveryEvents(
            summary_pb2.RecordDeliveryEventsRequest(
                message_id=f"m{start // 100}",
                events=[
                    summary_pb2.DeliveryEvent(
                        recipient_id=p, status=summary_pb2.DELIVERY_STATUS_READ
                    )
                    for p in people[start : start + 500]
                ],
            )
        )
    templates = templates_pb2_grpc.TemplateInductionStub(channel)
    emails = [
        templates_pb2.Email(
            email_id=f"e{k}", sender="orders@acme.example", recipient_id=p, subject=f"Order {k}",
            html_body=_HTML.format(name=f"N{k}", order=k, total=k % 90), received_at=sent,
        )
        for k, p in enumerate(people)
    ]  # fmt: skip
    for start in range(0, len(emails), 100):
        await templates.SubmitEmails(
            templates_pb2.SubmitEmailsRequest(emails=emails[start : start + 100])
        )
    while True:
        s = await templates.GetInductionStats(templates_pb2.GetInductionStatsRequest())
        busy = s.cpu_queue_depth or s.io_queue_depth or s.formation_queue_depth
        if s.processed + s.failed + s.skipped_full >= s.accepted and not busy:
            break
        await asyncio.sleep(0.2)
    store = await factory.open_job_store(settings)
    try:
        for p in people[: min(len(people), 200)]:
            job = JobRecord(
                job_id=_job_id(p), created_ms=1_700_000_000_000, spec=json.dumps({"user_id": p}),
                state="completed", rate=0, paused_by="", error="", finished_ms=1_700_000_100_000,
                version=3,
            )  # fmt: skip
            root = TaskRecord(
                task_id="root", level=0, parents=(), first=(), last=(), after=(), upto=(),
                seq=0, done=True, rows=0, started_ms=job.created_ms, spawned=(),
            )  # fmt: skip
            await store.create_job(job, root, {"emitted": 1, "acked": 1})
    finally:
        await store.close()


async def _until_done(
    start: Callable[[], Awaitable[Any]],
    poll: Callable[[common_pb2.GetOperationRequest], Awaitable[common_pb2.Operation]] | None,
) -> tuple[float, float]:
    """(seconds to acknowledge, seconds to DONE)."""
    began = time.perf_counter()
    reply = await start()
    acked = time.perf_counter() - began
    op = getattr(reply, "operation", reply)
    if poll is not None:
        while op.state != common_pb2.OPERATION_STATE_DONE:
            if op.state == common_pb2.OPERATION_STATE_FAILED:
                raise RuntimeError(op.error)
            await asyncio.sleep(0.02)
            op = await poll(common_pb2.GetOperationRequest(operation_id=op.operation_id))
    return acked, time.perf_counter() - began


async def _run(engines: str, others: int, tmp: Path) -> list[dict[str, Any]]:
    settings = _settings(engines, tmp / engines)
    loom = await build_server(settings)
    rows: list[dict[str, Any]] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{loom.port}") as channel:
            await _write(channel, settings, others)
            tw = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
            ib = inbox_pb2_grpc.InboxStub(channel)
            sm = summary_pb2_grpc.SummaryStub(channel)
            tp = templates_pb2_grpc.TemplateInductionStub(channel)
            it = iterator_pb2_grpc.IteratorStub(channel)
            calls: list[tuple[str, Callable[[], Awaitable[Any]], Any]] = [
                ("threadweaver", lambda: tw.UnweaveMailbox(
                    threadweaver_pb2.UnweaveMailboxRequest(gid=SUBJECT)), tw.GetOperation),
                ("inbox", lambda: ib.DeleteInbox(inbox_pb2.DeleteInboxRequest(inbox_id=SUBJECT)),
                 None),
                ("summary", lambda: sm.EraseRecipients(
                    summary_pb2.SummaryEraseRecipientsRequest(recipient_ids=[SUBJECT])),
                 sm.GetOperation),
                ("templates", lambda: tp.EraseRecipients(
                    templates_pb2.TemplateInductionEraseRecipientsRequest(recipient_ids=[SUBJECT])),
                 tp.GetOperation),
                ("iterator", lambda: it.DeleteJob(
                    iterator_pb2.DeleteJobRequest(job_id=_job_id(SUBJECT))), None),
            ]  # fmt: skip
            for service, start, poll in calls:
                acked, done = await _until_done(start, poll)
                began = time.perf_counter()
                await transfer.dump(service, settings, tmp / f"{engines}-{service}-scan")
                scan = time.perf_counter() - began
                engine = {
                    "threadweaver": settings.storage.threadweaver_store,
                    "inbox": settings.storage.inbox_store,
                    "summary": settings.storage.summary_store,
                    "templates": settings.storage.templates_store,
                    "iterator": settings.storage.iterator_state,
                }[service]
                rows.append(
                    {"service": service, "engine": engine, "ack_s": round(acked, 4),
                     "done_s": round(done, 3), "scan_s": round(scan, 3),
                     "done_over_scan": round(done / scan, 2) if scan else None}
                )  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    finally:
        await loom.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--others", type=int, default=2000, help="other people's data")
    parser.add_argument("--engines", nargs="+", default=["sqlite", "distributed"])
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    # DynamoDB Local takes any credentials, but the SDK wants some.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="erase-subject-") as tmp:
        for engines in args.engines:
            results += asyncio.run(_run(engines, args.others, Path(tmp)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
