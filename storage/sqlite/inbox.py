"""InboxStore on the embedded SQLite engine.

The tables are Yammer's second design, one SQLite file of its own (so fan-out writes never
queue behind another service's writer thread):

    inbox_entry    (inbox_id, thread_id) -> last_message_id, is_read
    inbox_unread   (inbox_id, thread_id)          the materialized unread count
    inbox_delivery (delivery_id) -> progress of a background fan-out
    inbox_delivery_recipients (delivery_id, part) -> its recipients (`storage.idlists`)

the deletion tables of `storage.sqlite.inbox_deletes` (deleted threads, pending sweeps,
operations), and the change log of `storage.sqlite.inbox_changes`, appended by each write
transaction below.

Both inbox tables are clustered by their primary key (WITHOUT ROWID), so an inbox or its
unread set is one contiguous range; there is no secondary index. Every write is one
IMMEDIATE transaction on the single writer thread, so the unread rows always move in the
same transaction as the inbox rows. A delivery chunk is two set-shaped statements:

    upsert inbox_entry      ... DO UPDATE ... WHERE excluded.last_message_id > old one
    sync   inbox_unread     for rows whose last_message_id is now this message

which is idempotent (a retry finds last_message_id already equal and changes nothing)
and order-free (an older message never overwrites a newer one).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from storage.idlists import decode_parts, encode_parts
from storage.ports import ChangeKind, DeletedThread, DeliveryRecord, InboxChange, InboxEntry
from storage.slices import slices
from storage.sqlite import versions
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.inbox_changes import (
    CHANGE_SCHEMA,
    SqliteInboxChanges,
    log_changes,
    log_delivered,
    removed_changes,
)
from storage.sqlite.inbox_deletes import DELETION_SCHEMA, SqliteInboxDeletes, deleted_among

__all__ = ["SqliteInboxStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox_entry (
    inbox_id TEXT NOT NULL, thread_id TEXT NOT NULL,
    last_message_id INTEGER NOT NULL, is_read INTEGER NOT NULL,
    PRIMARY KEY (inbox_id, thread_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox_unread (
    inbox_id TEXT NOT NULL, thread_id TEXT NOT NULL,
    PRIMARY KEY (inbox_id, thread_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox_delivery (
    delivery_id TEXT NOT NULL PRIMARY KEY, thread_id TEXT NOT NULL,
    message_id INTEGER NOT NULL, sender_inbox_id TEXT NOT NULL,
    total INTEGER NOT NULL, done INTEGER NOT NULL, state TEXT NOT NULL,
    error TEXT NOT NULL, updated_at_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox_delivery_recipients (
    delivery_id TEXT NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (delivery_id, part)) WITHOUT ROWID;
"""

# Each statement takes the chunk's inbox ids as one JSON array and loops inside SQLite
# (json_each): binding 1,000 rows one by one held the GIL per row, and under a flood of
# announcements that starved the event loop of the unread counts (the isolation test).
# The UPSERT's "WHERE true" resolves the parser ambiguity of INSERT ... SELECT ... ON CONFLICT.
_UPSERT = (
    "INSERT INTO inbox_entry (inbox_id, thread_id, last_message_id, is_read) "
    "SELECT value, ?2, ?3, ?4 FROM json_each(?1) WHERE true "
    "ON CONFLICT (inbox_id, thread_id) DO UPDATE SET "
    "last_message_id = excluded.last_message_id, is_read = excluded.is_read "
    "WHERE excluded.last_message_id > inbox_entry.last_message_id"
)
# Only rows this message now owns (last_message_id equal) move their unread row; a row
# marked read or unread by its owner since keeps the owner's choice on a retry.
_ADD_UNREAD = (
    "INSERT OR IGNORE INTO inbox_unread (inbox_id, thread_id) "
    "SELECT e.inbox_id, e.thread_id FROM json_each(?1) j JOIN inbox_entry e "
    "ON e.inbox_id = j.value AND e.thread_id = ?2 "
    "WHERE e.last_message_id = ?3 AND e.is_read = 0"
)
_DROP_UNREAD = (
    "DELETE FROM inbox_unread WHERE thread_id = ?2 AND inbox_id IN ("
    "SELECT e.inbox_id FROM json_each(?1) j JOIN inbox_entry e "
    "ON e.inbox_id = j.value AND e.thread_id = ?2 "
    "WHERE e.last_message_id = ?3 AND e.is_read = 1)"
)
# Derived from the record so a row and `dataclasses.astuple(record)` always line up.
_DELIVERY_COLUMNS = ", ".join(f.name for f in dataclasses.fields(DeliveryRecord))

