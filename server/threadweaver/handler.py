"""The ThreadWeaver gRPC servicer: protobuf in, domain call, protobuf out; nothing else."""

from __future__ import annotations

import grpc
from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

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
}


class ThreadWeaverHandler(threadweaver_pb2_grpc.ThreadWeaverServicer):
    """Serves `loom.v1.ThreadWeaver` from a `ThreadWeaver`."""

    def __init__(self, weaver: ThreadWeaverService, limits: ThreadWeaverSettings) -> None:
        self._weaver = weaver
        self._limits = limits

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
