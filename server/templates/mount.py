"""Wires TemplateInduction into the server: its store (behind its engine's breaker), the
CPU stage's process pool, the pipeline's stages and the servicer.

The pool uses ``forkserver``: its workers descend from a clean helper process, never from
this one, which by now holds gRPC's threads (forking those is unsafe). Each worker exits once
this process is gone, however it went, and the forkserver and resource tracker follow
(``server.runtime.lifetime``). Closers run in
reverse: running erasures stop, the pipeline stops, the pool shuts down (pending work cancelled), the store closes.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import grpc
from loom.v1 import templates_pb2_grpc

from server.config import Settings
from server.portable.records import PortableService, ServiceData
from server.runtime.guard import guard_store
from server.runtime.lifetime import exit_with_server
from server.runtime.mounting import Mounted, Resources
from server.templates.erasure import scheme_params
from server.templates.handler import POLICIES, TemplateInductionHandler
from server.templates.pipeline import Pipeline
from server.templates.portable import TemplateData
from server.templates.service import TemplateInductionService
from server.templates.work import warm_up
from storage import factory
from storage.engines import TEMPLATE_STORES

__all__ = ["DATA", "POLICIES", "mount"]


async def mount(server: grpc.aio.Server, settings: Settings, resources: Resources) -> Mounted:
    """Opens the TemplateStore, starts the pool and the stages, registers the servicer."""
    t = settings.templates
    store = await factory.open_template_store(settings, email_ttl_s=t.email_ttl_s)
    executor = ProcessPoolExecutor(
        max_workers=max(1, t.cpu_workers),
        mp_context=multiprocessing.get_context("forkserver"),
        initializer=exit_with_server,  # a SIGKILLed server leaves no worker (nor helper) behind
    )
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(executor, warm_up) for _ in range(t.cpu_workers)))
    params = scheme_params(t)
    guarded = guard_store(store, resources.breaker(settings.storage.templates_store))
    pipeline = Pipeline(guarded, t, executor, params)
    pipeline.start()
    service = TemplateInductionService(guarded, pipeline, scans=guarded)
    templates_pb2_grpc.add_TemplateInductionServicer_to_server(
        TemplateInductionHandler(service, t, resources.erasure_log()), server
    )

    async def stop_pool() -> None:
        await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    return Mounted(closers=[store.close, stop_pool, pipeline.stop, service.operations.stop])


async def _open_data(settings: Settings) -> ServiceData:
    return TemplateData(
        await factory.open_template_store(settings, email_ttl_s=settings.templates.email_ttl_s),
        settings.templates,
    )


DATA = PortableService(TEMPLATE_STORES, "templates.sqlite3", TemplateData.kinds, _open_data)
"""TemplateInduction's store as portable records, for `loom dump`, `load` and `diff`."""
