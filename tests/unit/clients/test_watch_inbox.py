"""`InboxClient.watch_inbox` resumes by itself, against a real gRPC server.

The server is a tiny in-process grpc.aio server that implements only WatchInbox (on the
generated servicer base class) and plays a script: per call, the resume_token it expects,
the events it sends, and how the stream then ends (a status with an optional ErrorInfo
reason, a dropped connection, or normally). The client under test is the real one on a real
channel, so what reaches it is what gRPC delivers: no database, no fake transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from loom.v1 import inbox_pb2, inbox_pb2_grpc
from loom_client import NO_RETRY, LoomClient, LoomError, RetryPolicy

FAST = RetryPolicy(
    max_attempts=3,
    initial_backoff_s=0.001,
    max_backoff_s=0.005,
    retryable_codes=frozenset({grpc.StatusCode.UNAVAILABLE}),
)
INBOX = "alice"
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


@dataclass(frozen=True)
class End:
    """How one call's stream ends after its events; None code: normally (OK)."""

    code: grpc.StatusCode | None = None
    reason: str | None = None


RESUME = End(UNAVAILABLE, "RESUME")


@dataclass(frozen=True)
class Attempt:
    """One call the server expects: its resume_token, the event tokens it sends, its end."""

    expects: str
    sends: tuple[str, ...] = ()
    end: End = RESUME


def event(token: str) -> inbox_pb2.InboxEvent:
    return inbox_pb2.InboxEvent(
        resume_token=token,
        kind=inbox_pb2.INBOX_EVENT_KIND_DELIVERED,
        thread_ids=[f"thread-{token}"],
    )


def status_of(end: End) -> grpc.Status:
    assert end.code is not None
    status = status_pb2.Status(code=getattr(code_pb2, end.code.name), message=end.code.name)
    if end.reason is not None:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=end.reason, domain="loom.v1"))
        status.details.append(detail)
    return rpc_status.to_status(status)


@dataclass
class ScriptedInbox(inbox_pb2_grpc.InboxServicer):
    """WatchInbox plays `script` one Attempt per call; every other RPC is UNIMPLEMENTED."""

    script: list[Attempt]
    received: list[str] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    async def WatchInbox(  # noqa: N802 -- the generated servicer's name
        self, request: inbox_pb2.WatchInboxRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inbox_pb2.InboxEvent]:
        assert request.inbox_id == INBOX
        self.received.append(request.resume_token)
        if not self.script:
            await context.abort(grpc.StatusCode.INTERNAL, "script exhausted")
        attempt = self.script.pop(0)
        if request.resume_token != attempt.expects:
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"expected token {attempt.expects!r}, got {request.resume_token!r}",
            )
        try:
            for token in attempt.sends:
                yield event(token)
            if attempt.end.code is not None:
                await context.abort_with_status(status_of(attempt.end))
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


def scripted(script: list[Attempt]) -> ScriptedInbox:
    # The generated stub declares every RPC abstract; at runtime the others are UNIMPLEMENTED.
    return ScriptedInbox(list(script))  # type: ignore[abstract]


async def serve(
    servicer: inbox_pb2_grpc.InboxServicer, port: int = 0
) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    inbox_pb2_grpc.add_InboxServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


async def watch(
    script: list[Attempt],
    start: str = "",
    retry: RetryPolicy | None = FAST,
    timeout: float | None = None,  # noqa: ASYNC109 -- the wrapper's keyword
) -> tuple[list[str], ScriptedInbox, LoomError | None]:
    """The tokens of every event the client yields, the servicer, and what it raised."""
    servicer = scripted(script)
    server, port = await serve(servicer)
    seen: list[str] = []
    raised: LoomError | None = None
    try:
        async with LoomClient.connect(f"127.0.0.1:{port}") as client:
            request = inbox_pb2.WatchInboxRequest(inbox_id=INBOX, resume_token=start)
            try:
                async for item in client.inbox.watch_inbox(request, retry=retry, timeout=timeout):
                    seen.append(item.resume_token)
            except LoomError as exc:
                raised = exc
    finally:
        await server.stop(None)
    return seen, servicer, raised


