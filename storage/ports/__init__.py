"""Every storage interface of Loom: one module per port, one import surface.

Domain code depends on these Protocols only, and imports them from here
(``from storage.ports import ThreadStore``), never from the module that defines them; each
engine package (`storage/sqlite`, `storage/bigtable`, `storage/cassandra`,
`storage/dynamodb`, ...) implements them, and one conformance suite per port
(`tests/conformance/`) runs unchanged against every adapter. Adapters hold no business
rules: they store, fetch and compare-and-set, and translate their driver's errors into
`storage.errors` exactly once.

    threads            ThreadStore       ThreadWeaver's thread/Message-ID relations and links
    summaries          SummaryStore      Summary's encoded summaries, compare-and-set
    inbox              InboxStore        Inbox rows, unread rows, background deliveries
    inbox_changes      InboxChangeLog    the per-inbox change log WatchInbox reads (in InboxStore)
    iteration_source   IterationSource   Iterator's relational source, read by keyset
    work_queue         WorkQueue         Iterator's at-least-once queues
    jobs               JobStore          Iterator's jobs, tasks, counters, chunk ledger, pace
    templates          TemplateStore     TemplateInduction's templates table
    erasures           ErasureLog        keyed hashes of erased subjects, re-applied on restore

A port whose data ``loom dump`` copies has two Protocols: the serving one above, and its
portability one (`ThreadPortability`, `SummaryPortability`, `InboxPortability`,
`TemplatePortability`: whole-store scans, and the templates' restore). Serving code sees
only the first; every adapter implements both, which `PortableThreadStore` & co. name, and
`storage.factory` opens those, so the dump code of each service gets both.

Each port's records live beside its Protocol; a record of three fields or more is
keyword-only, built by name. Batch-shaped methods are deliberate: a WeaveMessages call of
1,000 messages must cost a handful of round trips to the engine, not thousands.
"""

from __future__ import annotations

from storage.ports.erasures import Erasure, ErasureLog
from storage.ports.inbox import (
    DeletedThread,
    DeliveryRecord,
    DeliveryState,
    InboxEntry,
    InboxOperation,
    InboxPortability,
    InboxStore,
    PendingDeletion,
    PortableInboxStore,
    SweepStep,
)
from storage.ports.inbox_changes import ChangeKind, InboxChange, InboxChangeLog, LoggedChange
from storage.ports.iteration_source import (
    IterationSource,
    Key,
    Positions,
    SchemaFacts,
    SourceLevel,
)
from storage.ports.jobs import (
    ChunkRecord,
    ChunkState,
    JobRecord,
    JobStateName,
    JobStore,
    LedgerSummary,
    Step,
    TaskRecord,
)
from storage.ports.summaries import (
    PortableSummaryStore,
    StoredSummary,
    SummaryPortability,
    SummaryStore,
)
from storage.ports.templates import (
    ClusterCounts,
    ClusterWrite,
    PortableTemplateStore,
    StoredEmail,
    StoredTemplates,
    StoredUser,
    TemplatePortability,
    TemplateStore,
)
from storage.ports.threads import (
    MessageMapping,
    PortableThreadStore,
    ThreadKey,
    ThreadMessage,
    ThreadPortability,
    ThreadStore,
    UnifiedStats,
    UtRows,
)
from storage.ports.work_queue import QueuedMessage, WorkQueue

__all__ = [
    "ChangeKind",
    "ChunkRecord",
    "ChunkState",
    "ClusterCounts",
    "ClusterWrite",
    "DeletedThread",
    "DeliveryRecord",
    "DeliveryState",
    "Erasure",
    "ErasureLog",
    "InboxChange",
    "InboxChangeLog",
    "InboxEntry",
    "InboxOperation",
    "InboxPortability",
    "InboxStore",
    "IterationSource",
    "JobRecord",
    "JobStateName",
    "JobStore",
    "Key",
    "LedgerSummary",
    "LoggedChange",
    "MessageMapping",
    "PendingDeletion",
    "PortableInboxStore",
    "PortableSummaryStore",
    "PortableTemplateStore",
    "PortableThreadStore",
    "Positions",
    "QueuedMessage",
    "SchemaFacts",
    "SourceLevel",
    "Step",
    "StoredEmail",
    "StoredSummary",
    "StoredTemplates",
    "StoredUser",
    "SummaryPortability",
    "SummaryStore",
    "SweepStep",
    "TaskRecord",
    "TemplatePortability",
    "TemplateStore",
    "ThreadKey",
    "ThreadMessage",
    "ThreadPortability",
    "ThreadStore",
    "UnifiedStats",
    "UtRows",
    "WorkQueue",
]
