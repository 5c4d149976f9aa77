"""Deletions of the SQLite InboxStore: removed threads, erased inboxes, deleted threads.

    inbox_deleted_thread (thread_id) -> operation_id, deleted_at_ms   for ever: posts refused
    inbox_deleting       (thread_id) -> operation_id, deleted_at_ms   until swept
    inbox_operation      (operation_id) -> kind, state, progress      GetOperation

The unread count is net of every deleted thread (a join on the deleted-thread table's
primary key, per unread row: an inbox has ~1,000 at most), so it is exact from the mark on.
The sweep walks ``inbox_entry`` by primary key, one page per write transaction, deleting the
rows of the pending threads inside the page's key range (entries and unread rows share the
key, so one range serves both). A deleted thread is never written again (posts are refused),
so unconditional deletes are right here; `remove_threads` deletes unconditionally too, and a
newer message re-inserts the row (the upsert finds none).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Sequence
from typing import Any

from storage.ports import InboxChange, InboxOperation, PendingDeletion, SweepStep
from storage.slices import slices
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.inbox_changes import log_changes

__all__ = ["DELETION_SCHEMA", "SqliteInboxDeletes", "deleted_among"]

DELETION_SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox_deleted_thread (
    thread_id TEXT NOT NULL PRIMARY KEY, operation_id TEXT NOT NULL,
    deleted_at_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox_deleting (
    thread_id TEXT NOT NULL PRIMARY KEY, operation_id TEXT NOT NULL,
    deleted_at_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox_operation (
    operation_id TEXT NOT NULL PRIMARY KEY, kind TEXT NOT NULL, state TEXT NOT NULL,
    done INTEGER NOT NULL, total INTEGER NOT NULL, error TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL) WITHOUT ROWID;
"""
_CHUNK = 500
_IN_SET = "thread_id IN (SELECT value FROM json_each(?))"
_RANGE = "(inbox_id, thread_id) > (?, ?) AND (inbox_id, thread_id) <= (?, ?)"


def deleted_among(conn: sqlite3.Connection, thread_ids: Sequence[str]) -> set[str]:
    """Which of `thread_ids` are marked deleted (inside a transaction)."""
    found: set[str] = set()
    for chunk in slices(list(thread_ids), _CHUNK):
        found.update(
            r[0]
            for r in conn.execute(
                f"SELECT thread_id FROM inbox_deleted_thread WHERE {_IN_SET}",
                (json.dumps(chunk),),
            )
        )
    return found


