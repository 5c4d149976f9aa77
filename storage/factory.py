"""Settings -> storage adapters. The only module that knows every engine's package.

Distributed engines are imported lazily so the embedded default needs none of their
drivers to be reachable (and starts in milliseconds).
"""

from __future__ import annotations

from pathlib import Path

from storage.ports import InboxStore, SummaryStore, TemplateStore, ThreadStore
from storage.settings import EngineSettings

__all__ = ["open_inbox_store", "open_summary_store", "open_template_store", "open_thread_store"]


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
