"""Rows of the Cassandra inbox: the schema, and decoding of what the driver returns.

Kept apart from `storage.cassandra.inbox` so the store reads as the algorithm it is.
Both inbox tables mutate (every delivery overwrites a row, marks flip it, trims delete it),
so they use LeveledCompaction: a row's versions sit in few SSTables and a read touches one
or two. gc_grace_seconds is 3 h instead of 10 days so trim and mark-read tombstones stop
weighing on reads (an unread COUNT(*) walks them) soon; 3 h equals the default
max_hint_window, so a hinted write can never resurrect a purged row.
"""

from __future__ import annotations

from storage.cassandra.session import Row
from storage.errors import StorageCorrupt
from storage.ports import DeliveryRecord

__all__ = [
    "DELIVERY_COLUMNS",
    "TABLES",
    "UNREAD_COLUMNS",
    "delivery_record",
    "delivery_values",
    "integer",
    "slices",
    "text",
]


_MUTABLE = "WITH compaction = {'class': 'LeveledCompactionStrategy'} AND gc_grace_seconds = 10800"
TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_entries (inbox_id text, thread_id text, "
    "last_message_id bigint, is_read boolean, PRIMARY KEY ((inbox_id), thread_id)) " + _MUTABLE,
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_unread (inbox_id text, thread_id text, "
    "message_id bigint, PRIMARY KEY ((inbox_id), thread_id)) " + _MUTABLE,
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
UNREAD_COLUMNS = {"message_id": "bigint"}
"""Columns added to inbox_unread since its first version: message_id (the message that left
the thread unread) is what lets a fan-out write a row for many inboxes in one ``UPDATE …
WHERE inbox_id IN ?`` (an UPDATE needs a regular column to set; a key-only table has none).
Tables created before it get it through ``CassandraSession.ensure_columns``."""
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


def slices(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def text(row: Row, column: str) -> str:
    value = row.get(column)
    if not isinstance(value, str):
        raise StorageCorrupt(f"cassandra: column {column} holds {value!r}")
    return value


def integer(row: Row, column: str) -> int:
    value = row.get(column)
    if not isinstance(value, int) or isinstance(value, bool):
        raise StorageCorrupt(f"cassandra: column {column} holds {value!r}")
    return value
