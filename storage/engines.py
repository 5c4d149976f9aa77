"""Which engines serve which port: one table per port, the only place that says so.

Each `Port` lists its engines; each `Engine` carries its opener (the adapter is imported
inside it, so the embedded default needs none of the distributed engines' drivers and starts
in milliseconds) and the settings it wants unless the operator sets them. Everything else
reads these tables: `server.config` validates the chosen engines and applies their defaults
while loading (so settings are final once loaded), `storage.factory` opens what the settings
name, `loom serve` offers them as choices, the conformance suites run on each of them, and
the load harness offers them too.

An engine a port does not have is refused with `UnsupportedEngine`, which names the setting
and the engines that port accepts (``storage.summary_store = 'sqs' is not supported:
SummaryStore runs on sqlite or dynamodb``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

if TYPE_CHECKING:
    from storage.ports import (
        IterationSource,
        JobStore,
        PortableInboxStore,
        PortableSummaryStore,
        PortableTemplateStore,
        PortableThreadStore,
        SourceLevel,
        WorkQueue,
    )
    from storage.settings import EngineSettings, StorageSettings

__all__ = [
    "INBOX_STORES",
    "ITERATION_SOURCES",
    "JOB_STORES",
    "PORTS",
    "SUMMARY_STORES",
    "TEMPLATE_STORES",
    "THREAD_STORES",
    "WORK_QUEUES",
    "Engine",
    "Port",
    "UnsupportedEngine",
    "engine_names",
]

OpenT = TypeVar("OpenT")
StoreT = TypeVar("StoreT")

OpenStore = Callable[["EngineSettings"], Awaitable[StoreT]]
"""How most stores open: from the settings alone."""
OpenQueue = Callable[["EngineSettings", Sequence[str]], Awaitable["WorkQueue"]]
"""The Iterator's work queues: the settings and the names of the queues (one per level)."""
OpenTemplates = Callable[["EngineSettings", float], Awaitable["PortableTemplateStore"]]
"""The TemplateStore: the settings and TemplateInduction's email TTL in seconds."""
OpenSource = Callable[
    [str, Sequence["SourceLevel"], "EngineSettings | None"], Awaitable["IterationSource"]
]
"""The Iterator's source: its URL (empty: the embedded one, in the settings' data directory)
and its levels."""


class UnsupportedEngine(ValueError):
    """A setting names an engine its port does not have: the message names the setting and
    the engines it accepts (`loom serve` stops with exit 2 before listening)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Engine(Generic[OpenT]):
    """One engine of one port."""

    name: str
    """What settings, flags and test ids call it."""
    open: OpenT
    """Opens the port's adapter on this engine (importing the adapter only then)."""
    defaults: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """Settings this engine wants unless the operator sets them, by section then field:
    applied by `server.config` while loading, below TOML, environment and flags."""
    url_schemes: tuple[str, ...] = ()
    """The URL schemes that select this engine, for a port chosen by URL (the source)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Port(Generic[OpenT]):
    """One storage port (a Protocol of `storage.ports`) and the engines that serve it."""

    port: str
    """The Protocol's name."""
    section: str
    """Settings section of the setting that chooses the engine."""
    field: str
    """That setting's field (a `StorageSettings` field when `section` is ``storage``)."""
    engines: tuple[Engine[OpenT], ...]
    """Its engines, the embedded default first."""

    @property
    def setting(self) -> str:
        """The setting that chooses the engine, as operators write it (``storage.inbox_store``)."""
        return f"{self.section}.{self.field}"

    @property
    def names(self) -> tuple[str, ...]:
        """Its engines' names, the embedded default first."""
        return tuple(engine.name for engine in self.engines)

    def engine(self, name: str) -> Engine[OpenT]:
        """The engine called `name`, or `UnsupportedEngine` naming the setting."""
        for engine in self.engines:
            if engine.name == name:
                return engine
        raise UnsupportedEngine(
            f"{self.setting} = {name!r} is not supported: {self.port} runs on {self._accepted()}"
        )

    def chosen(self, storage: StorageSettings) -> Engine[OpenT]:
        """The engine `storage` names for this port (a ``storage.*`` setting)."""
        return self.engine(str(getattr(storage, self.field)))

    def select(self, value: str) -> Engine[OpenT]:
        """The engine the port's setting `value` selects: by name, or by scheme for a port
        chosen by URL."""
        if any(engine.url_schemes for engine in self.engines):
            return self.for_url(value)
        return self.engine(value)

    def for_url(self, url: str) -> Engine[OpenT]:
        """The engine a URL selects by its scheme (a port chosen by URL: the source); an
        empty URL, the embedded default.

        The message quotes the scheme only: the rest of a URL may hold a password.
        """
        if not url:
            return self.engines[0]
        scheme = url.partition("://")[0] if "://" in url else ""
        for engine in self.engines:
            if scheme in engine.url_schemes:
                return engine
        accepted = ", ".join(
            f"{e.name} ({' or '.join(s + '://' for s in e.url_schemes)})" for e in self.engines
        )
        shown = f"scheme {scheme!r}" if scheme else "a URL without a scheme"
        raise UnsupportedEngine(
            f"{self.setting}: {shown} is not supported: {self.port} runs on {accepted}"
        )

    def _accepted(self) -> str:
        names = self.names
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


