"""Wires ThreadWeaver into the server: its store, its domain object, its servicer."""

from __future__ import annotations

import grpc
from loom.v1 import threadweaver_pb2_grpc

from server.config import Settings
from server.runtime.guard import guard_store
from server.runtime.mounting import Mounted, Resources
from server.threadweaver.handler import POLICIES, ThreadWeaverService
from server.threadweaver.weaver import ThreadWeaver
from storage import factory

__all__ = ["POLICIES", "SERVICE", "mount"]

SERVICE = "loom.v1.ThreadWeaver"


async def mount(server: grpc.aio.Server, settings: Settings, resources: Resources) -> Mounted:
    """Opens the ThreadStore (behind its engine's breaker) and registers the servicer."""
    store = await factory.open_thread_store(settings)
    engine = settings.storage.threadweaver_store
    weaver = ThreadWeaver(
        guard_store(store, resources.breaker(engine)), max_closure=settings.threadweaver.max_closure
    )
    threadweaver_pb2_grpc.add_ThreadWeaverServicer_to_server(
        ThreadWeaverService(weaver, settings.threadweaver), server
    )
    return Mounted(closers=[store.close])
