"""The Summary gRPC servicer: protobuf in, domain call, protobuf out; nothing else."""

from __future__ import annotations

import grpc
from loom.v1 import common_pb2, summary_pb2, summary_pb2_grpc

from server.runtime.erasures import ErasureRecorder
from server.runtime.policies import MethodPolicy
from server.summary import convert
from server.summary.limits import MAX_MESSAGE_ID_BYTES, MAX_RECIPIENT_ID_BYTES
from server.summary.service import SummaryService

__all__ = ["POLICIES", "SummaryHandler"]

_S = "loom.v1.Summary/"
# A 10,000-event batch costs a few ms of CPU plus two engine round trips (more under
# contention), so writes get a small bulkhead and a longer deadline; reads are point reads.
POLICIES: dict[str, MethodPolicy] = {
    _S + "RecordDeliveryEvents": MethodPolicy(max_concurrency=32, max_waiting=64, deadline_s=10.0),
    _S + "GetMessageSummary": MethodPolicy(max_concurrency=128, max_waiting=256, deadline_s=5.0),
    # Up to 1,000 conditional writes, one message at a time.
    _S + "DeleteMessageSummaries": MethodPolicy(
        max_concurrency=8, max_waiting=16, deadline_s=30.0, scope="summary:write"
    ),
    # Answers at once; the scan runs in the background (GetOperation).
    _S + "EraseRecipients": MethodPolicy(
        max_concurrency=4, max_waiting=8, deadline_s=5.0, scope="summary:admin"
    ),
    _S + "GetOperation": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=2.0),
}


class SummaryHandler(summary_pb2_grpc.SummaryServicer):
    """Serves `loom.v1.Summary` from a `SummaryService`."""

    def __init__(self, service: SummaryService, erasures: ErasureRecorder) -> None:
        self._service = service
        self._erasures = erasures

    async def RecordDeliveryEvents(  # noqa: N802 - gRPC method name
        self,
        request: summary_pb2.RecordDeliveryEventsRequest,
        context: grpc.aio.ServicerContext,
    ) -> summary_pb2.RecordDeliveryEventsResponse:
        message_id, events = convert.events_from_proto(request)
        outcome = await self._service.record(message_id, events)
        recorded = 0 if outcome.ignored else len(events)
        return summary_pb2.RecordDeliveryEventsResponse(recorded=recorded)

    async def GetMessageSummary(  # noqa: N802
        self, request: summary_pb2.GetMessageSummaryRequest, context: grpc.aio.ServicerContext
    ) -> summary_pb2.MessageSummary:
        message_id = convert.message_id_from_proto(request.message_id)
        view = await self._service.view(message_id)
        return convert.summary_to_proto(message_id, view)

    async def DeleteMessageSummaries(  # noqa: N802
        self,
        request: summary_pb2.DeleteMessageSummariesRequest,
        context: grpc.aio.ServicerContext,
    ) -> summary_pb2.DeleteMessageSummariesResponse:
        ids = convert.ids_from_proto(
            "message_ids", request.message_ids, max_bytes=MAX_MESSAGE_ID_BYTES
        )
        await self._service.delete_messages(ids)
        return summary_pb2.DeleteMessageSummariesResponse()

    async def EraseRecipients(  # noqa: N802
        self,
        request: summary_pb2.SummaryEraseRecipientsRequest,
        context: grpc.aio.ServicerContext,
    ) -> common_pb2.Operation:
        ids = convert.ids_from_proto(
            "recipient_ids", request.recipient_ids, max_bytes=MAX_RECIPIENT_ID_BYTES
        )
        await self._erasures.erased("summary", ids)  # first: a restore finishes what stops
        return convert.operation_to_proto(await self._service.erase_recipients(ids))

    async def GetOperation(  # noqa: N802
        self, request: common_pb2.GetOperationRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Operation:
        operation_id = convert.operation_id_from_proto(request)
        return convert.operation_to_proto(self._service.operations.get(operation_id))
