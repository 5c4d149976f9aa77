"""Writes for all five services, and the reads whose answers must survive an upgrade.

`write` is what a 1.0.0 server is asked to store; `read` asks the questions whose answers
are compared before and after the upgrade (every field that is stored, none that is a
measure of time passing: a job's rate and ETA); `write_more` is new writes on top, each
checked against what the old data says. Only RPCs and fields of contract 1.0.0 are used.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable
from typing import Any

import grpc
from google.protobuf import json_format, timestamp_pb2
from google.protobuf.message import Message
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

from tests.serving import eventually
from tests.templates_corpus import NAMES, receipt

K = 5
"""TemplateInduction's k in both servers (``LOOM_TEMPLATES__K_ANONYMITY``)."""
SENDER = "orders@acme.example"
_VOLATILE_JOB_FIELDS = ("objects_per_second", "eta_seconds")


def _doc(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


async def _answer(call: Awaitable[Message]) -> dict[str, Any]:
    """A reply as a dict, or the status it failed with (a NOT_FOUND is an answer too)."""
    try:
        return _doc(await call)
    except grpc.aio.AioRpcError as exc:
        return {"status": exc.code().name, "details": exc.details()}


def _at(seconds: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds)


def _woven(gid: str, thread: str, rfc: str, at: int) -> threadweaver_pb2.WovenMessage:
    return threadweaver_pb2.WovenMessage(
        gid=gid, thread_id=thread, rfc_message_id=rfc, sent_at=_at(at)
    )


def _email(eid: str, recipient: str, rng: random.Random, name: str) -> templates_pb2.Email:
    subject, html = receipt(rng, name)
    return templates_pb2.Email(
        email_id=eid, sender=SENDER, recipient_id=recipient, subject=subject, html_body=html
    )


async def write(channel: grpc.aio.Channel) -> tuple[str, list[int]]:
    """Stores something on every service; the Iterator job's id and the objects it emitted."""
    tw = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    # Two mailboxes' copies of one conversation (merged), and a thread alone.
    await tw.WeaveMessages(
        threadweaver_pb2.WeaveMessagesRequest(
            messages=[
                _woven("alice", "a1", "<m1@x.example>", 1_700_000_000),
                _woven("alice", "a1", "<m2@x.example>", 1_700_000_100),
                _woven("bob", "b1", "<m2@x.example>", 1_700_000_100),
                _woven("bob", "b2", "<m3@x.example>", 1_700_000_200),
                _woven("carol", "c1", "<m3@x.example>", 1_700_000_200),
                _woven("carol", "c9", "<lonely@x.example>", 1_700_000_300),
            ]
        )
    )
    sm = summary_pb2_grpc.SummaryStub(channel)
    delivered = summary_pb2.DeliveryStatus.Value("DELIVERY_STATUS_DELIVERED")
    read_status = summary_pb2.DeliveryStatus.Value("DELIVERY_STATUS_READ")
    await sm.RecordDeliveryEvents(
        summary_pb2.RecordDeliveryEventsRequest(
            message_id="small",
            events=[
                summary_pb2.DeliveryEvent(recipient_id=f"r{i}", status=delivered) for i in range(7)
            ]
            + [summary_pb2.DeliveryEvent(recipient_id="r1", status=read_status)],
        )
    )
    await sm.RecordDeliveryEvents(  # past the exact limit: the bitmap encoding
        summary_pb2.RecordDeliveryEventsRequest(
            message_id="large",
            events=[
                summary_pb2.DeliveryEvent(recipient_id=f"u{i}", status=delivered)
                for i in range(400)
            ],
        )
    )
    ib = inbox_pb2_grpc.InboxStub(channel)
    for n, thread in enumerate(("t1", "t2", "t3"), start=1):
        await ib.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id=thread,
                message_id=100 + n,
                sender_inbox_id="sender",
                recipient_inbox_ids=["i1", "i2", "i3"],
            )
        )
    await ib.MarkThreads(
        inbox_pb2.MarkThreadsRequest(
            inbox_id="i1", threads=inbox_pb2.ThreadIdList(thread_ids=["t2"]), read=True
        )
    )
    await form_template(channel)
    it = iterator_pb2_grpc.IteratorStub(channel)
    job = await it.StartIteration(
        iterator_pb2.StartIterationRequest(enterprise_id=1, level="file", require_ack=False)
    )
    return str(job.job_id), await drain(it, job.job_id)