async def test_reconnects_with_the_last_token_after_each_unavailable() -> None:
    """Two RESUME ends: each reconnect sends the token of the last event yielded, and the
    caller sees one stream, in order, with no gap and no duplicate."""
    seen, servicer, raised = await watch(
        [
            Attempt("t0", ("t1", "t2")),
            Attempt("t2", ("t3", "t4")),
            Attempt("t4", ("t5",), End()),
        ],
        start="t0",
    )
    assert raised is None
    assert seen == ["t1", "t2", "t3", "t4", "t5"]
    assert servicer.received == ["t0", "t2", "t4"]


async def test_before_any_event_it_reconnects_with_the_token_it_started_with() -> None:
    """An UNAVAILABLE with no reason (a drop, an engine fault) resumes too; until an event
    arrives the token is the request's (here none: the stream starts from now)."""
    seen, servicer, raised = await watch(
        [
            Attempt("", (), End(UNAVAILABLE)),
            Attempt("", (), End(UNAVAILABLE)),
            Attempt("", ("synced", "t1"), End()),
        ]
    )
    assert raised is None
    assert seen == ["synced", "t1"]
    assert servicer.received == ["", "", ""]


async def test_an_event_without_a_token_keeps_the_last_one() -> None:
    """A message with an empty resume_token never rewinds the position to the start."""
    seen, servicer, raised = await watch(
        [Attempt("t0", ("t1", "")), Attempt("t1", ("t2",), End())], start="t0"
    )
    assert raised is None
    assert seen == ["t1", "", "t2"]
    assert servicer.received == ["t0", "t1"]


async def test_consecutive_failed_reconnects_are_bounded() -> None:
    """`max_attempts` counts like a unary call's: the call that failed and its reconnects.
    When max_attempts=3 calls in a row failed with nothing received between, the last
    UNAVAILABLE is raised, with its reason."""
    seen, servicer, raised = await watch([Attempt("t0", ("t1",))] + [Attempt("t1")] * 5, "t0")
    assert seen == ["t1"]
    assert servicer.received == ["t0", "t1", "t1"]  # the one with an event, 2 empty reconnects
    assert raised is not None
    assert raised.code == UNAVAILABLE
    assert raised.reason == "RESUME"
    assert isinstance(raised.__cause__, grpc.aio.AioRpcError)


async def test_an_event_resets_the_count_of_failed_reconnects() -> None:
    """Only failures in a row count: six failures, never three without an event between
    them, stay within max_attempts=3."""
    seen, servicer, raised = await watch(
        [
            Attempt("t0"),
            Attempt("t0"),
            Attempt("t0", ("t1",)),
            Attempt("t1"),
            Attempt("t1", ("t2",)),
            Attempt("t2"),
            Attempt("t2", ("t3",), End()),
        ],
        start="t0",
    )
    assert raised is None
    assert seen == ["t1", "t2", "t3"]
    assert servicer.received == ["t0", "t0", "t0", "t1", "t1", "t2", "t2"]


async def test_resync_required_is_raised_and_distinguishable() -> None:
    """FAILED_PRECONDITION RESYNC_REQUIRED ends the watch at once: the caller must list again."""
    seen, servicer, raised = await watch(
        [Attempt("old", ("t1",), End(grpc.StatusCode.FAILED_PRECONDITION, "RESYNC_REQUIRED"))],
        start="old",
    )
    assert seen == ["t1"]
    assert servicer.received == ["old"]
    assert raised is not None
    assert raised.code == grpc.StatusCode.FAILED_PRECONDITION
    assert raised.reason == "RESYNC_REQUIRED"
    assert raised.domain == "loom.v1"


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INTERNAL,
    ],
    ids=lambda c: c.name,
)
async def test_other_failures_are_raised_without_a_reconnect(code: grpc.StatusCode) -> None:
    """Only UNAVAILABLE resumes: a full server, a bad token, a refusal reach the caller."""
    seen, servicer, raised = await watch([Attempt("t0", (), End(code))], start="t0")
    assert seen == []
    assert servicer.received == ["t0"]
    assert raised is not None
    assert raised.code == code
    assert raised.reason is None


async def test_without_a_policy_it_resumes_though_the_client_retries_nothing() -> None:
    """The built-in resume policy applies when the call passes none (the client's default,
    NO_RETRY, is for unary calls)."""
    seen, servicer, raised = await watch(
        [Attempt("t0", ("t1",)), Attempt("t1", ("t2",), End())], start="t0", retry=None
    )
    assert raised is None
    assert seen == ["t1", "t2"]
    assert servicer.received == ["t0", "t1"]


