"""Typed async calls to ``loom.v1.Iterator``: high-throughput iteration jobs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from loom.v1 import iterator_pb2, iterator_pb2_grpc

from ._calls import CallDefaults, Metadata, ServiceClient
from ._retry import RetryPolicy

__all__ = ["IteratorClient"]


class IteratorClient(ServiceClient):
    """One snake_case method per RPC of ``loom.v1.Iterator``; see `LoomClient`."""

    __slots__ = ("_stub",)

    def __init__(self, channel: grpc.aio.Channel, defaults: CallDefaults) -> None:
        super().__init__(defaults)
        self._stub = iterator_pb2_grpc.IteratorStub(channel)

    async def start_iteration(
        self,
        request: iterator_pb2.StartIterationRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.Job:
        """Starts an iteration job over a scope and returns it at once.

        Not idempotent: a retried call may start a second job.
        """
        return await self._unary(self._stub.StartIteration, request, timeout, metadata, retry)

    async def get_job(
        self,
        request: iterator_pb2.GetJobRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.Job:
        """A job's state and counters. NOT_FOUND for an unknown job."""
        return await self._unary(self._stub.GetJob, request, timeout, metadata, retry)

    def stream_objects(
        self,
        request: iterator_pb2.StreamObjectsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> AsyncIterator[iterator_pb2.ObjectBatch]:
        """Streams a job's chunks (several per message) until every one is delivered.

        Retried (when the policy allows) only before the first batch arrives; breaking out
        of the loop cancels the stream.
        """
        return self._stream(self._stub.StreamObjects, request, timeout, metadata, retry)

    async def ack_objects(
        self,
        request: iterator_pb2.AckObjectsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.AckObjectsResponse:
        """Acknowledges chunks (by chunk id) or objects of a ``require_ack`` job. Idempotent."""
        return await self._unary(self._stub.AckObjects, request, timeout, metadata, retry)

    async def pause_job(
        self,
        request: iterator_pb2.PauseJobRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.Job:
        """Pauses a running job (idempotent): its work stays queued until resumed."""
        return await self._unary(self._stub.PauseJob, request, timeout, metadata, retry)

    async def resume_job(
        self,
        request: iterator_pb2.ResumeJobRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.Job:
        """Resumes a paused job (idempotent)."""
        return await self._unary(self._stub.ResumeJob, request, timeout, metadata, retry)

    async def update_job(
        self,
        request: iterator_pb2.UpdateJobRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.Job:
        """Changes a running job's rate limit (idempotent); every replica follows it."""
        return await self._unary(self._stub.UpdateJob, request, timeout, metadata, retry)

    async def cancel_job(
        self,
        request: iterator_pb2.CancelJobRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.Job:
        """Cancels a job; its workers stop taking its work."""
        return await self._unary(self._stub.CancelJob, request, timeout, metadata, retry)

    async def list_jobs(
        self,
        request: iterator_pb2.ListJobsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.ListJobsResponse:
        """One page of jobs, newest first."""
        return await self._unary(self._stub.ListJobs, request, timeout, metadata, retry)

    async def delete_job(
        self,
        request: iterator_pb2.DeleteJobRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> iterator_pb2.DeleteJobResponse:
        """Deletes a finished or cancelled job and everything stored for it (idempotent:
        an unknown or already deleted job is not an error)."""
        return await self._unary(self._stub.DeleteJob, request, timeout, metadata, retry)
