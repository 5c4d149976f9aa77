"""Every storage interface of Loom, on one page.

Domain code depends on these Protocols only; each engine package (`storage/sqlite`,
`storage/bigtable`, `storage/cassandra`, `storage/dynamodb`, ...) implements them, and one
conformance suite per port (`tests/conformance/`) runs unchanged against every adapter.
Adapters hold no business rules: they store, fetch and compare-and-set, and translate their
driver's errors into `storage.errors` exactly once.

Batch-shaped methods are deliberate: a WeaveMessages call of 1,000 messages must cost a
handful of round trips to the engine, not thousands.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "ChunkRecord",
    "ChunkState",
    "ClusterCounts",
    "ClusterWrite",
    "DeliveryRecord",
    "DeliveryState",
    "InboxEntry",
    "InboxStore",
    "IterationSource",
    "JobRecord",
    "JobStateName",
    "JobStore",
    "Key",
    "LedgerSummary",
    "MessageMapping",
    "QueuedMessage",
    "SchemaFacts",
    "SourceLevel",
    "Step",
    "StoredSummary",
    "SummaryStore",
    "TaskRecord",
    "TemplateStore",
    "ThreadKey",
    "ThreadStore",
    "UnifiedStats",
    "UtRows",
    "WorkQueue",
]


# --- ThreadWeaver ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class ThreadKey:
    """A mailbox thread: thread ids are unique only within one owner's mailbox."""

    gid: str
    thread_id: str


@dataclass(frozen=True, slots=True)
class MessageMapping:
    """Map the Message-ID keyed by `rfc_key` (its 16-byte MD5) to `ut`, if absent.

    `sent_at_ms` is stored with the mapping that wins, so the unified thread's statistics
    (distinct messages, latest message) can be read without a scan of anybody's mailbox.
    """

    rfc_key: bytes
    ut: str
    sent_at_ms: int


@dataclass(frozen=True, slots=True)
class UnifiedStats:
    """Statistics over every Message-ID mapped to a set of unified threads."""

    message_count: int
    last_message_at_ms: int | None


@dataclass(frozen=True, slots=True)
class UtRows:
    """What one level of a unified-thread read learns about a set of UTs, in one round trip."""

    links: dict[str, frozenset[str]]
    """Every UT this answer covers -> all the UTs linked to it (empty when none).

    It covers each asked UT; an engine that can walk links itself in the same round trip
    (SQLite) may cover every UT it reached too, and the caller then reads those no more.
    """
    threads: list[ThreadKey]
    """Member threads of the covered UTs (owners in the team when one is given), any order.

    At most the asked limit; fewer only when that is all of them.
    """
    stats: UnifiedStats
    """Over the Message-IDs mapped to the covered UTs."""


