"""Wires Inbox into the server: its store (behind its engine's breaker), its domain
service with the background fan-out and trim workers, and its servicer."""

from __future__ import annotations

import grpc
from loom.v1 import inbox_pb2_grpc

from server.config import Settings
from server.inbox.handler import POLICIES, InboxHandler
from server.inbox.service import InboxService
from server.runtime.guard import guard_store
from server.runtime.mounting import Mounted, Resources
from storage import factory

__all__ = ["POLICIES", "SERVICE", "mount"]

SERVICE = "loom.v1.Inbox"


async def mount(server: grpc.aio.Server, settings: Settings, resources: Resources) -> Mounted:
    """Opens the InboxStore, starts the workers and registers the servicer.

    Closers run in reverse: the service stops first (fan-outs record their progress, trims
    are dropped), then the store closes.
    """
    store = await factory.open_inbox_store(settings)
    engine = settings.storage.inbox_store
    service = InboxService(guard_store(store, resources.breaker(engine)), settings.inbox)
    service.start()
    metrics = resources.metrics
    inbox = settings.inbox
    metrics.queue(
        "inbox_fanout", service.fanout.depth, inbox.fanout_queue, lambda: service.fanout.refused
    )
    metrics.queue(
        "inbox_trim",
        lambda: service.trimmer.pending,
        inbox.trim_queue,
        lambda: service.trimmer.dropped,
    )
    inbox_pb2_grpc.add_InboxServicer_to_server(InboxHandler(service, settings.inbox), server)
    return Mounted(closers=[store.close, service.stop])
