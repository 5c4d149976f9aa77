"""Typed async calls to ``loom.v1.Inbox``: fan-out-on-write inboxes and unread counts."""

from __future__ import annotations

import grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from ._calls import CallDefaults, Metadata, ServiceClient
from ._retry import RetryPolicy

__all__ = ["InboxClient"]


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
