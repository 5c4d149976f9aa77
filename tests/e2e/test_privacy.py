"""No data where it does not belong: not in logs, not echoed in error details.

A real `loom serve` of this module's own, logging at debug level to its own file, is sent
distinctive canary values through every service — recipient ids, Message-IDs, inbox and
thread ids, message ids, senders and subjects, in valid calls and in calls the server
rejects. Once it has stopped (so every line is written), the tests assert:

- no error detail a caller received contains a submitted value;
- no line of its log contains a canary, or anything shaped like an email address or a
  Message-ID (``local@domain``), whoever sent it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import (
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

from tests.serving import loom_process

CANARY = "cnry7f3a9e"
ADDRESS = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
LONG = CANARY * 80
"""Over every id limit: each call carrying it is rejected."""


@dataclass(frozen=True)
class Observed:
    """What the traffic produced: the details of every rejected call, and the whole log."""

    details: list[str]
    log: list[str]


async def rejected(call: Awaitable[object]) -> str:
    """The details of a call that must fail (an OK answer fails the test)."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return f"{error.details()} {error.trailing_metadata()}"
    raise AssertionError("the call was expected to be rejected")


async def _valid_calls(channel: grpc.aio.Channel) -> None:
    weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    woven = threadweaver_pb2.WovenMessage(
        gid=f"{CANARY}-gid",
        thread_id=f"{CANARY}-t",
        rfc_message_id=f"<{CANARY}-mid@secret.example>",
        sent_at=Timestamp(seconds=1),
    )
    await weaver.WeaveMessage(threadweaver_pb2.WeaveMessageRequest(message=woven))
    await weaver.GetUnifiedThread(
        threadweaver_pb2.GetUnifiedThreadRequest(gid=f"{CANARY}-gid", thread_id=f"{CANARY}-t")
    )
    inbox = inbox_pb2_grpc.InboxStub(channel)
    recipients = [f"{CANARY}-r{i}" for i in range(5)]
    await inbox.PostMessage(
        inbox_pb2.PostMessageRequest(
            thread_id=f"{CANARY}-thread",
            message_id=7,
            sender_inbox_id=f"{CANARY}-sender",
            recipient_inbox_ids=recipients,
        )
    )
    await inbox.ListInbox(inbox_pb2.ListInboxRequest(inbox_id=recipients[0]))
    summary = summary_pb2_grpc.SummaryStub(channel)
    await summary.RecordDeliveryEvents(
        summary_pb2.RecordDeliveryEventsRequest(
            message_id=f"{CANARY}-msg",
            events=[
                summary_pb2.DeliveryEvent(
                    recipient_id=f"{CANARY}-{i}@people.example",
                    status=summary_pb2.DELIVERY_STATUS_READ,
                )
                for i in range(3)
            ],
        )
    )
    await summary.GetMessageSummary(
        summary_pb2.GetMessageSummaryRequest(message_id=f"{CANARY}-msg")
    )
    templates = templates_pb2_grpc.TemplateInductionStub(channel)
    email = templates_pb2.Email(
        email_id=f"{CANARY}-e",
        sender=f"{CANARY}@sender.example",
        recipient_id=f"{CANARY}-rcpt@people.example",
        subject=f"{CANARY} subject",
        html_body=f"<p>Dear {CANARY}, write to {CANARY}@help.example</p>",
    )
    await templates.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=[email]))
    await templates.AnnotateEmail(templates_pb2.AnnotateEmailRequest(email=email))


async def _rejected_calls(channel: grpc.aio.Channel) -> list[str]:
    weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    inbox = inbox_pb2_grpc.InboxStub(channel)
    summary = summary_pb2_grpc.SummaryStub(channel)
    templates = templates_pb2_grpc.TemplateInductionStub(channel)
    iterator = iterator_pb2_grpc.IteratorStub(channel)
    message = threadweaver_pb2.WovenMessage(
        gid=LONG, thread_id="t", rfc_message_id=f"<{CANARY}@x.example>", sent_at=Timestamp()
    )
    return [
        await rejected(weaver.WeaveMessage(threadweaver_pb2.WeaveMessageRequest(message=message))),
        await rejected(
            inbox.PostMessage(
                inbox_pb2.PostMessageRequest(
                    thread_id="t", message_id=1, sender_inbox_id="s", recipient_inbox_ids=[LONG]
                )
            )
        ),
        await rejected(inbox.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id=LONG))),
        await rejected(
            summary.RecordDeliveryEvents(
                summary_pb2.RecordDeliveryEventsRequest(
                    message_id=f"{CANARY}-m2",
                    events=[
                        summary_pb2.DeliveryEvent(
                            recipient_id=LONG, status=summary_pb2.DELIVERY_STATUS_DELIVERED
                        )
                    ],
                )
            )
        ),
        await rejected(
            summary.GetMessageSummary(summary_pb2.GetMessageSummaryRequest(message_id=LONG))
        ),
        await rejected(
            templates.SubmitEmails(
                templates_pb2.SubmitEmailsRequest(
                    emails=[templates_pb2.Email(email_id=LONG, sender=f"{CANARY}@s.example")]
                )
            )
        ),
        await rejected(iterator.GetJob(iterator_pb2.GetJobRequest(job_id=CANARY))),
        await rejected(
            iterator.StartIteration(
                iterator_pb2.StartIterationRequest(enterprise_id=1, level=CANARY)
            )
        ),
    ]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def observed(tmp_path_factory: pytest.TempPathFactory) -> Observed:
    """This module's own server, its traffic, and everything it logged once stopped."""
    tmp = Path(tmp_path_factory.mktemp("privacy"))
    async with (
        loom_process(tmp, "--log-level", "debug") as served,
        grpc.aio.insecure_channel(served.target) as channel,
    ):
        await _valid_calls(channel)
        details = await _rejected_calls(channel)
    return Observed(details, served.stderr().splitlines())


def test_no_error_detail_echoes_a_submitted_value(observed: Observed) -> None:
    """Valid and invalid calls carrying canaries; no error detail a caller gets echoes one."""
    assert len(observed.details) == 8
    assert [d for d in observed.details if CANARY in d] == []


def test_no_log_line_holds_an_id_or_an_address(observed: Observed) -> None:
    """Every line the server logged: no canary, nothing shaped like an address or Message-ID."""
    rpcs = [line for line in observed.log if '"event": "rpc"' in line]
    assert len(rpcs) == 16, "the server logged each of its calls"
    leaks = [line[:300] for line in observed.log if CANARY in line or ADDRESS.search(line)]
    assert leaks == []