async def test_no_retry_turns_resuming_off() -> None:
    """`retry=NO_RETRY` raises the first UNAVAILABLE."""
    seen, servicer, raised = await watch(
        [Attempt("t0", ("t1",)), Attempt("t1", ("t2",), End())], start="t0", retry=NO_RETRY
    )
    assert seen == ["t1"]
    assert servicer.received == ["t0"]
    assert raised is not None
    assert raised.code == UNAVAILABLE


async def test_a_dropped_connection_resumes_on_the_restarted_server() -> None:
    """The server goes away mid-stream (stopped, no grace) and comes back on the same port:
    the client rides through the refused connects and resumes with its last token."""
    first = scripted([Attempt("t0", ("t1", "t2"), End())])
    hold = asyncio.Event()

    async def held(
        request: inbox_pb2.WatchInboxRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inbox_pb2.InboxEvent]:
        first.received.append(request.resume_token)
        yield event("t1")
        yield event("t2")
        hold.set()
        await asyncio.Event().wait()  # until the server is stopped under it

    first.WatchInbox = held  # type: ignore[method-assign]
    server, port = await serve(first)
    second = scripted([Attempt("t2", ("t3",), End())])
    patient = RetryPolicy(
        max_attempts=50,
        initial_backoff_s=0.01,
        max_backoff_s=0.05,
        retryable_codes=frozenset({UNAVAILABLE}),
    )
    seen: list[str] = []
    restarted: grpc.aio.Server | None = None
    async with LoomClient.connect(f"127.0.0.1:{port}") as client:
        request = inbox_pb2.WatchInboxRequest(inbox_id=INBOX, resume_token="t0")
        stream = client.inbox.watch_inbox(request, retry=patient, timeout=20.0)
        try:
            async for item in stream:
                seen.append(item.resume_token)
                if item.resume_token == "t2":
                    await hold.wait()
                    await server.stop(None)
                    restarted, _ = await serve(second, port)
        finally:
            if restarted is not None:
                await restarted.stop(None)
    assert seen == ["t1", "t2", "t3"]
    assert first.received == ["t0"]
    assert second.received[-1] == "t2"
    assert set(second.received) == {"t2"}


async def test_the_deadline_covers_the_reconnects() -> None:
    """`timeout` bounds the whole watch: a server that never answers ends it with
    DEADLINE_EXCEEDED, which is never resumed."""

    class Silent(inbox_pb2_grpc.InboxServicer):
        async def WatchInbox(  # noqa: N802 -- the generated servicer's name
            self, request: inbox_pb2.WatchInboxRequest, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[inbox_pb2.InboxEvent]:
            await asyncio.Event().wait()
            yield event("never")

    server, port = await serve(Silent())  # type: ignore[abstract]
    try:
        async with LoomClient.connect(f"127.0.0.1:{port}") as client:
            request = inbox_pb2.WatchInboxRequest(inbox_id=INBOX)
            with pytest.raises(LoomError) as caught:
                async for _ in client.inbox.watch_inbox(request, timeout=0.3):
                    pass
        assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        await server.stop(None)


async def test_breaking_out_cancels_the_stream() -> None:
    """A caller that stops reading ends the server's stream (no watch is left behind)."""

    servicer = scripted([Attempt("t0", ("t1",), End())])

    async def endless(
        request: inbox_pb2.WatchInboxRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inbox_pb2.InboxEvent]:
        try:
            yield event("t1")
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            servicer.cancelled.set()
            raise

    servicer.WatchInbox = endless  # type: ignore[method-assign]
    server, port = await serve(servicer)
    try:
        async with LoomClient.connect(f"127.0.0.1:{port}") as client:
            request = inbox_pb2.WatchInboxRequest(inbox_id=INBOX, resume_token="t0")
            stream = client.inbox.watch_inbox(request)
            async for _ in stream:
                break
            await stream.aclose()  # type: ignore[attr-defined]
            await asyncio.wait_for(servicer.cancelled.wait(), 5.0)
    finally:
        await server.stop(None)
