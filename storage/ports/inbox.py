"""Inbox's port: Yammer's fan-out-on-write rows, the materialized unread count, deliveries.

The records are the rows themselves (an inbox's thread, a background fan-out's progress);
ordering, filtering and trimming policy are the domain's.

`InboxStore` is what serving needs; `InboxPortability` the scans only ``loom dump`` reads;
every adapter is both, a `PortableInboxStore`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from storage.ports.inbox_changes import InboxChangeLog

__all__ = [
    "DeletedThread",
    "DeliveryRecord",
    "DeliveryState",
    "InboxEntry",
    "InboxOperation",
    "InboxPortability",
    "InboxStore",
    "PendingDeletion",
    "PortableInboxStore",
    "SweepStep",
]


DeliveryState = Literal["running", "done", "failed"]
"""A background fan-out's state as stored (the gRPC enum is the handler's business)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxEntry:
    """One row of Yammer's second design: an inbox's thread and its mutable metadata.

    Rows are keyed by ``(inbox_id, thread_id)``; `last_message_id` only ever grows (message
    ids increase with time), which is what makes delivery idempotent and order-free.
    """

    thread_id: str
    last_message_id: int
    is_read: bool


@dataclass(frozen=True, slots=True, kw_only=True)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxOperation:
    """A background operation of the inbox (the removal of deleted threads' rows)."""

    operation_id: str
    kind: str
    state: DeliveryState
    done: int
    """Units of the store's walk done (rows on SQLite, thousandths of the token ring on
    Cassandra: `SweepStep`)."""
    total: int
    error: str
    updated_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingDeletion:
    """A deleted thread whose rows may still exist: reads skip it until it is swept."""

    thread_id: str
    operation_id: str
    deleted_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepStep:
    """One step of the walk that removes deleted threads' rows from the whole store."""

    removed: int
    """Inbox rows removed by this step."""
    cursor: str | None
    """Where the next step starts; None when the walk has covered the whole store."""
    done: int
    """Progress of the walk so far, in the engine's units (of `total`)."""
    total: int


class InboxStore(InboxChangeLog, Protocol):
    """Storage of Yammer's inbox: fan-out on write, unread count materialized separately.

    Two row sets, no secondary index, no ordering that relies on deletes:

    - ``inbox``  (inbox_id, thread_id) -> last_message_id, is_read   one partition per inbox
    - ``unread`` (inbox_id, thread_id)                               one partition per inbox

    Invariant, after every call returns: a thread has an unread row iff its inbox row
    exists with ``is_read = false``. The unread count is the size of the unread partition
    (small: Yammer's P999 is < 1,000), never a scan of the inbox. The domain reads whole
    inboxes (bounded by trimming) and sorts and filters them itself; deliveries of
    background fan-outs are stored beside the inboxes.

    Every call that changes an inbox (`deliver`, `deliver_unread`, `set_read`,
    `delete_entries`, `remove_threads`, `delete_inbox`, `sweep_deleted`) appends the change to
    that inbox's log (`storage.ports.inbox_changes`): `delivered` for each row it advanced
    (an engine that writes blind logs every inbox it wrote), `marked_read`/`marked_unread`,
    `removed` (trimmed or removed rows), `deleted` (rows of deleted threads);
    `delete_inbox` erases the inbox's log and logs nothing (a row naming an erased inbox
    would outlive its erasure).

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
        """Rows in the inbox's unread partition, net of deleted threads.

        A thread marked deleted (`mark_deleted`) is not counted from the moment the mark
        returns, whether or not its rows were swept yet: an engine counts net of its pending
        deletions (at least; SQLite nets every deleted thread).
        """
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

    async def remove_threads(self, inbox_id: str, thread_ids: Sequence[str]) -> int:
        """Deletes the inbox's rows (entry and unread) of `thread_ids`; returns the entries
        removed. A later delivery of a message newer than the row's last one creates the
        row anew (unread). Threads the inbox does not hold are ignored."""
        ...

    async def delete_inbox(self, inbox_id: str) -> int:
        """Erases the inbox: all of its rows and unread rows, and the delivery records it
        sent; returns the entries it held. An engine that keeps deleted bytes in its files
        scrubs them before returning. A later delivery of a newer message starts the inbox
        anew."""
        ...

    async def mark_deleted(
        self, thread_ids: Sequence[str], operation_id: str, deleted_at_ms: int
    ) -> None:
        """Records `thread_ids` as deleted, durably (a thread stays deleted for ever:
        `deleted_threads`), and as pending for `operation_id` (`pending_deletions`) until
        `finish_deletions`. From its return every replica's `unread_count` excludes them."""
        ...

    async def deleted_threads(self, thread_ids: Sequence[str]) -> set[str]:
        """Which of `thread_ids` were ever marked deleted (a post to one is refused)."""
        ...

    async def pending_deletions(self) -> list[PendingDeletion]:
        """The deleted threads whose rows may still exist (a small set: a sweep drains it)."""
        ...

    async def sweep_deleted(
        self, thread_ids: Collection[str], cursor: str | None, page: int
    ) -> SweepStep:
        """Walks about `page` inbox rows of the whole store from `cursor` (None: the start)
        and removes those (and their unread rows) of `thread_ids`. Repeated until the step's
        cursor is None, every row of those threads that existed when the walk started is
        gone; the last step also deletes the threads' delivery records (and their recipient
        lists). Idempotent: a walk restarted from None removes nothing twice."""
        ...

    async def finish_deletions(self, swept: Sequence[PendingDeletion]) -> None:
        """Drops `swept` from the pending deletions (their walk completed). Pending rows
        marked since (for the same threads or others) stay."""
        ...

    async def get_operation(self, operation_id: str) -> InboxOperation | None:
        """The stored operation, or None."""
        ...

    async def save_operation(self, record: InboxOperation) -> None:
        """Stores `record` whole, replacing any stored version."""
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

    async def drop_recipients(self, delivery_id: str) -> None:
        """Deletes the delivery's stored recipient list (a done delivery needs it no more,
        and it names inboxes an erasure must not leave behind). Nothing stored: a no-op."""
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


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletedThread:
    """A deleted thread's marker (kept for ever: a post to the thread is refused)."""

    thread_id: str
    operation_id: str
    deleted_at_ms: int