class SqliteInboxDeletes:
    """The deletion half of `storage.sqlite.inbox.SqliteInboxStore` (a mixin)."""

    _db: SqliteDatabase

    async def remove_threads(self, inbox_id: str, thread_ids: Sequence[str]) -> int:
        wanted = list(dict.fromkeys(thread_ids))

        def run(conn: sqlite3.Connection) -> int:
            gone: list[str] = []
            for chunk in slices(wanted, _CHUNK):
                ids = json.dumps(chunk)
                gone += [
                    r[0]
                    for r in conn.execute(
                        f"DELETE FROM inbox_entry WHERE inbox_id = ? AND {_IN_SET} "
                        "RETURNING thread_id",
                        (inbox_id, ids),
                    ).fetchall()
                ]
                conn.execute(
                    f"DELETE FROM inbox_unread WHERE inbox_id = ? AND {_IN_SET}", (inbox_id, ids)
                )
            if gone:
                log_changes(
                    conn, [InboxChange(inbox_id=inbox_id, kind="removed", thread_ids=tuple(gone))]
                )
            return len(gone)

        return await self._db.write(run) if wanted else 0

    async def delete_inbox(self, inbox_id: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            removed = conn.execute(
                "DELETE FROM inbox_entry WHERE inbox_id = ?", (inbox_id,)
            ).rowcount
            conn.execute("DELETE FROM inbox_unread WHERE inbox_id = ?", (inbox_id,))
            # Deliveries it sent name it (a small table, read whole).
            sent = [
                r[0]
                for r in conn.execute(
                    "SELECT delivery_id FROM inbox_delivery WHERE sender_inbox_id = ?",
                    (inbox_id,),
                )
            ]
            for delivery_id in sent:
                conn.execute("DELETE FROM inbox_delivery WHERE delivery_id = ?", (delivery_id,))
                conn.execute(
                    "DELETE FROM inbox_delivery_recipients WHERE delivery_id = ?", (delivery_id,)
                )
            # Its log names it and its threads: erased with it, and nothing logged after (a
            # row naming the erased inbox would outlive the erasure).
            conn.execute("DELETE FROM inbox_change WHERE inbox_id = ?", (inbox_id,))
            return int(removed)

        removed = await self._db.write(run)
        await self._db.scrub()  # secure_delete zeroed the pages; this empties the WAL
        return removed

    async def mark_deleted(
        self, thread_ids: Sequence[str], operation_id: str, deleted_at_ms: int
    ) -> None:
        rows = [(t, operation_id, deleted_at_ms) for t in dict.fromkeys(thread_ids)]

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT OR IGNORE INTO inbox_deleted_thread (thread_id, operation_id, "
                "deleted_at_ms) VALUES (?, ?, ?)",
                rows,
            )
            conn.executemany(
                "INSERT INTO inbox_deleting (thread_id, operation_id, deleted_at_ms) "
                "VALUES (?, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET "
                "operation_id = excluded.operation_id, deleted_at_ms = excluded.deleted_at_ms",
                rows,
            )

        if rows:
            await self._db.write(run)

    async def deleted_threads(self, thread_ids: Sequence[str]) -> set[str]:
        wanted = list(dict.fromkeys(thread_ids))

        def run(conn: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for chunk in slices(wanted, _CHUNK):
                found.update(
                    r[0]
                    for r in conn.execute(
                        f"SELECT thread_id FROM inbox_deleted_thread WHERE {_IN_SET}",
                        (json.dumps(chunk),),
                    )
                )
            return found

        return await self._db.read(run) if wanted else set()

    async def pending_deletions(self) -> list[PendingDeletion]:
        def run(conn: sqlite3.Connection) -> list[PendingDeletion]:
            return [
                PendingDeletion(thread_id=t, operation_id=o, deleted_at_ms=int(at))
                for t, o, at in conn.execute(
                    "SELECT thread_id, operation_id, deleted_at_ms FROM inbox_deleting"
                )
            ]

        return await self._db.read(run)

    async def sweep_deleted(
        self, thread_ids: Collection[str], cursor: str | None, page: int
    ) -> SweepStep:
        if page < 1:
            raise ValueError(f"sweep page must be at least 1, not {page}")
        ids = json.dumps(sorted(thread_ids))
        if cursor is None:
            after: list[str] = ["", ""]
            scanned = 0
            total = int(
                (await self._db.read(_select("SELECT COUNT(*) FROM inbox_entry", ())))[0][0]
            )
        else:
            a, b, scanned, total = json.loads(cursor)
            after = [a, b]
        keys = await self._db.read(
            _select(
                "SELECT inbox_id, thread_id FROM inbox_entry WHERE (inbox_id, thread_id) > (?, ?) "
                "ORDER BY inbox_id, thread_id LIMIT ?",
                (*after, page),
            )
        )
        last = list(keys[-1]) if len(keys) == page else None

        def run(conn: sqlite3.Connection) -> int:
            if last is None:  # the last page: everything after `after`
                where, params = "(inbox_id, thread_id) > (?, ?)", (*after,)
            else:
                where, params = _RANGE, (*after, *last)
            gone: dict[str, list[str]] = {}
            for inbox_id, thread_id in conn.execute(
                f"DELETE FROM inbox_entry WHERE {where} AND {_IN_SET} "
                "RETURNING inbox_id, thread_id",
                (*params, ids),
            ).fetchall():
                gone.setdefault(inbox_id, []).append(thread_id)
            removed = sum(len(t) for t in gone.values())
            log_changes(
                conn,
                [
                    InboxChange(inbox_id=i, kind="deleted", thread_ids=tuple(sorted(t)))
                    for i, t in gone.items()
                ],
            )
            conn.execute(f"DELETE FROM inbox_unread WHERE {where} AND {_IN_SET}", (*params, ids))
            if last is None:  # the walk's end: the threads' delivery records go too
                for table in ("inbox_delivery_recipients", "inbox_delivery"):
                    conn.execute(
                        f"DELETE FROM {table} WHERE delivery_id IN (SELECT delivery_id "
                        f"FROM inbox_delivery WHERE {_IN_SET})",
                        (ids,),
                    )
            return int(removed)

        removed = await self._db.write(run) if thread_ids else 0
        scanned += len(keys)
        total = max(total, scanned)
        if last is None:
            return SweepStep(removed=removed, cursor=None, done=total, total=total)
        nxt = json.dumps([last[0], last[1], scanned, total])
        return SweepStep(removed=removed, cursor=nxt, done=scanned, total=total)

    async def finish_deletions(self, swept: Sequence[PendingDeletion]) -> None:
        rows = [(p.thread_id, p.operation_id, p.deleted_at_ms) for p in swept]

        def run(conn: sqlite3.Connection) -> None:
            # Only the pending row that was swept: one marked again since stays.
            conn.executemany(
                "DELETE FROM inbox_deleting WHERE thread_id = ? AND operation_id = ? "
                "AND deleted_at_ms = ?",
                rows,
            )

        if rows:
            await self._db.write(run)

    async def get_operation(self, operation_id: str) -> InboxOperation | None:
        rows = await self._db.read(
            _select(
                "SELECT operation_id, kind, state, done, total, error, updated_at_ms "
                "FROM inbox_operation WHERE operation_id = ?",
                (operation_id,),
            )
        )
        if not rows:
            return None
        o, kind, state, done, total, error, at = rows[0]
        return InboxOperation(
            operation_id=o,
            kind=kind,
            state=state,
            done=int(done),
            total=int(total),
            error=error,
            updated_at_ms=int(at),
        )

    async def save_operation(self, record: InboxOperation) -> None:
        r = record
        values = (r.operation_id, r.kind, r.state, r.done, r.total, r.error, r.updated_at_ms)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO inbox_operation (operation_id, kind, state, done, "
                "total, error, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                values,
            )

        await self._db.write(run)


def _select(sql: str, params: tuple[object, ...]) -> Callable[[sqlite3.Connection], list[Any]]:
    def run(conn: sqlite3.Connection) -> list[Any]:
        return conn.execute(sql, params).fetchall()

    return run
