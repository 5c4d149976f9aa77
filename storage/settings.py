"""Settings of the storage engines, beside the engines that read them.

Frozen dataclasses with a docstring per field; `server.config` loads them (defaults < TOML <
environment < flags) into its `Settings`, and `storage.factory` reads them through the
`EngineSettings` protocol, so no module under `storage/` imports from `server/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = [
    "BigtableSettings",
    "CassandraSettings",
    "DynamoDBSettings",
    "EngineSettings",
    "ReadConsistency",
    "SerialConsistency",
    "SqliteSettings",
    "SqsSettings",
    "StorageSettings",
    "WriteConsistency",
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


ReadConsistency = Literal["ONE", "LOCAL_ONE", "TWO", "THREE", "QUORUM", "LOCAL_QUORUM", "ALL"]
"""Consistency levels a read may ask for (ANY and EACH_QUORUM are writes' only)."""
WriteConsistency = Literal[
    "ANY", "ONE", "LOCAL_ONE", "TWO", "THREE", "QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"
]
"""Consistency levels a write may ask for."""
SerialConsistency = Literal["SERIAL", "LOCAL_SERIAL"]
"""Consistency of the Paxos phase of a conditional write (LWT)."""


@dataclass(frozen=True, slots=True)
class CassandraSettings:
    """Apache Cassandra (or ScyllaDB): one node or a cluster of several data centres.

    What each consistency choice survives is in docs/operations/cassandra.md. With
    LOCAL_QUORUM and LOCAL_SERIAL (the defaults) and three replicas per data centre, any one
    node of a data centre may be dead or frozen and every call still succeeds.
    """

    contact_points: tuple[str, ...] = ("127.0.0.1",)
    """Seed hosts (the driver discovers the rest of the cluster from them)."""
    port: int = 9042
    """Native protocol port."""
    keyspace: str = "loom"
    """Keyspace of every Loom table."""
    replication: Mapping[str, int] = field(default_factory=dict)
    """NetworkTopologyStrategy replicas per data centre, ``{dc1 = 3, dc2 = 3}`` (environment:
    ``dc1=3,dc2=3``), used when the keyspace is created; every data centre named must exist
    in the cluster. Empty: SimpleStrategy with `replication_factor`."""
    replication_factor: int = 1
    """SimpleStrategy factor when `replication` is empty (a single data centre)."""
    local_dc: str = ""
    """The data centre this server runs in: statements are coordinated by its nodes only
    (token-aware within it); LOCAL_* levels count its replicas. Empty: the data centre of the
    first contact point. Must be a data centre the cluster has."""
    read_consistency: ReadConsistency = "LOCAL_QUORUM"
    """Consistency of every read."""
    write_consistency: WriteConsistency = "LOCAL_QUORUM"
    """Consistency of every write (and of the commit phase of a conditional write)."""
    serial_consistency: SerialConsistency = "LOCAL_SERIAL"
    """Consistency of the Paxos phase of every conditional write."""
    username: str = ""
    """Login role (PasswordAuthenticator); empty for a cluster without authentication."""
    password: str = ""
    """Password of `username` (set it through LOOM_CASSANDRA__PASSWORD, not a file in git)."""
    tls_ca_file: str = ""
    """PEM bundle of the CA that signed the nodes' certificates: TLS to the cluster, with the
    node's address checked against its certificate. Empty: plaintext."""
    tls_cert_file: str = ""
    """PEM client certificate, for a cluster that requires one (with `tls_key_file`)."""
    tls_key_file: str = ""
    """PEM key of `tls_cert_file`."""
    create_schema: bool = False
    """Create the keyspace and tables at start-up (waits until every node agrees on them)."""
    request_timeout_s: float = 5.0
    """Driver-side bound of one statement, its speculative executions and retries included.
    A conditional write has two attempts of half of it each, the second on another
    coordinator, so a coordinator that went silent costs half the budget, not the call."""
    speculative_delay_s: float = 0.1
    """An idempotent statement (every read, every plain upsert; never a conditional write)
    unanswered after this long is sent to the next replica too, and the first answer wins:
    a frozen or slow node costs this delay instead of the call. 0 turns it off."""
    speculative_attempts: int = 1
    """Extra executions an idempotent statement may get, `speculative_delay_s` apart. With
    three replicas, one leaves a third node for the driver's retry when a connection dies
    under a statement (the executions share one query plan)."""
    speculative_retry: str = "MIN(99p,50ms)"
    """Each table's server-side speculative retry (with `create_schema`): a coordinator
    whose replica has not answered a read after this long asks another replica. Cassandra's
    default, ``99p``, rises with a frozen replica's own stalls, so the coordinator stops
    speculating just when it should; the cap keeps it at 50 ms at most. "" leaves the
    tables' own."""
    conditional_redirect_s: float = 1.0
    """How long a conditional write waits for its coordinator, when the data centre has
    another live node, before it is sent once more through that one (safe: of two rounds one
    applies and the other reads back what was applied). With a single node it waits half of
    `request_timeout_s`. A frozen coordinator stays in the driver's rotation until its
    heartbeat probe times out, and two such waits must fit in a weave's deadline."""
    heartbeat_s: float = 1.0
    """How often the driver probes a connection that received nothing for this long (the
    driver's default is 30 s)."""
    heartbeat_timeout_s: float = 5.0
    """How long the driver waits for a probe's answer before it marks that node down and
    routes around it: a frozen node is out of rotation within `heartbeat_s` plus this. Not
    shorter: a live node under a burst (hints replayed after a dead replica, a large fan-out)
    answered a probe in over 1 s, and marking it down put its load on the others until all
    were marked down and every call failed."""


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
class ErasureSettings:
    """The erasure log: keyed hashes of erased subjects, re-applied by restore and load."""

    log_file: str = ""
    """Its SQLite file; empty: ``erasures.sqlite3`` in the data directory. Not a store that
    ``loom backup`` copies, so an older backup never rolls it back."""
    key_file: str = ""
    """The HMAC key of the subjects' hashes (32 bytes or more); empty: ``erasure.key`` beside
    the log, created with mode 0600 at first use. Every replica and every ``loom restore`` /
    ``loom load`` must use the same key, or they cannot recognise what was erased."""


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