@runtime_checkable
class ThreadStore(Protocol):
    """Storage of Streak's threadweaver relations, plus the links that keep reads shallow.

    thread -> UT and Message-ID -> UT are written only if absent, atomically under
    concurrent writers (exactly one writer wins a key; every writer learns the winner).
    Links are an undirected graph over UTs: the seed's merges, and the shortcut edges the
    domain adds so that every UT is linked to its component's smallest UT
    (docs/ARCHITECTURE.md, "ThreadWeaver"). The reverse relations (UT -> threads,
    UT -> messages, UT -> links) are kept by the adapter in whatever shape its engine
    reads fast.

    Consistency the domain relies on, whichever process writes: once a write method has
    returned, every later read from any process or connection sees what it wrote; concurrent
    `add_links` calls never lose each other's links, and a link removed is never seen again unless
    added again (a removed link coming back later is harmless: every link joins UTs of one
    conversation). Every read method costs one round trip
    to the engine (concurrent requests at most), whatever the number of UTs asked.
    """

    async def get_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        """The UT of each thread that has one (threads without one are left out)."""
        ...

    async def put_thread_uts_if_absent(self, items: Sequence[tuple[ThreadKey, str]]) -> list[str]:
        """For each (thread, ut): map thread -> ut unless mapped; return each key's winner.

        Items naming the same thread all get the same winner.
        """
        ...

    async def put_message_uts_if_absent(self, items: Sequence[MessageMapping]) -> list[str]:
        """For each mapping: set Message-ID -> ut unless set; return each key's winner.

        When it returns, each key's winner counts in its UT's statistics (exactly once,
        with the winner's sent_at), whoever won and whatever a crashed writer left undone.
        """
        ...

    async def add_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Links each pair of UTs (idempotent, unordered; a pair (x, x) is ignored)."""
        ...

    async def remove_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Unlinks each pair (idempotent, unordered; an absent link is no error).

        The domain removes only links that have a detour through a smaller UT.
        """
        ...

    async def get_links(self, uts: Sequence[str]) -> dict[str, frozenset[str]]:
        """Every UT linked to each given UT (complete; UTs without links may be left out).

        An engine that can walk links itself in the same round trip may also report the
        complete links of UTs it reached from the given ones.
        """
        ...

    async def read_uts(
        self, uts: Sequence[str], gids: frozenset[str] | None, thread_limit: int
    ) -> UtRows:
        """Links, member threads (only owners in `gids` when given) and stats of `uts`.

        One round trip for everything a read needs of one level of the link graph.
        `thread_limit` 0 reads no threads.
        """
        ...

    async def close(self) -> None:
        """Releases connections and threads."""
        ...


# --- Summary --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """One message's encoded summary and its optimistic-concurrency version (1 on create)."""

    data: bytes
    version: int


@runtime_checkable
class SummaryStore(Protocol):
    """Opaque encoded summaries keyed by message id, written by compare-and-set on a version.

    The store never looks inside `data` (the domain owns the encoding); it only guarantees
    that of two writers who read the same version, exactly one `put_if_version` succeeds, so
    the loser re-reads and re-applies its events (Remind's summaries in DynamoDB, with a
    version attribute and a conditional PutItem).
    """

    async def get(self, message_id: str) -> StoredSummary | None:
        """The stored summary, or None when nothing was ever written for `message_id`."""
        ...

    async def put_if_version(
        self, message_id: str, data: bytes, expected_version: int | None
    ) -> bool:
        """Write `data` with version ``expected_version + 1`` (1 when creating).

        `expected_version` None means the row must not exist yet. Returns True when written,
        False when the stored version differs (someone else wrote first): never raises for
        a lost race, only for engine faults.
        """
        ...

    async def close(self) -> None:
        """Releases connections and threads."""
        ...


# --- Inbox ----------------------------------------------------------------------------


DeliveryState = Literal["running", "done", "failed"]
"""A background fan-out's state as stored (the gRPC enum is the handler's business)."""


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """One row of Yammer's second design: an inbox's thread and its mutable metadata.

    Rows are keyed by ``(inbox_id, thread_id)``; `last_message_id` only ever grows (message
    ids increase with time), which is what makes delivery idempotent and order-free.
    """

    thread_id: str
    last_message_id: int
    is_read: bool


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """Progress of one background fan-out, stored so GetDelivery survives restarts.

    Recipients are processed in a fixed order (deduplicated request order, sender left
    out), chunk by chunk, so `done` is also the resume point of a retried PostMessage.
    """

    delivery_id: str
    thread_id: str
    message_id: int
    sender_inbox_id: str
    total: int
    """Recipient inboxes to update (the sender is delivered inside the call)."""
    done: int
    """Recipient inboxes updated so far (a prefix of the ordered recipient list)."""
    state: DeliveryState
    error: str
    """Why it failed, when it did; empty otherwise."""
    updated_at_ms: int
    """Wall-clock time of the last progress write (a stalled RUNNING delivery shows it)."""


