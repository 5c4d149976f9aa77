"""Wires Inbox into the server: its store (behind its engine's breaker), its domain
service with the background fan-out and trim workers, and its servicer."""

from __future__ import annotations

import grpc
from loom.v1 import inbox_pb2_grpc
from prometheus_client import Histogram

from server.config import Settings
from server.inbox.handler import POLICIES, InboxHandler
from server.inbox.portable import InboxData
from server.inbox.service import InboxService
from server.portable.records import PortableService, ServiceData
from server.runtime.guard import guard_store
from server.runtime.mounting import Mounted, Resources
from storage import factory
from storage.engines import INBOX_STORES

__all__ = ["DATA", "POLICIES", "mount"]


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
    metrics.counter(
        "loom_inbox_deletions",
        "Inbox deletions: threads deleted, phantom rows cleaned (on read and by the sweep), "
        "threads removed from one inbox, inboxes deleted",
        "what",
        service.counts.snapshot,
    )
    tail = service.watching.tail
    metrics.counter(
        "loom_inbox_watch_events",
        "WatchInbox events written to clients",
        "what",
        lambda: {"sent": tail.events_sent},
    )
    lag = Histogram(
        "loom_inbox_watch_lag_seconds",
        "From a change's commit to its WatchInbox event being written",
        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        registry=metrics.registry,
    )
    tail.lag_ms = lambda ms: lag.observe(ms / 1000)
    resources.drainers.append(tail.drain)
    inbox_pb2_grpc.add_InboxServicer_to_server(
        InboxHandler(service, settings.inbox, resources.erasure_log()), server
    )
    return Mounted(closers=[store.close, service.stop])


async def _open_data(settings: Settings) -> ServiceData:
    return InboxData(await factory.open_inbox_store(settings), settings.inbox)


DATA = PortableService(INBOX_STORES, "inbox.sqlite3", InboxData.kinds, _open_data)
"""Inbox's store as portable records, for `loom dump`, `load` and `diff`."""
