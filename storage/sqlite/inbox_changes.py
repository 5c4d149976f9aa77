"""The change log of the SQLite InboxStore (`storage.ports.inbox_changes`).

    inbox_change (seq AUTOINCREMENT) -> inbox_id, kind, thread_ids, message_id, all, at_ms
    index inbox_change_by_inbox (inbox_id, seq)

Each change is appended by the write transaction that makes it (the functions below take
that transaction's connection), so the log and the inbox can never disagree. The single
writer assigns the sequence, so positions are gapless in commit order: reading an inbox
after a position, or tailing the whole log after one, never misses a committed change and
never sees one twice. AUTOINCREMENT never reuses a sequence, even after trimming or an
erased inbox, so an old position never names a new change.

A position is ``sq:<seq>``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import get_args

from storage.clock import now_ms
from storage.ports import ChangeKind, InboxChange, LoggedChange
from storage.sqlite.database import SqliteDatabase

__all__ = ["CHANGE_SCHEMA", "SqliteInboxChanges", "log_changes", "log_delivered"]

CHANGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox_change (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, inbox_id TEXT NOT NULL, kind TEXT NOT NULL,
    thread_ids TEXT NOT NULL, message_id INTEGER NOT NULL, all_threads INTEGER NOT NULL,
    at_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS inbox_change_by_inbox ON inbox_change (inbox_id, seq);
"""
_POSITION = re.compile(r"sq:(\d{1,18})")
_MAX_READ = 10_000
# The rows a delivery chunk will advance (missing, or holding an older message): logged in
# its transaction just before the upsert advances them, without a row through Python.
_LOG_DELIVERED = (
    "INSERT INTO inbox_change (inbox_id, kind, thread_ids, message_id, all_threads, at_ms) "
    "SELECT j.value, 'delivered', json_array(?2), ?3, 0, ?4 FROM json_each(?1) j "
    "WHERE NOT EXISTS (SELECT 1 FROM inbox_entry e WHERE e.inbox_id = j.value "
    "AND e.thread_id = ?2 AND e.last_message_id >= ?3)"
)


def log_delivered(conn: sqlite3.Connection, ids_json: str, thread_id: str, message_id: int) -> None:
    """Logs `delivered` for each inbox of `ids_json` whose row the delivery will advance;
    call it inside the delivery's transaction, before its upsert."""
    conn.execute(_LOG_DELIVERED, (ids_json, thread_id, message_id, now_ms()))


def log_changes(conn: sqlite3.Connection, changes: Iterable[InboxChange]) -> None:
    """Appends `changes`, in order, inside the transaction that made them."""
    at = now_ms()
    conn.executemany(
        "INSERT INTO inbox_change (inbox_id, kind, thread_ids, message_id, all_threads, at_ms) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            (c.inbox_id, c.kind, json.dumps(list(c.thread_ids)), c.message_id, c.all_threads, at)
            for c in changes
        ],
    )


def _seq(position: str | None) -> int:
    if position is None:
        return 0
    found = _POSITION.fullmatch(position)
    if found is None:
        raise ValueError(f"not a change position of this engine: {position!r}")
    return int(found.group(1))


class SqliteInboxChanges:
    """The change-log reads of `storage.sqlite.inbox.SqliteInboxStore` (a mixin)."""

    _db: SqliteDatabase

    async def read_changes(
        self, inbox_id: str, after: str | None, limit: int
    ) -> list[LoggedChange]:
        if not 1 <= limit <= _MAX_READ:
            raise ValueError(f"limit must be 1..{_MAX_READ}, not {limit}")
        start = _seq(after)

        def run(conn: sqlite3.Connection) -> list[LoggedChange]:
            return [
                LoggedChange(
                    position=f"sq:{seq}",
                    changed_at_ms=int(at),
                    change=InboxChange(
                        inbox_id=inbox_id,
                        kind=_kind(kind),
                        thread_ids=tuple(json.loads(threads)),
                        message_id=int(message_id),
                        all_threads=bool(all_threads),
                    ),
                )
                for seq, kind, threads, message_id, all_threads, at in conn.execute(
                    "SELECT seq, kind, thread_ids, message_id, all_threads, at_ms "
                    "FROM inbox_change WHERE inbox_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                    (inbox_id, start, limit),
                )
            ]

        return await self._db.read(run)

    async def change_head(self) -> str:
        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = 'inbox_change'"
            ).fetchone()
            return 0 if row is None else int(row[0])

        return f"sq:{await self._db.read(run)}"

    async def changed_inboxes(self, after: str | None, limit: int) -> tuple[list[str], str]:
        if after is None:
            return [], await self.change_head()
        start = _seq(after)

        def run(conn: sqlite3.Connection) -> tuple[list[str], int]:
            rows = conn.execute(
                "SELECT seq, inbox_id FROM inbox_change WHERE seq > ? ORDER BY seq LIMIT ?",
                (start, max(1, limit)),
            ).fetchall()
            last = int(rows[-1][0]) if rows else start
            return list(dict.fromkeys(r[1] for r in rows)), last

        names, last = await self._db.read(run)
        return names, f"sq:{last}"

    async def forget_changes(self, inbox_id: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM inbox_change WHERE inbox_id = ?", (inbox_id,))

        await self._db.write(run)

    async def trim_changes(self, before_ms: int) -> int:
        def run(conn: sqlite3.Connection) -> int:
            # Sequences grow with time, so the trimmed changes are a prefix: found by walking
            # the table in sequence order to the first one to keep (no index on time, one
            # B-tree less for every delivery to write).
            return int(
                conn.execute(
                    "DELETE FROM inbox_change WHERE seq < coalesce((SELECT seq FROM "
                    "inbox_change WHERE at_ms >= ? ORDER BY seq LIMIT 1), 1 << 62)",
                    (before_ms,),
                ).rowcount
            )

        return await self._db.write(run)

    def position_valid(self, position: str) -> bool:
        return _POSITION.fullmatch(position) is not None


_KINDS: dict[str, ChangeKind] = {k: k for k in get_args(ChangeKind)}


def _kind(value: str) -> ChangeKind:
    return _KINDS[value]


def removed_changes(
    inbox_id: str, thread_ids: Sequence[str], deleted: Iterable[str]
) -> list[InboxChange]:
    """The `removed` and `deleted` changes of rows removed from one inbox: `deleted` names
    the threads deleted everywhere."""
    gone = set(deleted)
    out: list[InboxChange] = []
    plain = tuple(t for t in thread_ids if t not in gone)
    marked = tuple(t for t in thread_ids if t in gone)
    if plain:
        out.append(InboxChange(inbox_id=inbox_id, kind="removed", thread_ids=plain))
    if marked:
        out.append(InboxChange(inbox_id=inbox_id, kind="deleted", thread_ids=marked))
    return out
