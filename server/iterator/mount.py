"""Wires the Iterator into the server: source, queues and job state (each behind its
engine's breaker), the hierarchy checked against the live schema and by running each
level's reads once, workers, servicer."""

from __future__ import annotations

import grpc
from loom.v1 import iterator_pb2_grpc

from server.config import Settings
from server.iterator.delivery import Delivery
from server.iterator.handler import POLICIES, IteratorHandler
from server.iterator.hierarchy import check_levels, check_reads, check_schema, source_levels
from server.iterator.jobcache import JobCache
from server.iterator.portable import JobData
from server.iterator.queues import LevelQueues
from server.iterator.service import IteratorService
from server.iterator.telemetry import register
from server.iterator.worker import StepWorkers
from server.portable.records import PortableService, ServiceData
from server.runtime.guard import guard_store
from server.runtime.logs import get_logger
from server.runtime.mounting import Mounted, Resources
from storage import factory
from storage.engines import JOB_STORES

__all__ = ["DATA", "POLICIES", "mount"]

_log = get_logger("iterator")


async def mount(server: grpc.aio.Server, settings: Settings, resources: Resources) -> Mounted:
    """Opens the stores, validates the hierarchy, starts the workers, registers the servicer.

    A hierarchy that does not match the source stops start-up with an error naming the
    setting: a table or column the reads would not find, or a ``where`` the database
    refuses (each level's reads run once, returning no rows). With no ``source_url`` the
    source is the embedded one (`storage.factory.open_iteration_source`: a SQLite file in the
    data directory with the default schema, empty until something writes to it), so
    ``loom serve`` runs with no set-up.
    """
    s = settings.iterator
    check_levels(s.levels)
    raw_source = await factory.open_iteration_source(
        s.source_url, source_levels(s.levels), settings=settings
    )
    closers = [raw_source.close]
    source = guard_store(raw_source, resources.breaker("iterator-source"))
    try:
        warnings = check_schema(s.levels, await raw_source.schema())
        for warning in warnings:
            _log.warning("iterator hierarchy", warning=warning)
        await check_reads(s.levels, source)
        raw_queue = await factory.open_work_queue(settings, [lv.name for lv in s.levels])
        closers.append(raw_queue.close)
        raw_store = await factory.open_job_store(settings)
        closers.append(raw_store.close)
    except BaseException:
        for close in reversed(closers):
            await close()
        raise
    queue = guard_store(raw_queue, resources.breaker(settings.storage.iterator_queue))
    store = guard_store(raw_store, resources.breaker(settings.storage.iterator_state))
    jobs = JobCache(store)
    delivery = Delivery(store, s.poll_interval_s)
    # Sending work stands apart, so the service and the workers are built in turn: the
    # service sends through the queues, the workers report source faults to the service.
    levels = LevelQueues(queue, [lv.name for lv in s.levels], s.poll_interval_s)
    service = IteratorService(
        source,
        store,
        jobs,
        delivery,
        s,
        level_names=levels.names,
        announce=levels.announce,
        discard=levels.discard_job,
    )
    workers = StepWorkers(
        source,
        queue,
        store,
        jobs,
        s,
        levels=levels,
        on_emit=delivery.notify,
        on_source_down=service.source_down,
        on_source_rejected=service.source_rejected,
    )
    register(resources.metrics, workers, service, levels.names)
    workers.start()
    service.start()
    iterator_pb2_grpc.add_IteratorServicer_to_server(
        IteratorHandler(service, s.levels, s, resources.erasure_log()), server
    )
    return Mounted(closers=[*closers, workers.stop, service.stop])


async def _open_data(settings: Settings) -> ServiceData:
    return JobData(await factory.open_job_store(settings), settings.iterator)


DATA = PortableService(JOB_STORES, "iterator-state.sqlite3", JobData.kinds, _open_data)
"""The Iterator's job store as portable records, for `loom dump`, `load` and `diff`."""
