"""Builds and runs the Loom server: every service, health, reflection, graceful drain."""

from __future__ import annotations

import asyncio
import gc
import importlib
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import ModuleType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from loom.v1 import (
    inbox_pb2_grpc,
    iterator_pb2_grpc,
    summary_pb2_grpc,
)

from server.config import MethodPolicy, Settings
from server.runtime.interceptor import RpcInterceptor
from server.runtime.logs import get_logger
from server.runtime.mounting import Resources
from server.runtime.policies import PolicyTable

__all__ = ["SERVICE_NAMES", "LoomServer", "build_server", "serve"]

_log = get_logger("server")

# Implemented services: each module has SERVICE, POLICIES and mount() (server.runtime.mounting).
MOUNTS = (
    "server.threadweaver.mount",
    "server.summary.mount",
    "server.inbox.mount",
    "server.templates.mount",
)

# Contracts published ahead of their implementation: they answer UNIMPLEMENTED.
PLACEHOLDERS: dict[str, Callable[[grpc.aio.Server], None]] = {
    "loom.v1.Iterator": lambda s: iterator_pb2_grpc.add_IteratorServicer_to_server(
        iterator_pb2_grpc.IteratorServicer(),  # type: ignore[abstract]
        s,
    ),
    "loom.v1.Inbox": lambda s: inbox_pb2_grpc.add_InboxServicer_to_server(
        inbox_pb2_grpc.InboxServicer(),  # type: ignore[abstract]
        s,
    ),
    "loom.v1.Summary": lambda s: summary_pb2_grpc.add_SummaryServicer_to_server(
        summary_pb2_grpc.SummaryServicer(),  # type: ignore[abstract]
        s,
    ),
}

SERVICE_NAMES = (
    "loom.v1.ThreadWeaver",
    "loom.v1.Iterator",
    "loom.v1.TemplateInduction",
    "loom.v1.Inbox",
    "loom.v1.Summary",
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
        """Graceful drain: report NOT_SERVING, finish in-flight calls, then close stores."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.grace_s)
        for close in reversed(self.closers):
            await close()


async def build_server(settings: Settings) -> LoomServer:
    """Opens the stores, registers every service and starts listening."""
    sys.setswitchinterval(settings.server.gil_switch_interval_s)
    # Large requests (20,000-recipient posts) allocate many objects; with CPython's default
    # gen-0 threshold (700) the collector runs constantly and its full passes stall the loop
    # for tens of ms. Everything alive at start-up is frozen out of the collector's walk.
    gc.set_threshold(settings.server.gc_gen0_threshold, 20, 50)
    gc.freeze()
    modules: list[ModuleType] = [importlib.import_module(name) for name in MOUNTS]
    defaults: dict[str, MethodPolicy] = {}
    for module in modules:
        defaults.update(module.POLICIES)
    server = grpc.aio.server(
        interceptors=[RpcInterceptor(PolicyTable(defaults, settings.policies))],
        options=[
            ("grpc.max_receive_message_length", settings.server.max_message_bytes),
            ("grpc.max_send_message_length", settings.server.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )
    resources = Resources(settings.breaker)
    closers: list[Callable[[], Awaitable[None]]] = []
    mounted = set()
    try:
        for module in modules:
            closers += (await module.mount(server, settings, resources)).closers
            mounted.add(module.SERVICE)
    except BaseException:
        for close in reversed(closers):
            await close()
        raise
    for name, register in PLACEHOLDERS.items():
        if name not in mounted:
            register(server)

    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health_name, reflection.SERVICE_NAME), server
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
    _log.info("serving", port=loom.port, stores=str(settings.storage))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    _log.info("draining", grace_s=settings.server.grace_s)
    await loom.stop()
    _log.info("stopped")
