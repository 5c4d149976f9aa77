"""The Summary gRPC servicer: protobuf in, domain call, protobuf out; nothing else."""

from __future__ import annotations

import grpc
from loom.v1 import summary_pb2, summary_pb2_grpc

from server.runtime.policies import MethodPolicy
from server.summary import convert
from server.summary.service import SummaryService

__all__ = ["POLICIES", "SummaryHandler"]

_S = "loom.v1.Summary/"
# A 10,000-event batch costs a few ms of CPU plus two engine round trips (more under
# contention), so writes get a small bulkhead and a longer deadline; reads are point reads.
POLICIES: dict[str, MethodPolicy] = {
    _S + "RecordDeliveryEvents": MethodPolicy(max_concurrency=32, max_waiting=64, deadline_s=10.0),
    _S + "GetMessageSummary": MethodPolicy(max_concurrency=128, max_waiting=256, deadline_s=5.0),
}


class SummaryHandler(summary_pb2_grpc.SummaryServicer):
    """Serves `loom.v1.Summary` from a `SummaryService`."""

    def __init__(self, service: SummaryService) -> None:
        self._service = service

    async def RecordDeliveryEvents(  # noqa: N802 - gRPC method name
        self,
        request: summary_pb2.RecordDeliveryEventsRequest,
        context: grpc.aio.ServicerContext,
    ) -> summary_pb2.RecordDeliveryEventsResponse:
        message_id, events = convert.events_from_proto(request)
        await self._service.record(message_id, events)
        return summary_pb2.RecordDeliveryEventsResponse(recorded=len(events))

    async def GetMessageSummary(  # noqa: N802
        self, request: summary_pb2.GetMessageSummaryRequest, context: grpc.aio.ServicerContext
    ) -> summary_pb2.MessageSummary:
        message_id = convert.message_id_from_proto(request.message_id)
        view = await self._service.view(message_id)
        return convert.summary_to_proto(message_id, view)
