"""Typed async calls to ``loom.v1.Inbox``: fan-out-on-write inboxes and unread counts."""

from __future__ import annotations

import grpc
from loom.v1 import common_pb2, inbox_pb2, inbox_pb2_grpc

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
