"""Typed async calls to ``loom.v1.Inbox``: fan-out-on-write inboxes, unread counts, and a
watch of their changes that resumes by itself."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from loom.v1 import common_pb2, inbox_pb2, inbox_pb2_grpc

from ._calls import CallDefaults, Metadata, ServiceClient
from ._retry import RetryPolicy

__all__ = ["InboxClient"]

_WATCH_RESUME = RetryPolicy(
    max_attempts=10,
    initial_backoff_s=0.1,
    max_backoff_s=2.0,
    retryable_codes=frozenset({grpc.StatusCode.UNAVAILABLE}),
)
"""How `InboxClient.watch_inbox` reconnects when the call passes no policy: on UNAVAILABLE
only, after a pause of at most 0.1 s doubling to 2 s (full jitter), and gives up when 10
calls in a row (the failed one and 9 reconnects) received nothing: about 11 s of pauses at
most."""


class InboxClient(ServiceClient):
    """One snake_case method per RPC of ``loom.v1.Inbox``; see `LoomClient`."""

    __slots__ = ("_stub",)

    def __init__(self, channel: grpc.aio.Channel, defaults: CallDefaults) -> None:
        super().__init__(defaults)
        self._stub = inbox_pb2_grpc.InboxStub(channel)

    async def post_message(
        self,
        request: inbox_pb2.PostMessageRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.PostMessageResponse:
        """Delivers a message to every recipient inbox (and the sender's, as read).

        Large fan-outs return a ``delivery_id`` to poll with `get_delivery`. Retrying the
        same ``message_id`` never delivers twice.
        """
        return await self._unary(self._stub.PostMessage, request, timeout, metadata, retry)

    async def get_delivery(
        self,
        request: inbox_pb2.GetDeliveryRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.Delivery:
        """Progress of a background fan-out. NOT_FOUND for an unknown delivery."""
        return await self._unary(self._stub.GetDelivery, request, timeout, metadata, retry)

    async def list_inbox(
        self,
        request: inbox_pb2.ListInboxRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.ListInboxResponse:
        """One page of an inbox, newest activity first."""
        return await self._unary(self._stub.ListInbox, request, timeout, metadata, retry)

    async def get_unread_count(
        self,
        request: inbox_pb2.GetUnreadCountRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.GetUnreadCountResponse:
        """The number of unread threads of an inbox."""
        return await self._unary(self._stub.GetUnreadCount, request, timeout, metadata, retry)

    async def mark_threads(
        self,
        request: inbox_pb2.MarkThreadsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.MarkThreadsResponse:
        """Marks threads (or the whole inbox) read or unread."""
        return await self._unary(self._stub.MarkThreads, request, timeout, metadata, retry)

    async def delete_threads(
        self,
        request: inbox_pb2.DeleteThreadsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.DeleteThreadsResponse:
        """Deletes threads from every inbox at once; their rows go in a background operation
        (poll `get_operation`). A post to a deleted thread is then FAILED_PRECONDITION."""
        return await self._unary(self._stub.DeleteThreads, request, timeout, metadata, retry)

    async def remove_threads(
        self,
        request: inbox_pb2.RemoveThreadsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.RemoveThreadsResponse:
        """Removes threads from one inbox; a later message in a thread brings it back."""
        return await self._unary(self._stub.RemoveThreads, request, timeout, metadata, retry)

    async def delete_inbox(
        self,
        request: inbox_pb2.DeleteInboxRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.DeleteInboxResponse:
        """Erases an inbox: every row and its unread count (scope inbox:admin)."""
        return await self._unary(self._stub.DeleteInbox, request, timeout, metadata, retry)

    async def get_operation(
        self,
        request: common_pb2.GetOperationRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> common_pb2.Operation:
        """Progress of a DeleteThreads operation. NOT_FOUND for an unknown operation."""
        return await self._unary(self._stub.GetOperation, request, timeout, metadata, retry)

    def watch_inbox(
        self,
        request: inbox_pb2.WatchInboxRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> AsyncIterator[inbox_pb2.InboxEvent]:
        """Every change to ``request.inbox_id`` as it is applied; resumes by itself.

        ::

            listed = await client.inbox.list_inbox(ListInboxRequest(inbox_id="alice"))
            request = WatchInboxRequest(inbox_id="alice", resume_token=listed.sync_token)
            async for event in client.inbox.watch_inbox(request):
                ...  # event.kind, event.thread_ids, event.unread_count

        Without a ``resume_token`` the stream starts from now with a SYNCED event; with one
        (from an event, `get_inbox_changes` or `list_inbox`'s ``sync_token``) it first
        replays exactly the events after it.

        **Resuming.** When the stream fails UNAVAILABLE -- the server drains or finds the
        reader too slow (ErrorInfo reason ``RESUME``), the connection drops, no server is
        reachable -- the iterator reconnects with the ``resume_token`` of the last event it
        yielded (the request's own until one arrives), after a short pause (jittered,
        at most 0.1 s doubling to 2 s), so the caller sees one stream with no gap and no
        duplicate. When 9 reconnects in a row receive nothing it raises the last failure as
        `LoomError`. `retry` replaces that policy: its codes are the ones that reconnect, its
        ``max_attempts`` the calls in a row that may fail with no event between them (the
        failed one included), its backoff the pauses (``NO_RETRY``: never reconnect). The
        client's own default `retry` does not apply here.

        **Raised** as `LoomError` (the stream ends): FAILED_PRECONDITION with
        ``reason == "RESYNC_REQUIRED"`` when the token is older than the server's change log
        keeps (list the inbox again with `list_inbox` and watch from its ``sync_token``);
        RESOURCE_EXHAUSTED when the server holds its maximum of streams; INVALID_ARGUMENT
        for a malformed token or one of another inbox; DEADLINE_EXCEEDED when `timeout` (or
        the client's ``stream_timeout``; none by default) runs out, reconnects included.
        Breaking out of the loop cancels the stream.
        """
        inbox_id = request.inbox_id
        return self._resuming_stream(
            self._stub.WatchInbox,
            resume_from=lambda token: inbox_pb2.WatchInboxRequest(
                inbox_id=inbox_id, resume_token=token
            ),
            token=request.resume_token,
            token_of=lambda event: event.resume_token,
            timeout=timeout,
            metadata=metadata,
            policy=retry or _WATCH_RESUME,
        )

    async def get_inbox_changes(
        self,
        request: inbox_pb2.GetInboxChangesRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> inbox_pb2.GetInboxChangesResponse:
        """The changes to an inbox after ``since_token``, oldest first, one page at a time.

        Ask again from ``next_token`` while ``has_more``. The same errors as `watch_inbox`:
        FAILED_PRECONDITION with ``reason == "RESYNC_REQUIRED"`` means list the inbox again.
        """
        return await self._unary(self._stub.GetInboxChanges, request, timeout, metadata, retry)