async def form_template(channel: grpc.aio.Channel) -> str:
    """Submits k receipts from one sender to k recipients; the template they form."""
    tp = templates_pb2_grpc.TemplateInductionStub(channel)
    rng = random.Random(7)
    emails = [_email(f"e{i}", f"user-{i}", rng, NAMES[i]) for i in range(K)]
    await tp.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=emails))
    listed = await eventually(
        lambda: tp.ListTemplates(templates_pb2.ListTemplatesRequest(sender=SENDER)),
        lambda r: len(r.templates) == 1,
        timeout_s=60,
    )
    return str(listed.templates[0].template_id)


async def drain(it: iterator_pb2_grpc.IteratorStub, job_id: str) -> list[int]:
    """Every object's key of a job (no acks asked), once its stream ends."""
    ids: list[int] = []
    stream = it.StreamObjects(iterator_pb2.StreamObjectsRequest(job_id=job_id), timeout=120)
    async for batch in stream:
        ids += [k for c in batch.chunks for k in c.object_keys]
    return sorted(ids)


async def read(channel: grpc.aio.Channel, job_id: str) -> dict[str, Any]:
    """The answers of every read RPC over what `write` stored."""
    sm = summary_pb2_grpc.SummaryStub(channel)
    tp = templates_pb2_grpc.TemplateInductionStub(channel)
    it = iterator_pb2_grpc.IteratorStub(channel)
    out = await read_shared(channel)
    for message in ("small", "large", "never"):
        out[f"summary {message}"] = await _answer(
            sm.GetMessageSummary(summary_pb2.GetMessageSummaryRequest(message_id=message))
        )
    templates = await tp.ListTemplates(templates_pb2.ListTemplatesRequest(sender=SENDER))
    out["templates"] = _doc(templates)
    for template_id in [t.template_id for t in templates.templates] + ["absent"]:
        out[f"template {template_id}"] = await _answer(
            tp.GetTemplate(templates_pb2.GetTemplateRequest(template_id=template_id))
        )
    job = _doc(await it.GetJob(iterator_pb2.GetJobRequest(job_id=job_id)))
    for name in _VOLATILE_JOB_FIELDS:
        job.pop(name, None)
    out["job"] = job
    jobs = await it.ListJobs(iterator_pb2.ListJobsRequest())
    out["jobs"] = sorted(j.job_id for j in jobs.jobs)
    return out


async def read_shared(channel: grpc.aio.Channel) -> dict[str, Any]:
    """The answers of ThreadWeaver's and Inbox's reads: the services a rolling upgrade's
    replicas share on Cassandra."""
    tw = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    ib = inbox_pb2_grpc.InboxStub(channel)
    out: dict[str, Any] = {}
    for gid, thread in (("alice", "a1"), ("carol", "c1"), ("carol", "c9")):
        out[f"thread {gid}/{thread}"] = await _answer(
            tw.GetUnifiedThread(threadweaver_pb2.GetUnifiedThreadRequest(gid=gid, thread_id=thread))
        )
    refs = [("alice", "a1"), ("bob", "b2"), ("carol", "c9"), ("nobody", "x")]
    resolved = await tw.ResolveThreads(
        threadweaver_pb2.ResolveThreadsRequest(
            threads=[common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in refs]
        )
    )
    out["resolve"] = _doc(resolved)
    for inbox in ("i1", "i2", "nobody"):
        listing = await _answer(
            ib.ListInbox(inbox_pb2.ListInboxRequest(inbox_id=inbox, page_size=10))
        )
        # A position in the change log of whichever server answered (added in 1.2.0): a
        # token, not data, different on every call.
        listing.pop("sync_token", None)
        out[f"inbox {inbox}"] = (
            listing,
            await _answer(ib.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id=inbox))),
        )
    return out


