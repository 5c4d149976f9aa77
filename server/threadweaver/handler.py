"""The ThreadWeaver gRPC servicer: protobuf in, domain call, protobuf out; nothing else."""

from __future__ import annotations

import grpc
from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

from server.runtime.erasures import ErasureRecorder
from server.runtime.policies import MethodPolicy
from server.threadweaver import convert
from server.threadweaver.service import ThreadWeaverService
from server.threadweaver.settings import ThreadWeaverSettings

__all__ = ["POLICIES", "ThreadWeaverHandler"]

_S = "loom.v1.ThreadWeaver/"
POLICIES: dict[str, MethodPolicy] = {
    _S + "WeaveMessage": MethodPolicy(max_concurrency=256, max_waiting=256, deadline_s=5.0),
    _S + "WeaveMessages": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=30.0),
    _S + "GetUnifiedThread": MethodPolicy(max_concurrency=64, max_waiting=128, deadline_s=5.0),
    _S + "ResolveThreads": MethodPolicy(max_concurrency=64, max_waiting=128, deadline_s=5.0),
    _S + "UnweaveThreads": MethodPolicy(max_concurrency=8, max_waiting=32, deadline_s=60.0),
    _S + "UnweaveMailbox": MethodPolicy(
        max_concurrency=4, max_waiting=16, deadline_s=120.0, scope="threadweaver:admin"
    ),
    _S + "GetOperation": MethodPolicy(max_concurrency=64, max_waiting=128, deadline_s=5.0),
}


class ThreadWeaverHandler(threadweaver_pb2_grpc.ThreadWeaverServicer):
    """Serves `loom.v1.ThreadWeaver` from a `ThreadWeaver`."""

    def __init__(
        self,
        weaver: ThreadWeaverService,
        limits: ThreadWeaverSettings,
        erasures: ErasureRecorder,
    ) -> None:
        self._weaver = weaver
        self._limits = limits
        self._erasures = erasures

    async def WeaveMessage(  # noqa: N802 - gRPC method name
        self, request: threadweaver_pb2.WeaveMessageRequest, context: grpc.aio.ServicerContext
    ) -> threadweaver_pb2.WeaveMessageResponse:
        message = convert.single_message_from_proto(request)
        (result,) = await self._weaver.weave([message])
        return convert.result_to_proto(result)

    async def WeaveMessages(  # noqa: N802
        self, request: threadweaver_pb2.WeaveMessagesRequest, context: grpc.aio.ServicerContext
    ) -> threadweaver_pb2.WeaveMessagesResponse:
        messages = convert.messages_from_proto(
            list(request.messages), field="messages", limits=self._limits
        )
        results = await self._weaver.weave(messages)
        return threadweaver_pb2.WeaveMessagesResponse(
            results=[convert.result_to_proto(r) for r in results]
        )

    async def GetUnifiedThread(  # noqa: N802
        self, request: threadweaver_pb2.GetUnifiedThreadRequest, context: grpc.aio.ServicerContext
    ) -> threadweaver_pb2.GetUnifiedThreadResponse:
        thread, team, max_threads = convert.unified_request_from_proto(request, self._limits)
        view = await self._weaver.unified_thread(thread, team_gids=team, max_threads=max_threads)
        return convert.unified_to_proto(view)

    async def ResolveThreads(  # noqa: N802
        self, request: threadweaver_pb2.ResolveThreadsRequest, context: grpc.aio.ServicerContext
    ) -> threadweaver_pb2.ResolveThreadsResponse:
        threads = convert.thread_refs_from_proto(list(request.threads), self._limits)
        resolved = await self._weaver.resolve(threads)
        return threadweaver_pb2.ResolveThreadsResponse(
            threads=[
                threadweaver_pb2.ResolvedThread(
                    thread=common_pb2.ThreadRef(gid=t.gid, thread_id=t.thread_id),
                    unified_thread_id=ut or "",
                    found=ut is not None,
                )
                for t, ut in zip(threads, resolved, strict=True)
            ]
        )

    async def UnweaveThreads(  # noqa: N802
        self, request: threadweaver_pb2.UnweaveThreadsRequest, context: grpc.aio.ServicerContext
    ) -> threadweaver_pb2.UnweaveThreadsResponse:
        threads = convert.unweave_refs_from_proto(list(request.threads), self._limits)
        op = await self._weaver.unweave_threads(threads)
        return threadweaver_pb2.UnweaveThreadsResponse(operation=convert.operation_to_proto(op))

    async def UnweaveMailbox(  # noqa: N802
        self, request: threadweaver_pb2.UnweaveMailboxRequest, context: grpc.aio.ServicerContext
    ) -> threadweaver_pb2.UnweaveMailboxResponse:
        gid = convert.gid_from_proto(request.gid)
        await self._erasures.erased("threadweaver", [gid])  # first: a restore finishes it
        op = await self._weaver.unweave_mailbox(gid)
        return threadweaver_pb2.UnweaveMailboxResponse(operation=convert.operation_to_proto(op))

    async def GetOperation(  # noqa: N802
        self, request: common_pb2.GetOperationRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Operation:
        operation_id = convert.operation_id_from_proto(request.operation_id)
        return convert.operation_to_proto(self._weaver.operation(operation_id))
