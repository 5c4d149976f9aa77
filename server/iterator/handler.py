"""The Iterator gRPC servicer: protobuf in, domain call, protobuf out; nothing else.

StreamObjects runs as long as its job does, so it has no deadline of its own beyond the
client's (the interceptor applies none to streams) and a bulkhead sized for a few
consumers per job.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc
from loom.v1 import iterator_pb2, iterator_pb2_grpc

from server.iterator import convert
from server.iterator.service import IteratorService
from server.iterator.settings import IteratorLevel, IteratorSettings
from server.runtime.erasures import ErasureRecorder
from server.runtime.policies import MethodPolicy

__all__ = ["POLICIES", "IteratorHandler"]

_S = "loom.v1.Iterator/"
POLICIES: dict[str, MethodPolicy] = {
    _S + "StartIteration": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=10.0),
    _S + "GetJob": MethodPolicy(max_concurrency=64, max_waiting=64, deadline_s=5.0),
    _S + "StreamObjects": MethodPolicy(max_concurrency=64, max_waiting=0, max_wait_s=0.0),
    _S + "AckObjects": MethodPolicy(max_concurrency=64, max_waiting=128, deadline_s=10.0),
    _S + "PauseJob": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=5.0),
    _S + "ResumeJob": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=5.0),
    _S + "UpdateJob": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=5.0),
    _S + "CancelJob": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=5.0),
    _S + "ListJobs": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=10.0),
    _S + "DeleteJob": MethodPolicy(
        max_concurrency=8, max_waiting=32, deadline_s=60.0, scope="iterator:admin"
    ),
}


class IteratorHandler(iterator_pb2_grpc.IteratorServicer):
    """Serves `loom.v1.Iterator` from an `IteratorService`."""

    def __init__(
        self,
        service: IteratorService,
        levels: Sequence[IteratorLevel],
        settings: IteratorSettings,
        erasures: ErasureRecorder,
    ) -> None:
        self._service = service
        self._levels = levels
        self._settings = settings
        self._erasures = erasures

    async def StartIteration(  # noqa: N802 - gRPC method name
        self, request: iterator_pb2.StartIterationRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.Job:
        scope, rate, require_ack, ack_timeout, text = convert.start_from_proto(
            request, self._levels
        )
        view = await self._service.start_job(
            scope, rate=rate, require_ack=require_ack, ack_timeout_s=ack_timeout, request_json=text
        )
        return convert.job_to_proto(view)

    async def GetJob(  # noqa: N802
        self, request: iterator_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.Job:
        job_id = convert.job_id_from_proto(request.job_id)
        return convert.job_to_proto(await self._service.view(job_id))

    async def StreamObjects(  # noqa: N802
        self, request: iterator_pb2.StreamObjectsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[iterator_pb2.ObjectBatch]:
        job_id, max_objects = convert.stream_from_proto(request, self._settings.max_stream_batch)
        async for batch in self._service.stream(job_id, max_objects):
            yield convert.batch_to_proto(job_id, batch)

    async def AckObjects(  # noqa: N802
        self, request: iterator_pb2.AckObjectsRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.AckObjectsResponse:
        job_id, chunk_ids, object_ids = convert.ack_from_proto(request)
        objects, chunks, ignored = await self._service.ack(job_id, chunk_ids, object_ids)
        return iterator_pb2.AckObjectsResponse(acked=objects, chunks_acked=chunks, ignored=ignored)

    async def PauseJob(  # noqa: N802
        self, request: iterator_pb2.PauseJobRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.Job:
        job_id = convert.job_id_from_proto(request.job_id)
        return convert.job_to_proto(await self._service.pause(job_id))

    async def ResumeJob(  # noqa: N802
        self, request: iterator_pb2.ResumeJobRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.Job:
        job_id = convert.job_id_from_proto(request.job_id)
        return convert.job_to_proto(await self._service.resume(job_id))

    async def UpdateJob(  # noqa: N802
        self, request: iterator_pb2.UpdateJobRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.Job:
        job_id, rate = convert.rate_from_proto(request)
        return convert.job_to_proto(await self._service.update_rate(job_id, rate))

    async def CancelJob(  # noqa: N802
        self, request: iterator_pb2.CancelJobRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.Job:
        job_id = convert.job_id_from_proto(request.job_id)
        return convert.job_to_proto(await self._service.cancel(job_id))

    async def ListJobs(  # noqa: N802
        self, request: iterator_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.ListJobsResponse:
        limit, before = convert.list_from_proto(request)
        return convert.list_to_proto(await self._service.list_jobs(limit, before), limit)

    async def DeleteJob(  # noqa: N802
        self, request: iterator_pb2.DeleteJobRequest, context: grpc.aio.ServicerContext
    ) -> iterator_pb2.DeleteJobResponse:
        job_id = convert.job_id_from_proto(request.job_id)
        done = await self._service.delete_job(job_id)
        # Recorded once deleted (a running job is refused, and must not be deleted by a
        # later restore): a backup taken before restores the job, the log removes it again.
        await self._erasures.erased("iterator", [job_id])
        return iterator_pb2.DeleteJobResponse(deleted=done.deleted, records_removed=done.records)
