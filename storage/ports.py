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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "DeliveryRecord",
    "DeliveryState",
    "InboxEntry",
    "InboxStore",
    "MessageMapping",
    "StoredSummary",
    "SummaryStore",
    "ThreadKey",
    "ThreadStore",
    "UnifiedStats",
    "UtRows",
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

    async def close(self) -> None:
        """Releases connections and threads."""
        ...