class InboxPortability(Protocol):
    """The InboxStore's whole-store scans: what ``loom dump`` streams, nothing serves.

    Kept apart from `InboxStore` so only the data-portability code (`server.inbox.portable`)
    sees them. A scan is no coroutine method: `server.runtime.guard` does not put it behind
    the engine's breaker.
    """

    def scan_entries(self, page: int) -> AsyncIterator[list[tuple[str, InboxEntry]]]:
        """Every inbox row exactly once as (inbox_id, entry), in pages of 1..`page` (any order).

        What ``loom dump`` streams: each entry carries the newest message and the read flag
        the row holds when its page is read. The unread rows are not scanned: they are
        derived (a thread is unread iff its entry says ``is_read = false``), and a load
        rebuilds them. An empty store yields nothing (never an empty page); `page` < 1 is
        a ValueError.

        Memory is bounded by `page`: the engine is read one page at a time (SQLite by
        keyset on the primary key, one short read per page; Cassandra by its paging
        state), never the whole table at once. On a distributed engine the scan is not a
        point-in-time snapshot: a row written, advanced or trimmed while the scan runs may
        appear in either state or not at all, while every row left untouched throughout
        appears exactly once. Quiesce writers first for an exact copy.
        """
        ...

    def scan_deliveries(self, page: int) -> AsyncIterator[list[DeliveryRecord]]:
        """Every stored delivery record exactly once, in pages of 1..`page` (any order).

        Done, running and failed deliveries alike (their recipient lists are not part of
        it). Same bounds and caveats as `scan_entries`: memory bounded by `page`, nothing
        yielded for an empty store, and on a distributed engine no point-in-time snapshot
        (a delivery saved during the scan may show either its old or its new progress).
        """
        ...

    def scan_deleted_threads(self, page: int) -> AsyncIterator[list[DeletedThread]]:
        """Every deleted-thread marker exactly once, in pages of 1..`page` (any order): a
        dump carries them so a thread deleted on the source stays deleted on the target.
        Same bounds and caveats as `scan_entries`."""
        ...


class PortableInboxStore(InboxStore, InboxPortability, Protocol):
    """An InboxStore with its scans: what every adapter is, and what `storage.factory` opens."""
