"""Builds and runs the Loom server: every service, health, reflection, graceful drain."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from loom.v1 import (
    inbox_pb2,
    inbox_pb2_grpc,
    iterator_pb2,
    iterator_pb2_grpc,
    summary_pb2,
    summary_pb2_grpc,
    templates_pb2,
    templates_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)
from server.config import MethodPolicy, Settings
from server.runtime.breaker import CircuitBreaker
from server.runtime.guard import guard_store
from server.runtime.interceptor import RpcInterceptor
from server.runtime.logs import get_logger
from server.runtime.policies import PolicyTable
from server.threadweaver import handler as threadweaver_handler
from server.threadweaver.weaver import ThreadWeaver
from storage import factory

__all__ = ["LoomServer", "build_server", "serve"]

_log = get_logger("server")

SERVICE_NAMES = (
    threadweaver_pb2.DESCRIPTOR.services_by_name["ThreadWeaver"].full_name,
    iterator_pb2.DESCRIPTOR.services_by_name["Iterator"].full_name,
    templates_pb2.DESCRIPTOR.services_by_name["TemplateInduction"].full_name,
    inbox_pb2.DESCRIPTOR.services_by_name["Inbox"].full_name,
    summary_pb2.DESCRIPTOR.services_by_name["Summary"].full_name,
)


@dataclass
class LoomServer:
    """A started server and what must be closed with it."""

    server: grpc.aio.Server
    port: int
    health: HealthServicer
    grace_s: float
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def stop(self) -> None:
        """Graceful drain: report NOT_SERVING, finish in-flight calls, close the stores."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.grace_s)
        for close in reversed(self.closers):
            await close()


def _breakers(settings: Settings) -> Callable[[str], CircuitBreaker]:
    made: dict[str, CircuitBreaker] = {}

    def breaker(engine: str) -> CircuitBreaker:
        if engine not in made:
            b = settings.breaker
            made[engine] = CircuitBreaker(
                engine,
                failure_threshold=b.failure_threshold,
                reset_timeout_s=b.reset_timeout_s,
                half_open_max_calls=b.half_open_max_calls,
            )
        return made[engine]

    return breaker


async def build_server(settings: Settings) -> LoomServer:
    """Opens the stores, registers every service and starts listening."""
    breaker = _breakers(settings)
    defaults: dict[str, MethodPolicy] = dict(threadweaver_handler.POLICIES)
    server = grpc.aio.server(
        interceptors=[RpcInterceptor(PolicyTable(defaults, settings.policies))],
        options=[
            ("grpc.max_receive_message_length", settings.server.max_message_bytes),
            ("grpc.max_send_message_length", settings.server.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )
    closers: list[Callable[[], Awaitable[None]]] = []

    thread_store = await factory.open_thread_store(settings)
    closers.append(thread_store.close)
    weaver = ThreadWeaver(
        guard_store(thread_store, breaker(settings.storage.threadweaver_store)),
        max_closure=settings.threadweaver.max_closure,
    )
    threadweaver_pb2_grpc.add_ThreadWeaverServicer_to_server(
        threadweaver_handler.ThreadWeaverService(weaver, settings.threadweaver), server
    )
    # Contracts published ahead of their implementation answer UNIMPLEMENTED.
    iterator_pb2_grpc.add_IteratorServicer_to_server(iterator_pb2_grpc.IteratorServicer(), server)
    templates_pb2_grpc.add_TemplateInductionServicer_to_server(
        templates_pb2_grpc.TemplateInductionServicer(), server
    )
    inbox_pb2_grpc.add_InboxServicer_to_server(inbox_pb2_grpc.InboxServicer(), server)
    summary_pb2_grpc.add_SummaryServicer_to_server(summary_pb2_grpc.SummaryServicer(), server)

    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME),
        server,
    )
    address = f"{settings.server.host}:{settings.server.port}"
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind {address}")
    await server.start()
    for name in ("", *SERVICE_NAMES):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return LoomServer(server, port, health, settings.server.grace_s, closers)


async def serve(settings: Settings) -> None:
    """Runs until SIGTERM or SIGINT, then drains gracefully."""
    loom = await build_server(settings)
    _log.info("serving", port=loom.port, threadweaver_store=settings.storage.threadweaver_store)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    _log.info("draining", grace_s=settings.server.grace_s)
    await loom.stop()
    _log.info("stopped")
