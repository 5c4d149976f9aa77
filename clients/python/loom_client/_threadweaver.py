"""Typed async calls to ``loom.v1.ThreadWeaver``: unified email threads across mailboxes."""

from __future__ import annotations

import grpc
from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

from ._calls import CallDefaults, Metadata, ServiceClient
from ._retry import RetryPolicy

__all__ = ["ThreadWeaverClient"]


class ThreadWeaverClient(ServiceClient):
    """One snake_case method per RPC of ``loom.v1.ThreadWeaver``; see `LoomClient`."""

    __slots__ = ("_stub",)

    def __init__(self, channel: grpc.aio.Channel, defaults: CallDefaults) -> None:
        super().__init__(defaults)
        self._stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)

    async def weave_message(
        self,
        request: threadweaver_pb2.WeaveMessageRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> threadweaver_pb2.WeaveMessageResponse:
        """Weaves one message into the unified-thread graph. Idempotent: safe to retry."""
        return await self._unary(self._stub.WeaveMessage, request, timeout, metadata, retry)

    async def weave_messages(
        self,
        request: threadweaver_pb2.WeaveMessagesRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> threadweaver_pb2.WeaveMessagesResponse:
        """Weaves up to 1,000 messages, one result each, in request order. Idempotent."""
        return await self._unary(self._stub.WeaveMessages, request, timeout, metadata, retry)

    async def get_unified_thread(
        self,
        request: threadweaver_pb2.GetUnifiedThreadRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> threadweaver_pb2.GetUnifiedThreadResponse:
        """The member threads and stats of the unified thread holding a thread.

        NOT_FOUND when the thread was never woven.
        """
        return await self._unary(self._stub.GetUnifiedThread, request, timeout, metadata, retry)

    async def resolve_threads(
        self,
        request: threadweaver_pb2.ResolveThreadsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> threadweaver_pb2.ResolveThreadsResponse:
        """Resolves up to 100 threads (an inbox page) to their unified thread ids."""
        return await self._unary(self._stub.ResolveThreads, request, timeout, metadata, retry)

    async def unweave_threads(
        self,
        request: threadweaver_pb2.UnweaveThreadsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> threadweaver_pb2.UnweaveThreadsResponse:
        """Removes threads from the unified threads; reads are exact on return, the
        cleanup is an operation (poll `get_operation`). Idempotent."""
        return await self._unary(self._stub.UnweaveThreads, request, timeout, metadata, retry)

    async def unweave_mailbox(
        self,
        request: threadweaver_pb2.UnweaveMailboxRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> threadweaver_pb2.UnweaveMailboxResponse:
        """Removes every thread of a mailbox; needs ``threadweaver:admin``. Idempotent."""
        return await self._unary(self._stub.UnweaveMailbox, request, timeout, metadata, retry)

    async def get_operation(
        self,
        request: common_pb2.GetOperationRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> common_pb2.Operation:
        """Progress of an unweaving. NOT_FOUND for an unknown operation."""
        return await self._unary(self._stub.GetOperation, request, timeout, metadata, retry)
