"""Wires ThreadWeaver into the server: its store, its domain object, its servicer."""

from __future__ import annotations

import grpc
from loom.v1 import threadweaver_pb2_grpc

from server.config import Settings
from server.portable.records import PortableService, ServiceData
from server.runtime.guard import guard_store
from server.runtime.mounting import Mounted, Resources
from server.threadweaver.handler import POLICIES, ThreadWeaverHandler
from server.threadweaver.portable import ThreadData
from server.threadweaver.service import ThreadWeaverService
from storage import factory
from storage.engines import THREAD_STORES

__all__ = ["DATA", "POLICIES", "mount"]


async def mount(server: grpc.aio.Server, settings: Settings, resources: Resources) -> Mounted:
    """Opens the ThreadStore (behind its engine's breaker) and registers the servicer."""
    store = await factory.open_thread_store(settings)
    engine = settings.storage.threadweaver_store
    limits = settings.threadweaver
    weaver = ThreadWeaverService(
        guard_store(store, resources.breaker(engine)),
        max_closure=limits.max_closure,
        max_threads=limits.default_max_threads,
        retire_grace_s=limits.retire_grace_s,
    )
    threadweaver_pb2_grpc.add_ThreadWeaverServicer_to_server(
        ThreadWeaverHandler(weaver, settings.threadweaver, resources.erasure_log()), server
    )
    return Mounted(closers=[store.close])


async def _open_data(settings: Settings) -> ServiceData:
    return ThreadData(await factory.open_thread_store(settings), settings.threadweaver)


DATA = PortableService(THREAD_STORES, "threadweaver.sqlite3", ThreadData.kinds, _open_data)
"""ThreadWeaver's store as portable records, for `loom dump`, `load` and `diff`."""
