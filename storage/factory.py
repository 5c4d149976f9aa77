"""Settings -> opened storage adapters, through the engine tables of `storage.engines`.

One function per port, so callers get the port's type: for a store ``loom dump`` copies,
its `Portable...` Protocol (serving and portability), which serving code takes as the
serving Protocol and its service's dump code as both. Which engine serves it, and how that
engine opens, is the table's business. An engine the port does not have raises
`storage.engines.UnsupportedEngine` naming the setting (settings loaded by `server.config`
were already checked, so this only catches settings built by hand).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from storage.engines import (
    INBOX_STORES,
    ITERATION_SOURCES,
    JOB_STORES,
    SUMMARY_STORES,
    TEMPLATE_STORES,
    THREAD_STORES,
    WORK_QUEUES,
)
from storage.ports import (
    ErasureLog,
    IterationSource,
    JobStore,
    PortableInboxStore,
    PortableSummaryStore,
    PortableTemplateStore,
    PortableThreadStore,
    SourceLevel,
    WorkQueue,
)
from storage.settings import EngineSettings, SqliteSettings
from storage.sqlite.erasures import SqliteErasureLog

__all__ = [
    "open_erasure_log",
    "open_inbox_store",
    "open_iteration_source",
    "open_job_store",
    "open_summary_store",
    "open_template_store",
    "open_thread_store",
    "open_work_queue",
]


async def open_thread_store(settings: EngineSettings) -> PortableThreadStore:
    """The ThreadStore named by ``storage.threadweaver_store``."""
    return await THREAD_STORES.chosen(settings.storage).open(settings)


async def open_summary_store(settings: EngineSettings) -> PortableSummaryStore:
    """The SummaryStore named by ``storage.summary_store``."""
    return await SUMMARY_STORES.chosen(settings.storage).open(settings)


async def open_inbox_store(settings: EngineSettings) -> PortableInboxStore:
    """The InboxStore named by ``storage.inbox_store``."""
    return await INBOX_STORES.chosen(settings.storage).open(settings)


async def open_iteration_source(
    url: str, levels: Sequence[SourceLevel], *, settings: EngineSettings | None = None
) -> IterationSource:
    """The Iterator's source database at `url` (a SQLAlchemy async URL; its scheme picks
    the engine).

    An empty `url` is the embedded source: ``iterator-source.sqlite3`` in the data directory
    of `settings`, its default hierarchy's tables created when missing, so a fresh ``loom
    serve`` has something to validate.
    """
    return await ITERATION_SOURCES.for_url(url).open(url, levels, settings)


async def open_work_queue(settings: EngineSettings, queues: Sequence[str]) -> WorkQueue:
    """The Iterator's work queues named by ``storage.iterator_queue``, one per name."""
    return await WORK_QUEUES.chosen(settings.storage).open(settings, queues)


async def open_job_store(settings: EngineSettings) -> JobStore:
    """The Iterator's job state named by ``storage.iterator_state``."""
    return await JOB_STORES.chosen(settings.storage).open(settings)


async def open_template_store(
    settings: EngineSettings, *, email_ttl_s: float
) -> PortableTemplateStore:
    """The TemplateStore named by ``storage.templates_store``.

    `email_ttl_s` is the TemplateInduction email TTL: Bigtable's max-age GC on the `email`
    and `user` families, the SQLite adapter's own expiry.
    """
    return await TEMPLATE_STORES.chosen(settings.storage).open(settings, email_ttl_s)


async def open_erasure_log(path: Path, sqlite: SqliteSettings) -> ErasureLog:
    """The erasure log at `path` (`server.runtime.erasures.log_path`): a SQLite file on every
    deployment, kept apart from the stores whose subjects it names."""
    return await SqliteErasureLog.open(path, synchronous=sqlite.synchronous)
