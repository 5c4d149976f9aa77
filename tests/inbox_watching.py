"""What the WatchInbox tests share: a watcher that collects a stream in the background, and
the status reasons a stream ends with."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from loom.v1 import inbox_pb2, inbox_pb2_grpc

__all__ = ["Watcher", "changes_after", "reason", "watching"]

K = inbox_pb2


def reason(error: grpc.aio.AioRpcError) -> str:
    """The ErrorInfo reason a failed call carries ("" when none)."""
    status = rpc_status.from_call(error)
    if status is None:
        return ""
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info.reason
    return ""


class Watcher:
    """One WatchInbox stream read in the background into `events`; `error` is how it ended."""

    def __init__(self, stub: inbox_pb2_grpc.InboxStub, inbox_id: str, token: str = "") -> None:
        self.inbox_id = inbox_id
        self.events: list[inbox_pb2.InboxEvent] = []
        self.error: grpc.aio.AioRpcError | None = None
        self._call = stub.WatchInbox(
            inbox_pb2.WatchInboxRequest(inbox_id=inbox_id, resume_token=token)
        )
        self._task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for event in self._call:
                self.events.append(event)
        except grpc.aio.AioRpcError as exc:
            self.error = exc

    @property
    def changes(self) -> list[inbox_pb2.InboxEvent]:
        """The events other than SYNCED."""
        return [e for e in self.events if e.kind != K.INBOX_EVENT_KIND_SYNCED]

    @property
    def last_token(self) -> str:
        return self.events[-1].resume_token if self.events else ""

    async def until(
        self, ok: Callable[[list[inbox_pb2.InboxEvent]], bool], timeout_s: float = 30.0
    ) -> list[inbox_pb2.InboxEvent]:
        """Waits until `ok(changes)` (AssertionError after `timeout_s`, or if the stream ended)."""
        deadline = time.monotonic() + timeout_s
        while not ok(self.changes):
            if self._task.done():
                raise AssertionError(f"the stream ended: {self.error!r}; got {self.changes}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout_s}s; got {self.changes}")
            await asyncio.sleep(0.02)
        return self.changes

    async def count(self, n: int, timeout_s: float = 30.0) -> list[inbox_pb2.InboxEvent]:
        return await self.until(lambda c: len(c) >= n, timeout_s)

    async def synced(self, timeout_s: float = 30.0) -> None:
        """Waits for the first event (SYNCED when started without a token)."""
        deadline = time.monotonic() + timeout_s
        while not self.events:
            if self._task.done() or time.monotonic() > deadline:
                raise AssertionError(f"no first event: {self.error!r}")
            await asyncio.sleep(0.02)

    async def ended(self, timeout_s: float = 30.0) -> grpc.aio.AioRpcError:
        await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        assert self.error is not None, "the stream ended OK"
        return self.error

    async def close(self) -> None:
        self._call.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await self._task


@contextlib.asynccontextmanager
async def watching(
    stub: inbox_pb2_grpc.InboxStub, inbox_id: str, token: str = ""
) -> AsyncIterator[Watcher]:
    """A `Watcher` whose first event has come, cancelled at the end."""
    w = Watcher(stub, inbox_id, token)
    try:
        await w.synced()
        yield w
    finally:
        await w.close()


async def changes_after(
    stub: inbox_pb2_grpc.InboxStub, inbox_id: str, token: str
) -> list[inbox_pb2.InboxEvent]:
    """Every event after `token`, through GetInboxChanges pages."""
    out: list[inbox_pb2.InboxEvent] = []
    while True:
        page = await stub.GetInboxChanges(
            inbox_pb2.GetInboxChangesRequest(inbox_id=inbox_id, since_token=token, page_size=7)
        )
        out += page.events
        token = page.next_token
        if not page.has_more:
            return out
