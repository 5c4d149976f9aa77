"""Settings -> storage adapters. The only module that knows every engine's package.

Distributed engines are imported lazily so the embedded default needs none of their
drivers to be reachable (and starts in milliseconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from storage.ports import (
    InboxStore,
    IterationSource,
    JobStore,
    SourceLevel,
    SummaryStore,
    TemplateStore,
    ThreadStore,
    WorkQueue,
)
from storage.settings import EngineSettings

__all__ = [
    "open_inbox_store",
    "open_iteration_source",
    "open_job_store",
    "open_summary_store",
    "open_template_store",
    "open_thread_store",
    "open_work_queue",
]


async def open_thread_store(settings: EngineSettings) -> ThreadStore:
    """The ThreadStore named by ``storage.threadweaver_store``."""
    engine = settings.storage.threadweaver_store
    if engine == "sqlite":
        from storage.sqlite.threads import SqliteThreadStore

        return await SqliteThreadStore.open(
            Path(settings.sqlite.data_dir) / "threadweaver.sqlite3",
            synchronous=settings.sqlite.synchronous,
            readers=settings.sqlite.readers,
        )
    if engine == "cassandra":
        from storage.cassandra.threads import CassandraThreadStore

        return await CassandraThreadStore.open(settings.cassandra)
    if engine == "bigtable":
        from storage.bigtable.threads import BigtableThreadStore

        return await BigtableThreadStore.open(settings.bigtable)
    raise ValueError(f"threadweaver_store={engine!r} is not supported")


async def open_summary_store(settings: EngineSettings) -> SummaryStore:
    """The SummaryStore named by ``storage.summary_store`` (sqlite or dynamodb)."""
    engine = settings.storage.summary_store
    if engine == "sqlite":
        from storage.sqlite.summaries import SqliteSummaryStore

        return await SqliteSummaryStore.open(
            Path(settings.sqlite.data_dir) / "summary.sqlite3",
            synchronous=settings.sqlite.synchronous,
            readers=settings.sqlite.readers,
        )
    if engine == "dynamodb":
        from storage.dynamodb.summaries import DynamoDBSummaryStore

        return await DynamoDBSummaryStore.open(settings.dynamodb)
    raise ValueError(f"summary_store={engine!r} is not supported")


async def open_inbox_store(settings: EngineSettings) -> InboxStore:
    """The InboxStore named by ``storage.inbox_store`` (sqlite or cassandra)."""
    engine = settings.storage.inbox_store
    if engine == "sqlite":
        from storage.sqlite.inbox import SqliteInboxStore

        return await SqliteInboxStore.open(
            Path(settings.sqlite.data_dir) / "inbox.sqlite3",
            synchronous=settings.sqlite.synchronous,
            readers=settings.sqlite.readers,
        )
    if engine == "cassandra":
        from storage.cassandra.inbox import CassandraInboxStore

        return await CassandraInboxStore.open(settings.cassandra)
    raise ValueError(f"inbox_store={engine!r} is not supported")


async def open_iteration_source(
    url: str, levels: Sequence[SourceLevel], create_default_schema: bool = False
) -> IterationSource:
    """The Iterator's source database at `url` (SQLAlchemy async URL).

    `create_default_schema` creates the default hierarchy's tables when missing (the
    embedded default source, so a fresh ``loom serve`` has something to validate).
    """
    from storage.sql.source import SqlIterationSource

    source = SqlIterationSource.open(url, levels)
    if create_default_schema:
        await source.create_default_schema()
    return source


async def open_work_queue(settings: EngineSettings, queues: Sequence[str]) -> WorkQueue:
    """The Iterator's work queues named by ``storage.iterator_queue`` (sqlite or sqs)."""
    engine = settings.storage.iterator_queue
    if engine == "sqlite":
        from storage.sqlite.queue import SqliteWorkQueue

        return await SqliteWorkQueue.open(
            Path(settings.sqlite.data_dir) / "iterator-queue.sqlite3",
            synchronous=settings.sqlite.synchronous,
        )
    if engine == "sqs":
        from storage.sqs.queue import SqsWorkQueue

        return await SqsWorkQueue.open(settings.sqs, queues)
    raise ValueError(f"iterator_queue={engine!r} is not supported")


async def open_job_store(settings: EngineSettings) -> JobStore:
    """The Iterator's job state named by ``storage.iterator_state`` (sqlite or dynamodb)."""
    engine = settings.storage.iterator_state
    if engine == "sqlite":
        from storage.sqlite.jobs import SqliteJobStore

        return await SqliteJobStore.open(
            Path(settings.sqlite.data_dir) / "iterator-state.sqlite3",
            synchronous=settings.sqlite.synchronous,
            readers=settings.sqlite.readers,
        )
    if engine == "dynamodb":
        from storage.dynamodb.jobs import DynamoDBJobStore

        return await DynamoDBJobStore.open(settings.dynamodb)
    raise ValueError(f"iterator_state={engine!r} is not supported")


async def open_template_store(settings: EngineSettings, *, email_ttl_s: float) -> TemplateStore:
    """The TemplateStore named by ``storage.templates_store`` (sqlite or bigtable).

    `email_ttl_s` is the TemplateInduction email TTL: Bigtable's max-age GC on the `email`
    and `user` families, the SQLite adapter's own expiry.
    """
    engine = settings.storage.templates_store
    if engine == "sqlite":
        from storage.sqlite.templates import SqliteTemplateStore

        # NORMAL, whatever [sqlite] synchronous says: Crusher tolerates losing emails (any
        # sample of a template's emails forms it) and re-forms templates from fresh ones, so
        # an fsync per micro-batch buys nothing; WAL still survives a process crash.
        return await SqliteTemplateStore.open(
            Path(settings.sqlite.data_dir) / "templates.sqlite3",
            email_ttl_s=email_ttl_s,
            synchronous="NORMAL",
            readers=settings.sqlite.readers,
        )
    if engine == "bigtable":
        from storage.bigtable.templates import BigtableTemplateStore

        return await BigtableTemplateStore.open(settings.bigtable, email_ttl_s=email_ttl_s)
    raise ValueError(f"templates_store={engine!r} is not supported")
