"""Rows of the Cassandra inbox: the schema, and decoding of what the driver returns.

Kept apart from `storage.cassandra.inbox` so the store reads as the algorithm it is.
The inbox table mutates (every delivery overwrites a row, marks flip it, trims delete it),
so it uses LeveledCompaction: a row's versions sit in few SSTables and a read touches one
or two. gc_grace_seconds is 3 h instead of 10 days so trim and mark-read tombstones stop
weighing on reads (an unread COUNT(*) walks them) soon; 3 h equals the default
max_hint_window, so a hinted write can never resurrect a purged row.
"""

from __future__ import annotations

from storage.cassandra.session import Row
from storage.cassandra.store import integer, text
from storage.errors import StorageCorrupt
from storage.ports import DeliveryRecord

__all__ = [
    "DELIVERY_COLUMNS",
    "ENTRY",
    "LEGACY_TABLES",
    "TABLES",
    "UNREAD",
    "delivery_record",
    "delivery_values",
    "integer",
    "text",
]


_MUTABLE = "WITH compaction = {'class': 'LeveledCompactionStrategy'} AND gc_grace_seconds = 10800"
UNREAD = 0
"""`inbox.kind` of a thread's unread marker: the rows GetUnreadCount counts. First in the
partition's clustering order, so the count reads the head of the partition and stops."""
ENTRY = 1
"""`inbox.kind` of a thread's inbox entry (last_message_id, is_read): what ListInbox reads."""
TABLES = (
    # One partition per inbox holds both kinds of row, so a delivery writes an inbox's entry
    # and its unread marker in one mutation (``kind IN (0, 1)``), not one per table.
    "CREATE TABLE IF NOT EXISTS {ks}.inbox (inbox_id text, kind tinyint, thread_id text, "
    "last_message_id bigint, is_read boolean, PRIMARY KEY ((inbox_id), kind, thread_id)) "
    + _MUTABLE,
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_deliveries (delivery_id text PRIMARY KEY, "
    "thread_id text, message_id bigint, sender_inbox_id text, total bigint, done bigint, "
    "state text, error text, updated_at_ms bigint) "
    "WITH compaction = {'class': 'LeveledCompactionStrategy'}",
    # A fan-out's recipients, so any server can resume it (`storage.idlists` parts).
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_delivery_recipients (delivery_id text, part int, "
    "data blob, PRIMARY KEY ((delivery_id), part))",
    # The deliveries not done yet, one small partition (a few dozen rows at most): what a
    # starting server scans for stalled fan-outs to adopt, without a secondary index.
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_unfinished (shard int, delivery_id text, "
    "PRIMARY KEY ((shard), delivery_id)) WITH gc_grace_seconds = 10800",
)
LEGACY_TABLES = ("inbox_entries", "inbox_unread")
"""Where Loom kept inboxes before the one-table layout (an entry table and an unread table,
two mutations per delivered inbox). A keyspace holding them is refused at open rather than
served empty: `storage.cassandra.inbox.CassandraInboxStore.on_session`."""
DELIVERY_COLUMNS = (
    "delivery_id, thread_id, message_id, sender_inbox_id, total, done, state, error, updated_at_ms"
)


def delivery_values(r: DeliveryRecord) -> tuple[object, ...]:
    return (
        r.delivery_id, r.thread_id, r.message_id, r.sender_inbox_id,
        r.total, r.done, r.state, r.error, r.updated_at_ms,
    )  # fmt: skip


def delivery_record(row: Row) -> DeliveryRecord:
    state = row.get("state")
    if state not in ("running", "done", "failed"):
        raise StorageCorrupt(f"cassandra: inbox_deliveries.state is {state!r}")
    return DeliveryRecord(
        delivery_id=text(row, "delivery_id"),
        thread_id=text(row, "thread_id"),
        message_id=integer(row, "message_id"),
        sender_inbox_id=text(row, "sender_inbox_id"),
        total=integer(row, "total"),
        done=integer(row, "done"),
        state=state,
        error=text(row, "error"),
        updated_at_ms=integer(row, "updated_at_ms"),
    )