@runtime_checkable
class InboxStore(Protocol):
    """Storage of Yammer's inbox: fan-out on write, unread count materialized separately.

    Two row sets, no secondary index, no ordering that relies on deletes:

    - ``inbox``  (inbox_id, thread_id) -> last_message_id, is_read   one partition per inbox
    - ``unread`` (inbox_id, thread_id)                               one partition per inbox

    Invariant, after every call returns: a thread has an unread row iff its inbox row
    exists with ``is_read = false``. The unread count is the size of the unread partition
    (small: Yammer's P999 is < 1,000), never a scan of the inbox. The domain reads whole
    inboxes (bounded by trimming) and sorts and filters them itself; deliveries of
    background fan-outs are stored beside the inboxes.

    Cassandra notes (the adapter's business, not the contract's): LeveledCompaction on both
    inbox tables (they mutate), a short gc_grace_seconds (trimming deletes); a write made
    with ``USING TIMESTAMP`` derived from the message id makes "last_message_id = max" hold
    under any order of concurrent deliveries without a read-before-write.
    """

    async def deliver(
        self,
        thread_id: str,
        message_id: int,
        *,
        unread: Sequence[str],
        read: Sequence[str] = (),
    ) -> int:
        """Delivers message `message_id` of `thread_id` to inboxes; returns rows advanced.

        `unread` are recipients (the thread becomes unread for them), `read` the sender (it
        becomes read); all the inbox ids are distinct. Per inbox: when the row is missing or
        its last_message_id is smaller, set last_message_id = message_id and is_read, and
        insert (unread) or delete (read) its unread row in step. When last_message_id >=
        message_id (a retry or an out-of-order older message) nothing changes, so a thread
        read since is never marked unread again and no delivery is ever counted twice.
        A call carries up to ~1,000 inboxes (one fan-out chunk; a small post's sender and
        recipients together) and should cost a handful of round trips, not one per inbox.
        """
        ...

    async def deliver_unread(self, thread_id: str, message_id: int, inboxes: Sequence[str]) -> None:
        """`deliver` to recipients only, with no count: the background fan-out's call.

        The end state is `deliver(thread_id, message_id, unread=inboxes)`'s under any
        interleaving with retries, older or newer messages and marks. What differs is that
        nobody needs the count, so an engine whose ordering is carried by the writes
        themselves (Cassandra's write timestamps, `storage.cassandra.inbox_clock`) may write
        without reading first; on the 300,000-inbox announcement that read was a third of
        the node's work.
        """
        ...

    async def scan_inbox(self, inbox_id: str, limit: int) -> list[InboxEntry]:
        """The inbox's rows in no particular order, at most `limit` of them.

        Trimming keeps inboxes near their cap, so this reads a few thousand small rows at
        most. When an inbox holds more than `limit` rows, which ones come back is up to the
        engine (newest first where it can order cheaply).
        """
        ...

    async def unread_count(self, inbox_id: str) -> int:
        """Rows in the inbox's unread partition."""
        ...

    async def set_read(self, inbox_id: str, thread_ids: Sequence[str] | None, *, read: bool) -> int:
        """Sets is_read on existing rows (every row when `thread_ids` is None).

        Unknown threads are ignored (no row is created). Unread rows follow in step.
        Returns the rows whose is_read actually changed.
        """
        ...

    async def delete_entries(self, inbox_id: str, entries: Sequence[InboxEntry]) -> int:
        """Trims: deletes each named row, and its unread row, unless it advanced since.

        A row whose last_message_id is now greater than the entry's (a new message arrived
        after the trimmer read it) is kept. Returns the rows deleted.
        """
        ...

    async def create_delivery(self, record: DeliveryRecord) -> DeliveryRecord:
        """Stores `record` unless its delivery_id exists; returns the stored record."""
        ...

    async def get_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        """The stored delivery, or None."""
        ...

    async def save_delivery(self, record: DeliveryRecord) -> None:
        """Stores `record` whole, replacing any stored version (progress, state, error)."""
        ...

    async def save_recipients(self, delivery_id: str, recipients: Sequence[str]) -> None:
        """Stores the delivery's ordered recipient list (a retry stores the same list), so
        that any server can resume the fan-out after the one running it died."""
        ...

    async def load_recipients(self, delivery_id: str) -> list[str] | None:
        """The stored recipient list, in order, or None when none was stored."""
        ...

    async def unfinished_deliveries(self, limit: int) -> list[DeliveryRecord]:
        """Deliveries whose stored state is not done (running or failed), whichever server
        ran them, at most `limit` (the order is the engine's)."""
        ...

    async def claim_delivery(self, record: DeliveryRecord, expected_updated_at_ms: int) -> bool:
        """Stores `record` only if the stored record's updated_at_ms is still `expected`:
        of several servers adopting one stalled delivery, exactly one wins (True)."""
        ...

    async def close(self) -> None:
        """Releases connections and threads."""
        ...