T = TypeVar("T")
_CHUNK = 500  # bound parameters per IN (...) list, well under SQLite's limit


def _record(row: tuple[object, ...]) -> DeliveryRecord:
    d, t, m, s, total, done, state, error, at = row
    return DeliveryRecord(
        delivery_id=str(d),
        thread_id=str(t),
        message_id=int(str(m)),
        sender_inbox_id=str(s),
        total=int(str(total)),
        done=int(str(done)),
        state=state,  # type: ignore[arg-type]
        error=str(error),
        updated_at_ms=int(str(at)),
    )


def _page_size(page: int) -> int:
    if page < 1:
        raise ValueError(f"scan page must be at least 1, not {page}")
    return page


def _select(sql: str, params: tuple[Any, ...]) -> Callable[[sqlite3.Connection], list[Any]]:
    def run(conn: sqlite3.Connection) -> list[Any]:
        return conn.execute(sql, params).fetchall()

    return run


async def _keyset_pages(
    db: SqliteDatabase, table: str, columns: Sequence[str], key_width: int, page: int
) -> AsyncIterator[list[tuple[Any, ...]]]:
    """`table`'s rows in primary-key order, in non-empty pages of at most `page`.

    The first `key_width` of `columns` are the primary key. Keyset pagination: each page is
    one short read starting after the previous page's last key, so no cursor (nor read
    transaction) is held between pages, the writer never waits behind a dump, and memory
    holds one page.
    """
    if page < 1:
        raise ValueError(f"scan page must be at least 1, not {page}")
    key = ", ".join(columns[:key_width])
    after: tuple[Any, ...] = ()
    while True:
        where = f"WHERE ({key}) > ({', '.join('?' * key_width)}) " if after else ""
        sql = f"SELECT {', '.join(columns)} FROM {table} {where}ORDER BY {key} LIMIT ?"
        rows = await db.read(_select(sql, (*after, page)))
        if rows:
            yield rows
        if len(rows) < page:
            return
        after = tuple(rows[-1][:key_width])