# ---------------------------------------------------------------------------------------------
# The embedded default: one SQLite file per store in the data directory.


def _sqlite_file(settings: EngineSettings, name: str) -> Path:
    return Path(settings.sqlite.data_dir) / name


async def _sqlite_threads(settings: EngineSettings) -> PortableThreadStore:
    from storage.sqlite.threads import SqliteThreadStore

    return await SqliteThreadStore.open(
        _sqlite_file(settings, "threadweaver.sqlite3"),
        synchronous=settings.sqlite.synchronous,
        readers=settings.sqlite.readers,
    )


async def _sqlite_summaries(settings: EngineSettings) -> PortableSummaryStore:
    from storage.sqlite.summaries import SqliteSummaryStore

    return await SqliteSummaryStore.open(
        _sqlite_file(settings, "summary.sqlite3"),
        synchronous=settings.sqlite.synchronous,
        readers=settings.sqlite.readers,
    )


async def _sqlite_inbox(settings: EngineSettings) -> PortableInboxStore:
    from storage.sqlite.inbox import SqliteInboxStore

    return await SqliteInboxStore.open(
        _sqlite_file(settings, "inbox.sqlite3"),
        synchronous=settings.sqlite.synchronous,
        readers=settings.sqlite.readers,
    )


async def _sqlite_templates(settings: EngineSettings, email_ttl_s: float) -> PortableTemplateStore:
    from storage.sqlite.templates import SqliteTemplateStore

    # NORMAL, whatever [sqlite] synchronous says: Crusher tolerates losing emails (any sample
    # of a template's emails forms it) and re-forms templates from fresh ones, so an fsync
    # per micro-batch buys nothing; WAL still survives a process crash.
    return await SqliteTemplateStore.open(
        _sqlite_file(settings, "templates.sqlite3"),
        email_ttl_s=email_ttl_s,
        synchronous="NORMAL",
        readers=settings.sqlite.readers,
    )


async def _sqlite_queue(settings: EngineSettings, queues: Sequence[str]) -> WorkQueue:
    from storage.sqlite.queue import SqliteWorkQueue

    del queues  # one table holds every queue
    return await SqliteWorkQueue.open(
        _sqlite_file(settings, "iterator-queue.sqlite3"), synchronous=settings.sqlite.synchronous
    )


async def _sqlite_jobs(settings: EngineSettings) -> JobStore:
    from storage.sqlite.jobs import SqliteJobStore

    return await SqliteJobStore.open(
        _sqlite_file(settings, "iterator-state.sqlite3"),
        synchronous=settings.sqlite.synchronous,
        readers=settings.sqlite.readers,
    )


# ---------------------------------------------------------------------------------------------
# The distributed engines.


async def _bigtable_threads(settings: EngineSettings) -> PortableThreadStore:
    from storage.bigtable.threads import BigtableThreadStore

    return await BigtableThreadStore.open(settings.bigtable)


async def _cassandra_threads(settings: EngineSettings) -> PortableThreadStore:
    from storage.cassandra.threads import CassandraThreadStore

    return await CassandraThreadStore.open(settings.cassandra)


async def _dynamodb_summaries(settings: EngineSettings) -> PortableSummaryStore:
    from storage.dynamodb.summaries import DynamoDBSummaryStore

    return await DynamoDBSummaryStore.open(settings.dynamodb)


async def _cassandra_inbox(settings: EngineSettings) -> PortableInboxStore:
    from storage.cassandra.inbox import CassandraInboxStore

    return await CassandraInboxStore.open(settings.cassandra)


async def _bigtable_templates(
    settings: EngineSettings, email_ttl_s: float
) -> PortableTemplateStore:
    from storage.bigtable.templates import BigtableTemplateStore

    return await BigtableTemplateStore.open(settings.bigtable, email_ttl_s=email_ttl_s)


async def _sqs_queue(settings: EngineSettings, queues: Sequence[str]) -> WorkQueue:
    from storage.sqs.queue import SqsWorkQueue

    return await SqsWorkQueue.open(settings.sqs, queues)


async def _dynamodb_jobs(settings: EngineSettings) -> JobStore:
    from storage.dynamodb.jobs import DynamoDBJobStore

    return await DynamoDBJobStore.open(settings.dynamodb)


async def _sqlite_source(
    url: str, levels: Sequence[SourceLevel], settings: EngineSettings | None
) -> IterationSource:
    """A SQLite source at `url`; with no `url`, the embedded one: a file in the data
    directory (which no other store may have made yet) with the default hierarchy's tables,
    so a fresh ``loom serve`` has something to validate. Reads go through stdlib sqlite3
    (`storage.sqlite.source`), the catalog through SQLAlchemy."""
    from storage.sqlite.source import SqliteIterationSource

    if url:
        return SqliteIterationSource.open(url, levels)
    if settings is None:
        raise ValueError("the embedded iteration source needs the settings of its data directory")
    path = _sqlite_file(settings, "iterator-source.sqlite3")
    path.parent.mkdir(parents=True, exist_ok=True)
    source = SqliteIterationSource.open(f"sqlite+aiosqlite:///{path.resolve()}", levels)
    await source.create_default_schema()
    return source