# --- Iterator -------------------------------------------------------------------------

Key = tuple[int, ...]
"""A row's key or position: integers in the source's ORDER BY order."""


@dataclass(frozen=True, slots=True)
class SourceLevel:
    """One level of the iterated hierarchy as the source adapter needs it."""

    name: str
    table: str
    id_columns: tuple[str, ...]
    """One column for an integer id; several for a composite key (compared as a row value)."""
    parent_column: str
    """Column holding the parent's integer id; empty for the top level."""
    where: str
    """Extra SQL condition on the table's rows ("valid" rows), or empty."""


@dataclass(frozen=True, slots=True)
class SchemaFacts:
    """What the live source database says about the configured tables, every name spelled
    as its catalog spells it (the check compares names the way the reads will quote them)."""

    tables: frozenset[str]
    """Every table of the source's default schema."""
    columns: Mapping[str, frozenset[str]]
    """Table -> its columns, for each table whose name equals a configured one in any case."""
    indexes: Mapping[str, tuple[tuple[str, ...], ...]]
    """Table -> the column lists of its indexes and primary key (in order), same tables."""
    tables_fold_case: bool
    """Whether a read naming a table in another case finds it (SQLite; MySQL with
    ``lower_case_table_names`` set). False: only the exact name does (PostgreSQL, where
    the reads quote mixed-case names; MySQL on Linux by default)."""
    columns_fold_case: bool
    """The same for columns (SQLite and MySQL: yes; PostgreSQL: no)."""


@runtime_checkable
class IterationSource(Protocol):
    """The iterated relational database, read by keyset only (never a scan, never OFFSET
    except for split probes).

    Two shapes of read, both ordered and bounded by exclusive positions:

    - **bounded** (`parents` None): rows of a level whose id key lies in [first, last];
      a position is the id key.
    - **children** (`parents` given, sorted): rows of a level whose parent is one of
      `parents`; a position is ``(parent, *id key)``, compared as a row value. A bound may
      also be the parent alone, ``(p,)``, which sorts before every row of p (as Python
      tuples compare): ``after=(p,)`` starts at p's first row, ``upto=(p,)`` ends before it.

    Only rows satisfying the level's `where` count. Faults become `storage.errors`: a
    statement the database refuses as written (an undefined table or column, a syntax
    error) is StorageRejected, anything else StorageUnavailable.
    """

    @property
    def levels(self) -> Sequence[SourceLevel]:
        """The configured levels, top first (reads name a level by its index)."""
        ...

    async def schema(self) -> SchemaFacts:
        """Columns and indexes of the levels' tables, from the live catalog."""
        ...

    async def check_read(self, level: int) -> None:
        """Runs each statement shape of `level`'s reads once, with its `where`, returning no
        rows: StorageRejected (the database's message) when the database refuses it."""
        ...

    async def exists(self, level: int, first: Key, last: Key) -> bool:
        """Whether any row of `level` has an id key in [first, last]."""
        ...

    async def read(
        self,
        level: int,
        *,
        parents: Sequence[int] | None,
        first: Key,
        last: Key,
        after: Key,
        upto: Key,
        limit: int,
    ) -> list[Key]:
        """Up to `limit` positions > `after` and <= `upto` (empty = unbounded), in order."""
        ...

    async def probe(
        self,
        level: int,
        *,
        parents: Sequence[int] | None,
        first: Key,
        last: Key,
        after: Key,
        upto: Key,
        offset: int,
    ) -> Key | None:
        """The position `offset` rows past the first one after `after` within the same
        bounds (the seed's ``LIMIT 1 OFFSET n`` split probe), or None when fewer remain.
        A children probe names one parent."""
        ...

    async def ping(self) -> None:
        """Raises StorageUnavailable unless the database answers."""
        ...

    async def close(self) -> None:
        """Releases connections."""
        ...


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """A message taken from a work queue: invisible to others until its visibility ends."""

    body: str
    receipt: str
    """Names this delivery; deleting with a receipt of an earlier delivery does nothing."""
    receive_count: int
    """Deliveries of this message so far (1 on the first)."""