class SqliteInboxStore(SqliteInboxDeletes, SqliteInboxChanges):
    """`storage.ports.InboxStore` on one SQLite file."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    @classmethod
    async def open(
        cls, path: Path, *, synchronous: str = "FULL", readers: int = 4
    ) -> SqliteInboxStore:
        """Opens (creating when missing) the database at `path`."""
        db = SqliteDatabase(path, synchronous=synchronous, readers=readers)
        await db.migrate(_SCHEMA + DELETION_SCHEMA + CHANGE_SCHEMA, versions.INBOX)
        return cls(db)

    async def deliver(
        self,
        thread_id: str,
        message_id: int,
        *,
        unread: Sequence[str],
        read: Sequence[str] = (),
    ) -> int:
        groups = [(inboxes, flag) for inboxes, flag in ((unread, False), (read, True)) if inboxes]
        if not groups:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            advanced = 0
            for inboxes, flag in groups:
                ids = json.dumps(list(inboxes))
                log_delivered(conn, ids, thread_id, message_id)
                before = conn.total_changes
                conn.execute(_UPSERT, (ids, thread_id, message_id, int(flag)))
                if conn.total_changes != before:
                    advanced += conn.total_changes - before
                    conn.execute(
                        _DROP_UNREAD if flag else _ADD_UNREAD, (ids, thread_id, message_id)
                    )
            return advanced

        return await self._db.write(run)

    async def deliver_unread(self, thread_id: str, message_id: int, inboxes: Sequence[str]) -> None:
        # One conditional statement either way: the count comes for free here.
        await self.deliver(thread_id, message_id, unread=inboxes)

    async def scan_inbox(self, inbox_id: str, limit: int) -> list[InboxEntry]:
        def run(conn: sqlite3.Connection) -> list[InboxEntry]:
            cursor = conn.execute(
                "SELECT thread_id, last_message_id, is_read FROM inbox_entry "
                "WHERE inbox_id = ? ORDER BY last_message_id DESC LIMIT ?",
                (inbox_id, limit),
            )
            return [
                InboxEntry(thread_id=t, last_message_id=m, is_read=bool(r)) for t, m, r in cursor
            ]

        return await self._db.read(run) if limit > 0 else []

    async def unread_count(self, inbox_id: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            # Net of deleted threads: one primary-key probe per unread row.
            row = conn.execute(
                "SELECT COUNT(*) FROM inbox_unread u WHERE u.inbox_id = ? AND NOT EXISTS ("
                "SELECT 1 FROM inbox_deleted_thread d WHERE d.thread_id = u.thread_id)",
                (inbox_id,),
            ).fetchone()
            return int(row[0])

        return await self._db.read(run)

    async def set_read(self, inbox_id: str, thread_ids: Sequence[str] | None, *, read: bool) -> int:
        flag = int(read)
        kind: ChangeKind = "marked_read" if read else "marked_unread"
        wanted = None if thread_ids is None else list(dict.fromkeys(thread_ids))
        if wanted == []:
            return 0

        def whole(conn: sqlite3.Connection) -> int:
            changed = conn.execute(
                "UPDATE inbox_entry SET is_read = ? WHERE inbox_id = ? AND is_read != ?",
                (flag, inbox_id, flag),
            ).rowcount
            if read:
                conn.execute("DELETE FROM inbox_unread WHERE inbox_id = ?", (inbox_id,))
            else:
                conn.execute(
                    "INSERT OR IGNORE INTO inbox_unread (inbox_id, thread_id) "
                    "SELECT inbox_id, thread_id FROM inbox_entry WHERE inbox_id = ?",
                    (inbox_id,),
                )
            if changed:
                log_changes(conn, [InboxChange(inbox_id=inbox_id, kind=kind, all_threads=True)])
            return changed

        def some(conn: sqlite3.Connection) -> int:
            assert wanted is not None
            changed = 0
            for chunk in slices(wanted, _CHUNK):
                marks = ",".join("?" * len(chunk))
                changed += conn.execute(
                    f"UPDATE inbox_entry SET is_read = ? WHERE inbox_id = ? AND is_read != ? "
                    f"AND thread_id IN ({marks})",
                    (flag, inbox_id, flag, *chunk),
                ).rowcount
                if read:
                    conn.execute(
                        f"DELETE FROM inbox_unread WHERE inbox_id = ? AND thread_id IN ({marks})",
                        (inbox_id, *chunk),
                    )
                else:
                    conn.execute(
                        "INSERT OR IGNORE INTO inbox_unread (inbox_id, thread_id) "
                        "SELECT inbox_id, thread_id FROM inbox_entry "
                        f"WHERE inbox_id = ? AND thread_id IN ({marks})",
                        (inbox_id, *chunk),
                    )
            if changed:
                log_changes(
                    conn, [InboxChange(inbox_id=inbox_id, kind=kind, thread_ids=tuple(wanted))]
                )
            return changed

        return await self._db.write(whole if wanted is None else some)

    async def delete_entries(self, inbox_id: str, entries: Sequence[InboxEntry]) -> int:
        rows = [(inbox_id, e.thread_id, e.last_message_id) for e in entries]
        if not rows:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            gone = [
                t
                for i, t, m in rows
                if conn.execute(
                    "DELETE FROM inbox_entry WHERE inbox_id = ? AND thread_id = ? "
                    "AND last_message_id <= ?",
                    (i, t, m),
                ).rowcount
            ]
            deleted = len(gone)
            if gone:
                log_changes(conn, removed_changes(inbox_id, gone, deleted_among(conn, gone)))
            # Unread rows whose inbox row is gone (only the threads just named).
            conn.executemany(
                "DELETE FROM inbox_unread WHERE inbox_id = ? AND thread_id = ? AND NOT EXISTS ("
                "SELECT 1 FROM inbox_entry e WHERE e.inbox_id = inbox_unread.inbox_id "
                "AND e.thread_id = inbox_unread.thread_id)",
                [(i, t) for i, t, _ in rows],
            )
            return deleted

        return await self._db.write(run)

    async def create_delivery(self, record: DeliveryRecord) -> DeliveryRecord:
        values = dataclasses.astuple(record)

        def run(conn: sqlite3.Connection) -> DeliveryRecord:
            conn.execute(
                f"INSERT INTO inbox_delivery ({_DELIVERY_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                values,
            )
            row = conn.execute(
                f"SELECT {_DELIVERY_COLUMNS} FROM inbox_delivery WHERE delivery_id = ?",
                (record.delivery_id,),
            ).fetchone()
            return _record(row)

        return await self._db.write(run)

    async def get_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        def run(conn: sqlite3.Connection) -> DeliveryRecord | None:
            row = conn.execute(
                f"SELECT {_DELIVERY_COLUMNS} FROM inbox_delivery WHERE delivery_id = ?",
                (delivery_id,),
            ).fetchone()
            return None if row is None else _record(row)

        return await self._db.read(run)

    async def save_delivery(self, record: DeliveryRecord) -> None:
        values = dataclasses.astuple(record)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO inbox_delivery ({_DELIVERY_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (delivery_id) DO UPDATE SET "
                "total = excluded.total, done = excluded.done, state = excluded.state, "
                "error = excluded.error, updated_at_ms = excluded.updated_at_ms",
                values,
            )

        await self._db.write(run)

    async def save_recipients(self, delivery_id: str, recipients: Sequence[str]) -> None:
        parts = encode_parts(recipients)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM inbox_delivery_recipients WHERE delivery_id = ?", (delivery_id,)
            )
            conn.executemany(
                "INSERT INTO inbox_delivery_recipients (delivery_id, part, data) VALUES (?, ?, ?)",
                [(delivery_id, i, part) for i, part in enumerate(parts)],
            )

        await self._db.write(run)

    async def drop_recipients(self, delivery_id: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM inbox_delivery_recipients WHERE delivery_id = ?", (delivery_id,)
            )

        await self._db.write(run)

    async def load_recipients(self, delivery_id: str) -> list[str] | None:
        def run(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(
                "SELECT data FROM inbox_delivery_recipients WHERE delivery_id = ? ORDER BY part",
                (delivery_id,),
            ).fetchall()
            return [r[0] for r in rows]

        parts = await self._db.read(run)
        return decode_parts(parts) if parts else None

    async def unfinished_deliveries(self, limit: int) -> list[DeliveryRecord]:
        def run(conn: sqlite3.Connection) -> list[DeliveryRecord]:
            rows = conn.execute(
                f"SELECT {_DELIVERY_COLUMNS} FROM inbox_delivery WHERE state != 'done' LIMIT ?",
                (max(0, limit),),
            ).fetchall()
            return [_record(r) for r in rows]

        return await self._db.read(run)

    async def claim_delivery(self, record: DeliveryRecord, expected_updated_at_ms: int) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE inbox_delivery SET total = ?, done = ?, state = ?, error = ?, "
                "updated_at_ms = ? WHERE delivery_id = ? AND updated_at_ms = ?",
                (
                    record.total,
                    record.done,
                    record.state,
                    record.error,
                    record.updated_at_ms,
                    record.delivery_id,
                    expected_updated_at_ms,
                ),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def scan_entries(self, page: int) -> AsyncIterator[list[tuple[str, InboxEntry]]]:
        columns = ("inbox_id", "thread_id", "last_message_id", "is_read")
        async for rows in _keyset_pages(self._db, "inbox_entry", columns, 2, page):
            yield [
                (str(i), InboxEntry(thread_id=str(t), last_message_id=int(m), is_read=bool(r)))
                for i, t, m, r in rows
            ]

    async def scan_deliveries(self, page: int) -> AsyncIterator[list[DeliveryRecord]]:
        columns = tuple(f.name for f in dataclasses.fields(DeliveryRecord))
        async for rows in _keyset_pages(self._db, "inbox_delivery", columns, 1, page):
            yield [_record(r) for r in rows]

    async def scan_deleted_threads(self, page: int) -> AsyncIterator[list[DeletedThread]]:
        columns = ("thread_id", "operation_id", "deleted_at_ms")
        async for rows in _keyset_pages(self._db, "inbox_deleted_thread", columns, 1, page):
            yield [
                DeletedThread(thread_id=t, operation_id=o, deleted_at_ms=int(d)) for t, o, d in rows
            ]

    async def close(self) -> None:
        await self._db.close()
