"""No data where it does not belong: not in logs, not echoed in error details.

Runs last among the end-to-end modules (its name), so the scan covers every log line the
whole e2e run wrote: the in-process servers all log, at debug level, to one session file
(tests/conftest.py), and every `loom serve` process started through `tests.serving` to its
own file. First it sends distinctive canary values through every service — recipient ids,
Message-IDs, inbox and thread ids, message ids, in valid calls and in calls the server
rejects — then it asserts:

- no error detail a caller received contains a submitted value;
- no log line anywhere contains a canary, or anything shaped like an email address or a
  Message-ID (``local@domain``), whoever sent it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import (
    inbox_pb2,
    inbox_pb2_grpc,
    summary_pb2,
    summary_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)

from tests.conftest import SESSION_LOG
from tests.engines import settings_for
from tests.serving import SERVER_LOGS, Running, running_server

CANARY = "cnry7f3a9e"
ADDRESS = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    settings = settings_for("sqlite", Path(tmp_path_factory.mktemp("privacy")))
    async with running_server(settings) as running:
        yield running


async def rejected(call: object) -> str:
    """The details of a call that must fail (an OK answer fails the test)."""
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return f"{error.details()} {error.trailing_metadata()}"
    raise AssertionError("the call was expected to be rejected")


async def test_canaries_through_every_service(server: Running) -> None:
    """Valid and invalid calls carrying canaries; no error detail echoes one."""
    weaver = threadweaver_pb2_grpc.ThreadWeaverStub(server.channel)
    inbox = inbox_pb2_grpc.InboxStub(server.channel)
    summary = summary_pb2_grpc.SummaryStub(server.channel)
    mid = f"<{CANARY}-mid@secret.example>"
    woven = threadweaver_pb2.WovenMessage(
        gid=f"{CANARY}-gid",
        thread_id=f"{CANARY}-t",
        rfc_message_id=mid,
        sent_at=Timestamp(seconds=1),
    )
    await weaver.WeaveMessage(threadweaver_pb2.WeaveMessageRequest(message=woven))
    await weaver.GetUnifiedThread(
        threadweaver_pb2.GetUnifiedThreadRequest(gid=f"{CANARY}-gid", thread_id=f"{CANARY}-t")
    )
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

    long = CANARY * 80  # over every id limit
    details = [
        await rejected(
            weaver.WeaveMessage(
                threadweaver_pb2.WeaveMessageRequest(
                    message=threadweaver_pb2.WovenMessage(
                        gid=long, thread_id="t", rfc_message_id=mid, sent_at=Timestamp(seconds=1)
                    )
                )
            )
        ),
        await rejected(
            inbox.PostMessage(
                inbox_pb2.PostMessageRequest(
                    thread_id="t", message_id=1, sender_inbox_id="s", recipient_inbox_ids=[long]
                )
            )
        ),
        await rejected(inbox.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id=long))),
        await rejected(
            summary.RecordDeliveryEvents(
                summary_pb2.RecordDeliveryEventsRequest(
                    message_id=f"{CANARY}-m2",
                    events=[summary_pb2.DeliveryEvent(recipient_id=long, status=1)],
                )
            )
        ),
        await rejected(
            summary.GetMessageSummary(summary_pb2.GetMessageSummaryRequest(message_id=long))
        ),
    ]
    assert [d for d in details if CANARY in d] == []


def test_no_log_line_holds_an_id_or_an_address() -> None:
    """Every log line of the run: no canary, nothing shaped like an address or Message-ID."""
    files = [SESSION_LOG, *(p for p in SERVER_LOGS if p.exists())]
    scanned = 0
    leaks: list[str] = []
    for path in files:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            scanned += 1
            if CANARY in line or ADDRESS.search(line):
                leaks.append(f"{path.name}: {line[:300]}")
    assert scanned > 0
    assert leaks == []