async def _postgres_source(
    url: str, levels: Sequence[SourceLevel], settings: EngineSettings | None
) -> IterationSource:
    """A PostgreSQL source: reads through asyncpg's pool (`storage.sql.postgres`), the
    catalog through SQLAlchemy."""
    from storage.sql.postgres import PostgresIterationSource

    del settings  # a server's source is named by its URL alone
    return PostgresIterationSource.open(url, levels)


async def _sql_source(
    url: str, levels: Sequence[SourceLevel], settings: EngineSettings | None
) -> IterationSource:
    """A source on a database server (MariaDB); SQLAlchemy's async Core, the URL picks the
    driver."""
    from storage.sql.source import SqlIterationSource

    del settings  # a server's source is named by its URL alone
    return SqlIterationSource.open(url, levels)


# ---------------------------------------------------------------------------------------------
# The tables.

THREAD_STORES: Final[Port[OpenStore[PortableThreadStore]]] = Port(
    port="ThreadStore",
    section="storage",
    field="threadweaver_store",
    engines=(
        Engine(name="sqlite", open=_sqlite_threads),
        Engine(name="bigtable", open=_bigtable_threads),
        Engine(name="cassandra", open=_cassandra_threads),
    ),
)

SUMMARY_STORES: Final[Port[OpenStore[PortableSummaryStore]]] = Port(
    port="SummaryStore",
    section="storage",
    field="summary_store",
    engines=(
        Engine(name="sqlite", open=_sqlite_summaries),
        Engine(name="dynamodb", open=_dynamodb_summaries),
    ),
)

INBOX_STORES: Final[Port[OpenStore[PortableInboxStore]]] = Port(
    port="InboxStore",
    section="storage",
    field="inbox_store",
    engines=(
        # SQLite: the fan-out is the server's own CPU (one writer thread), so it is paced to
        # leave a core's worth of room for interactive calls; one chunk at a time.
        Engine(
            name="sqlite",
            open=_sqlite_inbox,
            defaults={
                "inbox": {
                    "fanout_rate_per_s": 50_000.0,
                    "fanout_chunks_in_flight": 1,
                    "watch_poll_s": 0.05,
                }
            },
        ),
        # Cassandra: the node does the work; several chunks hide round trips, and the store
        # itself bounds its delivery requests (`DELIVERY_GROUPS_IN_FLIGHT`).
        Engine(
            name="cassandra",
            open=_cassandra_inbox,
            defaults={
                "inbox": {
                    "fanout_rate_per_s": 0.0,
                    "fanout_chunks_in_flight": 4,
                    "watch_poll_s": 0.2,
                }
            },
        ),
    ),
)

TEMPLATE_STORES: Final[Port[OpenTemplates]] = Port(
    port="TemplateStore",
    section="storage",
    field="templates_store",
    engines=(
        Engine(name="sqlite", open=_sqlite_templates),
        Engine(name="bigtable", open=_bigtable_templates),
    ),
)

ITERATION_SOURCES: Final[Port[OpenSource]] = Port(
    port="IterationSource",
    section="iterator",
    field="source_url",
    engines=(
        Engine(name="sqlite", open=_sqlite_source, url_schemes=("sqlite+aiosqlite",)),
        Engine(name="postgres", open=_postgres_source, url_schemes=("postgresql+asyncpg",)),
        Engine(
            name="mariadb", open=_sql_source, url_schemes=("mysql+aiomysql", "mariadb+aiomysql")
        ),
    ),
)

WORK_QUEUES: Final[Port[OpenQueue]] = Port(
    port="WorkQueue",
    section="storage",
    field="iterator_queue",
    engines=(
        Engine(name="sqlite", open=_sqlite_queue),
        Engine(name="sqs", open=_sqs_queue),
    ),
)

JOB_STORES: Final[Port[OpenStore[JobStore]]] = Port(
    port="JobStore",
    section="storage",
    field="iterator_state",
    engines=(
        Engine(name="sqlite", open=_sqlite_jobs),
        Engine(name="dynamodb", open=_dynamodb_jobs),
    ),
)

PORTS: Final[tuple[Port[Any], ...]] = (
    THREAD_STORES,
    SUMMARY_STORES,
    INBOX_STORES,
    TEMPLATE_STORES,
    ITERATION_SOURCES,
    WORK_QUEUES,
    JOB_STORES,
)
"""Every port (the layering test and test-engine selection walk them all)."""


def engine_names() -> tuple[str, ...]:
    """Every engine of every port, once each, in first-seen order (test selection)."""
    return tuple(dict.fromkeys(name for port in PORTS for name in port.names))