async def write_more(channel: grpc.aio.Channel, first_objects: list[int]) -> None:
    """New writes on top of the old data, each checked against it."""
    tw = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    joined = await tw.WeaveMessage(
        threadweaver_pb2.WeaveMessageRequest(
            message=_woven("dave", "d1", "<lonely@x.example>", 1_700_000_400)
        )
    )
    lonely = await tw.ResolveThreads(
        threadweaver_pb2.ResolveThreadsRequest(
            threads=[common_pb2.ThreadRef(gid="carol", thread_id="c9")]
        )
    )
    assert joined.unified_thread_id == lonely.threads[0].unified_thread_id
    sm = summary_pb2_grpc.SummaryStub(channel)
    delivered = summary_pb2.DeliveryStatus.Value("DELIVERY_STATUS_DELIVERED")
    await sm.RecordDeliveryEvents(
        summary_pb2.RecordDeliveryEventsRequest(
            message_id="small",
            events=[summary_pb2.DeliveryEvent(recipient_id="r-new", status=delivered)],
        )
    )
    small = await sm.GetMessageSummary(summary_pb2.GetMessageSummaryRequest(message_id="small"))
    counts = {s.status: s.count for s in small.statuses}
    assert counts[delivered] == 8, counts
    ib = inbox_pb2_grpc.InboxStub(channel)
    await ib.PostMessage(
        inbox_pb2.PostMessageRequest(
            thread_id="t2", message_id=200, sender_inbox_id="sender", recipient_inbox_ids=["i1"]
        )
    )
    unread = await ib.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id="i1"))
    assert unread.unread_count == 3  # t2 was read; a new message makes it unread again
    tp = templates_pb2_grpc.TemplateInductionStub(channel)
    subject, html = receipt(random.Random(99), "Zoe Quinn")
    probe = templates_pb2.Email(
        email_id="probe", sender=SENDER, recipient_id="x", subject=subject, html_body=html
    )
    annotated = await tp.AnnotateEmail(templates_pb2.AnnotateEmailRequest(email=probe))
    assert annotated.template_id != ""  # the 1.0.0 template annotates new mail
    it = iterator_pb2_grpc.IteratorStub(channel)
    job = await it.StartIteration(
        iterator_pb2.StartIterationRequest(enterprise_id=1, level="file", require_ack=False)
    )
    assert await drain(it, job.job_id) == first_objects


ANNOUNCED = [f"all{i:04d}" for i in range(1500)]
"""An announcement's recipients: above 1.0.0's sync_fanout_max (1,000), a background fan-out."""


def _announcement(recipients: list[str]) -> inbox_pb2.PostMessageRequest:
    return inbox_pb2.PostMessageRequest(
        thread_id="news",
        message_id=300,
        sender_inbox_id="announcer",
        recipient_inbox_ids=recipients,
    )


async def delivered(channel: grpc.aio.Channel, delivery_id: str) -> dict[str, Any]:
    """GetDelivery's answer once the delivery is DONE."""
    ib = inbox_pb2_grpc.InboxStub(channel)
    done = await eventually(
        lambda: ib.GetDelivery(inbox_pb2.GetDeliveryRequest(delivery_id=delivery_id)),
        lambda d: d.state == inbox_pb2.DELIVERY_STATE_DONE,
        timeout_s=60.0,
    )
    return _doc(done)


async def announce(channel: grpc.aio.Channel) -> str:
    """A large post (its delivery id, once DONE)."""
    reply = await inbox_pb2_grpc.InboxStub(channel).PostMessage(_announcement(ANNOUNCED))
    assert reply.delivery_id
    assert not reply.delivered
    await delivered(channel, reply.delivery_id)
    return str(reply.delivery_id)


async def announce_again(channel: grpc.aio.Channel, delivery_id: str) -> None:
    """The announcement's retry finds its delivery (stored by 1.0.0 under an id of the key
    alone); the same key with other recipients reaches them with a delivery of its own."""
    ib = inbox_pb2_grpc.InboxStub(channel)
    retry = await ib.PostMessage(_announcement(list(reversed(ANNOUNCED))))
    assert retry.delivery_id == delivery_id
    # Fewer recipients: 1.0.0 kept no digest of its request, so a done delivery of as many
    # recipients, same sender, is taken for this post's (and run again for its recipients).
    others = [f"more{i:04d}" for i in range(1499)]
    reply = await ib.PostMessage(_announcement(others))
    assert reply.delivery_id not in ("", delivery_id), (reply, delivery_id)
    first, second = (
        await delivered(channel, delivery_id),
        await delivered(channel, reply.delivery_id),
    )
    assert first["progress"] == {"done": "1500", "total": "1500"}, first
    assert second["progress"] == {"done": "1499", "total": "1499"}, second
    for inbox in (ANNOUNCED[0], ANNOUNCED[-1], others[0], others[-1]):
        count = await ib.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id=inbox))
        assert count.unread_count == 1, inbox
