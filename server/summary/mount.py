"""Wires Summary into the server: its store (behind its engine's breaker), service, servicer."""

from __future__ import annotations

import grpc
from loom.v1 import summary_pb2_grpc

from server.config import Settings
from server.portable.records import PortableService, ServiceData
from server.runtime.guard import guard_store
from server.runtime.mounting import Mounted, Resources
from server.summary.handler import POLICIES, SummaryHandler
from server.summary.portable import SummaryData
from server.summary.service import SummaryService
from storage import factory
from storage.engines import SUMMARY_STORES

__all__ = ["DATA", "POLICIES", "mount"]


async def mount(server: grpc.aio.Server, settings: Settings, resources: Resources) -> Mounted:
    """Opens the SummaryStore and registers the servicer."""
    store = await factory.open_summary_store(settings)
    engine = settings.storage.summary_store
    service = SummaryService.from_settings(
        guard_store(store, resources.breaker(engine)), settings.summary
    )
    summary_pb2_grpc.add_SummaryServicer_to_server(
        SummaryHandler(service, resources.erasure_log()), server
    )
    return Mounted(closers=[store.close, service.operations.stop])


async def _open_data(settings: Settings) -> ServiceData:
    return SummaryData(await factory.open_summary_store(settings), settings.summary)


DATA = PortableService(SUMMARY_STORES, "summary.sqlite3", SummaryData.kinds, _open_data)
"""Summary's store as portable records, for `loom dump`, `load` and `diff`."""
