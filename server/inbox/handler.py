"""The Inbox gRPC servicer: protobuf in, domain call, protobuf out; nothing else.

Policies follow Yammer's lesson (every operation time-bound, with its own capacity):
GetUnreadCount, 90 % of the traffic, gets a wide bulkhead and a short deadline so it stays
fast while PostMessage, whose large fan-outs are heavy, is held to a small bulkhead and a
long deadline.
"""

from __future__ import annotations

import asyncio
import functools

import grpc
from loom.v1 import common_pb2, inbox_pb2, inbox_pb2_grpc

from server.inbox import convert
from server.inbox.service import InboxService
from server.inbox.settings import InboxSettings
from server.runtime.erasures import ErasureRecorder
from server.runtime.errors import ResumeRequired
from server.runtime.policies import MethodPolicy

__all__ = ["POLICIES", "InboxHandler"]

_S = "loom.v1.Inbox/"
POLICIES: dict[str, MethodPolicy] = {
    _S + "PostMessage": MethodPolicy(
        max_concurrency=16, max_waiting=64, max_wait_s=1.0, deadline_s=30.0
    ),
    _S + "GetDelivery": MethodPolicy(max_concurrency=64, max_waiting=64, deadline_s=2.0),
    _S + "ListInbox": MethodPolicy(max_concurrency=32, max_waiting=64, deadline_s=5.0),
    _S + "GetUnreadCount": MethodPolicy(
        max_concurrency=512, max_waiting=512, max_wait_s=0.1, deadline_s=1.0
    ),
    _S + "MarkThreads": MethodPolicy(max_concurrency=64, max_waiting=64, deadline_s=5.0),
    # Deletions write markers only (the rows go in the background): short and cheap.
    _S + "DeleteThreads": MethodPolicy(
        max_concurrency=16, max_waiting=64, deadline_s=10.0, scope="inbox:write"
    ),
    _S + "RemoveThreads": MethodPolicy(
        max_concurrency=64, max_waiting=64, deadline_s=5.0, scope="inbox:write"
    ),
    _S + "DeleteInbox": MethodPolicy(
        max_concurrency=8, max_waiting=32, deadline_s=30.0, scope="inbox:admin"
    ),
    _S + "GetOperation": MethodPolicy(max_concurrency=64, max_waiting=64, deadline_s=2.0),
    # Streams hold their slot for life: a bulkhead of their own, the cap per process, and
    # RESOURCE_EXHAUSTED at once past it (no queue). No deadline: the stream's is the client's.
    _S + "WatchInbox": MethodPolicy(
        max_concurrency=20_000, max_waiting=0, max_wait_s=0.0, scope="inbox:read"
    ),
    _S + "GetInboxChanges": MethodPolicy(max_concurrency=64, max_waiting=64, deadline_s=5.0),
}


class InboxHandler(inbox_pb2_grpc.InboxServicer):
    """Serves `loom.v1.Inbox` from an `InboxService`."""

    def __init__(
        self, service: InboxService, limits: InboxSettings, erasures: ErasureRecorder
    ) -> None:
        self._service = service
        self._limits = limits
        self._erasures = erasures

    async def PostMessage(  # noqa: N802 - gRPC method name
        self, request: inbox_pb2.PostMessageRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.PostMessageResponse:
        result = await self._service.admit(
            request.thread_id,
            request.message_id,
            len(request.recipient_inbox_ids),
            functools.partial(convert.post_from_proto, request, self._limits),
        )
        return convert.post_to_proto(result)

    async def GetDelivery(  # noqa: N802
        self, request: inbox_pb2.GetDeliveryRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.Delivery:
        delivery_id = convert.delivery_id_from_proto(request)
        return convert.delivery_to_proto(await self._service.get_delivery(delivery_id))

    async def ListInbox(  # noqa: N802
        self, request: inbox_pb2.ListInboxRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.ListInboxResponse:
        inbox_id, flt, page_size, cursor = convert.list_from_proto(request)
        page = await self._service.list_inbox(inbox_id, flt, page_size, cursor)
        return convert.page_to_proto(page)

    async def GetUnreadCount(  # noqa: N802
        self, request: inbox_pb2.GetUnreadCountRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.GetUnreadCountResponse:
        inbox_id = convert.inbox_id_from_proto(request.inbox_id)
        count = await self._service.unread_count(inbox_id)
        return inbox_pb2.GetUnreadCountResponse(unread_count=count)

    async def MarkThreads(  # noqa: N802
        self, request: inbox_pb2.MarkThreadsRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.MarkThreadsResponse:
        inbox_id, thread_ids, read = convert.mark_from_proto(request)
        result = await self._service.mark(inbox_id, thread_ids, read=read)
        return convert.mark_to_proto(result)

    async def DeleteThreads(  # noqa: N802
        self, request: inbox_pb2.DeleteThreadsRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.DeleteThreadsResponse:
        thread_ids = convert.delete_threads_from_proto(request)
        op = await self._service.delete_threads(thread_ids)
        return inbox_pb2.DeleteThreadsResponse(operation=convert.operation_to_proto(op))

    async def RemoveThreads(  # noqa: N802
        self, request: inbox_pb2.RemoveThreadsRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.RemoveThreadsResponse:
        inbox_id, thread_ids = convert.remove_from_proto(request)
        result = await self._service.remove_threads(inbox_id, thread_ids)
        return convert.remove_to_proto(result)

    async def DeleteInbox(  # noqa: N802
        self, request: inbox_pb2.DeleteInboxRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.DeleteInboxResponse:
        inbox_id = convert.delete_inbox_from_proto(request)
        await self._erasures.erased("inbox", [inbox_id])  # first: a restore finishes it
        removed = await self._service.delete_inbox(inbox_id)
        return inbox_pb2.DeleteInboxResponse(removed=removed)

    # It writes its events itself (`context.write`) to bound each write: a coroutine, where
    # the generated base class declares an iterator.
    async def WatchInbox(  # type: ignore[override]  # noqa: N802
        self, request: inbox_pb2.WatchInboxRequest, context: grpc.aio.ServicerContext
    ) -> None:
        watching = self._service.watching
        inbox_id, resume = convert.watch_from_proto(request, watching)
        patience = self._limits.watch_slow_consumer_s
        async for events in watching.watch(inbox_id, resume):
            for event in events:
                # A client that stops reading blocks this write once the transport's buffers
                # are full: past its patience the stream ends, and the client resumes.
                try:
                    async with asyncio.timeout(patience):
                        await context.write(convert.event_to_proto(event))
                except TimeoutError:
                    raise ResumeRequired(
                        f"the client took no event for {patience:g} s: reconnect with the "
                        "last resume_token received"
                    ) from None

    async def GetInboxChanges(  # noqa: N802
        self, request: inbox_pb2.GetInboxChangesRequest, context: grpc.aio.ServicerContext
    ) -> inbox_pb2.GetInboxChangesResponse:
        watching = self._service.watching
        inbox_id, resume, page_size = convert.changes_from_proto(request, watching)
        return convert.changes_to_proto(await watching.changes(inbox_id, resume, page_size))

    async def GetOperation(  # noqa: N802
        self, request: common_pb2.GetOperationRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Operation:
        operation_id = convert.operation_id_from_proto(request)
        return convert.operation_to_proto(await self._service.get_operation(operation_id))
