"""Typed async calls to ``loom.v1.Summary``: per-message delivery summaries."""

from __future__ import annotations

import grpc
from loom.v1 import common_pb2, summary_pb2, summary_pb2_grpc

from ._calls import CallDefaults, Metadata, ServiceClient
from ._retry import RetryPolicy

__all__ = ["SummaryClient"]


class SummaryClient(ServiceClient):
    """One snake_case method per RPC of ``loom.v1.Summary``; see `LoomClient`."""

    __slots__ = ("_stub",)

    def __init__(self, channel: grpc.aio.Channel, defaults: CallDefaults) -> None:
        super().__init__(defaults)
        self._stub = summary_pb2_grpc.SummaryStub(channel)

    async def record_delivery_events(
        self,
        request: summary_pb2.RecordDeliveryEventsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> summary_pb2.RecordDeliveryEventsResponse:
        """Records delivery events. Idempotent: the same event twice changes nothing."""
        return await self._unary(self._stub.RecordDeliveryEvents, request, timeout, metadata, retry)

    async def get_message_summary(
        self,
        request: summary_pb2.GetMessageSummaryRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> summary_pb2.MessageSummary:
        """The per-status summary of one message. NOT_FOUND when it has no events."""
        return await self._unary(self._stub.GetMessageSummary, request, timeout, metadata, retry)

    async def delete_message_summaries(
        self,
        request: summary_pb2.DeleteMessageSummariesRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> summary_pb2.DeleteMessageSummariesResponse:
        """Deletes messages' summaries; a late event for one is ignored. Idempotent."""
        return await self._unary(
            self._stub.DeleteMessageSummaries, request, timeout, metadata, retry
        )

    async def erase_recipients(
        self,
        request: summary_pb2.SummaryEraseRecipientsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> common_pb2.Operation:
        """Erases recipients from every exact set in the background (poll `get_operation`);
        needs ``summary:admin``. Idempotent."""
        return await self._unary(self._stub.EraseRecipients, request, timeout, metadata, retry)

    async def get_operation(
        self,
        request: common_pb2.GetOperationRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> common_pb2.Operation:
        """Progress of an EraseRecipients operation. NOT_FOUND for an unknown operation."""
        return await self._unary(self._stub.GetOperation, request, timeout, metadata, retry)
