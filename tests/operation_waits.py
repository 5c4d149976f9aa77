"""Waiting for a background operation (an erasure, a large deletion) to end, over gRPC."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from loom.v1 import common_pb2

from tests.serving import eventually

__all__ = ["wait_done"]

GetOperation = Callable[[common_pb2.GetOperationRequest], Awaitable[common_pb2.Operation]]


async def wait_done(
    get_operation: GetOperation, operation_id: str, *, timeout_s: float = 120.0
) -> common_pb2.Operation:
    """Polls a service's GetOperation (e.g. ``SummaryStub(channel).GetOperation``) until the
    operation is no longer RUNNING; asserts it ended DONE and returns it."""
    request = common_pb2.GetOperationRequest(operation_id=operation_id)
    op = await eventually(
        lambda: get_operation(request),
        lambda o: o.state != common_pb2.OPERATION_STATE_RUNNING,
        timeout_s=timeout_s,
        what=f"operation {operation_id} ends",
    )
    assert op.state == common_pb2.OPERATION_STATE_DONE, op
    return op
