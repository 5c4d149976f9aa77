"""Settings of the storage engines, beside the engines that read them.

Frozen dataclasses with a docstring per field; `server.config` loads them (defaults < TOML <
environment < flags) into its `Settings`, and `storage.factory` reads them through the
`EngineSettings` protocol, so no module under `storage/` imports from `server/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = [
    "BigtableSettings",
    "CassandraSettings",
    "DynamoDBSettings",
    "EngineSettings",
    "SqliteSettings",
    "SqsSettings",
    "StorageSettings",
]


@dataclass(frozen=True, slots=True)
class SqliteSettings:
    """The embedded engine."""

    data_dir: str = "./data"
    """Directory of the SQLite files (created when missing)."""
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    """FULL survives power loss; NORMAL (WAL) survives a process crash only."""
    readers: int = 4
    """Reader threads (WAL lets readers run beside the single writer)."""


@dataclass(frozen=True, slots=True)
class BigtableSettings:
    """Cloud Bigtable (or its emulator, through BIGTABLE_EMULATOR_HOST)."""

    project: str = "loom"
    """GCP project id."""
    instance: str = "loom"
    """Bigtable instance id."""
    table_prefix: str = "loom-"
    """Prefix of every table Loom owns."""
    create_tables: bool = False
    """Create missing tables and families at start-up (emulator, first deploy)."""
    request_timeout_s: float = 4.0
    """Bound of every Bigtable operation, retries included (below the RPCs' 5 s deadlines)."""


@dataclass(frozen=True, slots=True)
class CassandraSettings:
    """Apache Cassandra (or ScyllaDB)."""

    contact_points: tuple[str, ...] = ("127.0.0.1",)
    """Seed hosts."""
    port: int = 9042
    """Native protocol port."""
    keyspace: str = "loom"
    """Keyspace of every Loom table."""
    replication_factor: int = 1
    """SimpleStrategy factor used when the keyspace is created."""
    create_schema: bool = False
    """Create the keyspace and tables at start-up."""
    request_timeout_s: float = 5.0
    """Driver-side timeout per statement."""


@dataclass(frozen=True, slots=True)
class DynamoDBSettings:
    """Amazon DynamoDB (or DynamoDB Local, through endpoint_url)."""

    endpoint_url: str = ""
    """Empty for AWS itself; http://127.0.0.1:18000 for DynamoDB Local."""
    region: str = "us-east-1"
    """AWS region."""
    table_prefix: str = "loom-"
    """Prefix of every table Loom owns."""
    create_tables: bool = False
    """Create missing tables at start-up."""


@dataclass(frozen=True, slots=True)
class SqsSettings:
    """Amazon SQS (or ElasticMQ, through endpoint_url): the Iterator's work queues."""

    endpoint_url: str = ""
    """Empty for AWS itself; http://127.0.0.1:19324 for ElasticMQ."""
    region: str = "us-east-1"
    """AWS region."""
    queue_prefix: str = "loom-"
    """Prefix of every queue Loom owns (one queue per hierarchy level)."""
    create_queues: bool = False
    """Create missing queues at start-up, and again if one disappears while serving."""


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """Which engine each service stores its state in.

    The engines each field accepts are its port's table in `storage.engines` (the embedded
    sqlite is every port's default); `server.config` refuses any other while loading.
    """

    threadweaver_store: str = "sqlite"
    """ThreadWeaver's ThreadStore (`storage.engines.THREAD_STORES`)."""
    summary_store: str = "sqlite"
    """Summary's SummaryStore (`storage.engines.SUMMARY_STORES`)."""
    inbox_store: str = "sqlite"
    """Inbox's InboxStore (`storage.engines.INBOX_STORES`)."""
    iterator_queue: str = "sqlite"
    """The Iterator's work queues (`storage.engines.WORK_QUEUES`)."""
    iterator_state: str = "sqlite"
    """The Iterator's jobs, markers, counters and chunk ledger (`storage.engines.JOB_STORES`)."""
    templates_store: str = "sqlite"
    """TemplateInduction's TemplateStore (`storage.engines.TEMPLATE_STORES`)."""


class EngineSettings(Protocol):
    """What `storage.factory` needs to open any store (`server.config.Settings` has it)."""

    @property
    def storage(self) -> StorageSettings:
        """Which engine each service stores its state in."""
        ...

    @property
    def sqlite(self) -> SqliteSettings:
        """The embedded engine."""
        ...

    @property
    def bigtable(self) -> BigtableSettings:
        """Cloud Bigtable."""
        ...

    @property
    def cassandra(self) -> CassandraSettings:
        """Apache Cassandra."""
        ...

    @property
    def dynamodb(self) -> DynamoDBSettings:
        """Amazon DynamoDB."""
        ...

    @property
    def sqs(self) -> SqsSettings:
        """Amazon SQS."""
        ...