@runtime_checkable
class WorkQueue(Protocol):
    """At-least-once queues of small text messages, one per hierarchy level (SQS semantics).

    A received message is hidden for `visibility_s`; unless deleted by then it is delivered
    again (to anyone). Order is not promised. Messages survive a restart of the server.
    """

    async def send(self, queue: str, bodies: Sequence[str]) -> None:
        """Enqueues every body (all or, on a fault, raise; a retry may duplicate)."""
        ...

    async def receive(
        self, queue: str, *, max_messages: int, visibility_s: float, wait_s: float
    ) -> list[QueuedMessage]:
        """Up to `max_messages` visible messages, waiting up to `wait_s` for the first."""
        ...

    async def delete(self, queue: str, receipts: Sequence[str]) -> None:
        """Deletes the messages these receipts name (stale or unknown receipts: no-op)."""
        ...

    async def set_visibility(self, queue: str, receipt: str, visibility_s: float) -> None:
        """Hides a received message for `visibility_s` from now (0: visible at once)."""
        ...

    async def depth(self, queue: str) -> int:
        """Messages in the queue, visible or not (approximate on SQS)."""
        ...

    async def close(self) -> None:
        """Releases connections."""
        ...


JobStateName = Literal["running", "paused", "completed", "cancelled", "failed"]
"""A job's state as stored (the gRPC enum is the handler's business)."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One iteration job; replaced whole by compare-and-set on `version`."""

    job_id: str
    created_ms: int
    spec: str
    """The domain's description of the job (scope, emitted level, ...); opaque here."""
    state: JobStateName
    rate: int
    """Objects per second across every worker (0 = unlimited)."""
    paused_by: str
    """Who paused it: "" when not paused, "user", or "source" (the database was down)."""
    error: str
    finished_ms: int
    version: int


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A range of one level to read: the unit of work, its marker and its outcome.

    Messages only name a task and a step (`seq`); this record is the truth. A step reads
    one chunk after `after` and is committed by `JobStore.commit_step` only if `seq` still
    holds what the worker read (the seed's work de-duplication, as a conditional write).
    """

    task_id: str
    level: int
    parents: tuple[int, ...]
    """Sorted parent ids of a children read; empty for a bounded read."""
    first: Key
    """Bounded read: first id key (inclusive)."""
    last: Key
    """Bounded read: last id key (inclusive)."""
    after: Key
    """The marker: last position read (empty: nothing read yet)."""
    upto: Key
    """Last position of the range, inclusive (empty: none); a split lowers it."""
    seq: int
    """Steps committed so far."""
    done: bool
    rows: int
    """Rows read since the marker entered its current parent (all rows, for bounded
    reads): what tells a large parent, to be split, from a small one."""
    started_ms: int
    spawned: tuple[str, ...]
    """Tasks created by the last committed step (re-announced if that step's messages were
    lost)."""


ChunkState = Literal["ready", "leased", "delivered", "acked"]


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One emitted chunk of the ledger: the objects one step read, under a stable id."""

    chunk_id: str
    width: int
    """Integers per position in `keys` (the parent id first, for children reads)."""
    keys: bytes
    """The objects' positions, packed by the domain (opaque here)."""
    count: int
    state: ChunkState
    lease_until_ms: int
    """While leased: when it becomes available again (a re-send under the same id)."""
    sends: int
    acked_keys: bytes
    """Objects of this chunk acknowledged one by one so far (packed by the domain)."""
    version: int


@dataclass(frozen=True, slots=True)
class Step:
    """What one committed step writes, atomically: the task's new state, the tasks it
    creates, the chunk it emits and the counters it moves."""

    task: TaskRecord
    new_tasks: Sequence[TaskRecord]
    chunk: ChunkRecord | None
    counters: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """Completion as the ledger sees it, counted record by record."""

    tasks: int
    tasks_open: int
    chunks: int
    chunks_unsettled: int
    """Chunks not yet delivered (or acknowledged, for jobs that need acks)."""
    objects: int


@runtime_checkable
class JobStore(Protocol):
    """Iterator job state: jobs, task markers, counters and the chunk ledger.

    Every write that must not happen twice is conditional: `commit_step` on the task's
    `seq`, `update_job` on the job's version, leases and settlements on the chunk's state.
    Counters move only inside those writes, so they never count a duplicate.
    """

    async def create_job(
        self, job: JobRecord, root: TaskRecord, counters: Mapping[str, int]
    ) -> None:
        """Stores a new job, its first task and its initial counters together."""
        ...

    async def get_job(self, job_id: str) -> JobRecord | None:
        """The job, or None."""
        ...

    async def list_jobs(self, limit: int, before: tuple[int, str] | None) -> list[JobRecord]:
        """Up to `limit` jobs ordered by (created_ms, job_id) descending, strictly before
        `before` when given."""
        ...

    async def active_jobs(self) -> list[JobRecord]:
        """Every job that is running or paused."""
        ...

    async def update_job(self, job: JobRecord, expected_version: int) -> bool:
        """Replaces the job (version becomes expected + 1) iff its version is `expected`."""
        ...

    async def get_task(self, job_id: str, task_id: str) -> TaskRecord | None:
        """The task, or None."""
        ...

    async def open_tasks(self, job_id: str) -> list[TaskRecord]:
        """Every task of the job that is not done (for re-sending work a queue lost)."""
        ...

    async def commit_step(self, job_id: str, step: Step, expected_seq: int) -> bool:
        """Writes `step` iff the task's stored seq is `expected_seq` (else nothing, False).

        New tasks and the chunk are created, counters incremented by `step.counters`, all
        in one atomic write.
        """
        ...

    async def counters(self, job_id: str) -> dict[str, int]:
        """Every counter of the job (missing ones are zero)."""
        ...

    async def add_counters(self, job_id: str, deltas: Mapping[str, int]) -> None:
        """Increments counters (statistics that need no de-duplication)."""
        ...

    async def lease_chunks(
        self, job_id: str, *, now_ms: int, lease_ms: int, max_objects: int, max_chunks: int
    ) -> list[ChunkRecord]:
        """Leases available chunks (ready, or leased with lease_until <= now): each becomes
        leased until now + lease_ms and its `sends` grows by one. A chunk is leased by one
        caller at a time. Stops at `max_chunks` or once `max_objects` are reached (at least
        one chunk when any is available); an adapter may stop sooner (one page, one
        transaction of its engine)."""
        ...

    async def settle_chunks(
        self,
        job_id: str,
        chunk_ids: Sequence[str],
        state: ChunkState,
        counts: Mapping[str, int] | None = None,
    ) -> tuple[int, int]:
        """Moves chunks that are not yet delivered/acked to `state` ("delivered" or "acked");
        returns (chunks, objects) newly settled and adds them to the counters
        ``<state>_chunks`` / ``<state>_objects`` in the same write. Unknown ids are ignored.
        `counts` (chunk id -> object count, as leased) may spare the adapter a read; a count
        that is not the chunk's is never applied."""
        ...

    async def leased_chunks(self, job_id: str, limit: int) -> list[ChunkRecord]:
        """Chunks sent and not settled (for acknowledging objects by id)."""
        ...

    async def save_chunk_acks(self, job_id: str, chunk: ChunkRecord, expected_version: int) -> bool:
        """Stores `chunk.acked_keys` iff the chunk's version is `expected_version`."""
        ...

    async def ledger(self, job_id: str, *, settled: ChunkState) -> LedgerSummary:
        """Counts the job's task and chunk records; unsettled = not in `settled` state."""
        ...

    async def reserve(self, job_id: str, objects: int, rate: float, now_ms: int) -> float:
        """Rate limiting shared by every worker of every replica (GCRA): books `objects`
        at `rate` per second and returns how long the caller must wait before using them."""
        ...

    async def close(self) -> None:
        """Releases connections."""


# --- TemplateInduction ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterWrite:
    """Store email `email_id` (opaque `payload`) sent to `user` in cluster row `key`."""

    key: bytes
    email_id: str
    user: bytes
    """A keyed hash of the recipient: the store never sees a recipient id."""
    payload: bytes


@dataclass(frozen=True, slots=True)
class ClusterCounts:
    """Algorithm 2's fetch after a store: s, n and t of one row (live cells only)."""

    emails: int
    """s: emails in the row."""
    users: int
    """n: distinct recipients in the row."""
    template_at_ms: int | None
    """t: when the row's templates were (last) formed; None when it has none."""


@runtime_checkable
class TemplateStore(Protocol):
    """Crusher's templates table: one row per cluster key, three column families.

    - ``email``     email id -> opaque payload        expires `email_ttl_s` after its write
    - ``user``      recipient hash -> (empty)          expires likewise; its size is n
    - ``template``  the row's encoded templates, their formation time and sender

    Emails and users expire (Bigtable: max-age GC on both families; SQLite: the adapter
    hides and deletes expired cells), templates do not: a template outlives the emails it
    was formed from and is re-formed from fresh ones. Writing the same email id or user
    twice into a row changes nothing but its expiry. The store holds no business rule:
    k, the row cap and re-formation are the domain's.
    """

    async def add_emails(
        self,
        writes: Sequence[ClusterWrite],
        counted: Collection[bytes] | None = None,
        cap: int | None = None,
    ) -> dict[bytes, ClusterCounts]:
        """Stores every write (email and user cells), then returns s, n, t of the rows in
        `counted` (default: every row written; rows need not have been written).

        With `cap` (>= 1), s and n are each min(true count, cap): the caller only asks
        whether a threshold is reached, so an engine never reads more than `cap` cells of a
        family.
        One call carries a micro-batch of emails and should cost a few round trips (none
        for counting when `counted` is empty).
        """
        ...

    async def get_emails(self, key: bytes, limit: int) -> list[bytes]:
        """Payloads of up to `limit` live emails of row `key` (any order)."""
        ...

    async def put_templates(self, key: bytes, data: bytes, sender: str, formed_at_ms: int) -> None:
        """Replaces row `key`'s templates with `data` (formed at `formed_at_ms`)."""
        ...

    async def get_templates(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The encoded templates of each row that has any (rows without are left out)."""
        ...

    async def list_templates(
        self, after: bytes | None, limit: int, sender: str | None
    ) -> list[tuple[bytes, bytes]]:
        """Up to `limit` (key, templates) rows with templates, in key order after `after`.

        With `sender`, only rows whose templates belong to that sender.
        """
        ...

    async def close(self) -> None:
        """Releases connections and threads."""
        ...
