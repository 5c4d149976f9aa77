"""TemplateStore on the embedded SQLite engine: Crusher's three families as three tables.

    cluster_email    (key, email_id) -> payload, stored_ms     the `email` family
    cluster_user     (key, user)     -> stored_ms              the `user` family
    cluster_template key             -> data, sender, formed_ms the `template` family

The TTL is the adapter's: every read ignores email and user cells stored more than
`email_ttl_s` ago, and `add_emails` deletes expired cells
(a sweep of both tables by their age index, at most once per TTL/10), so an expired email is
neither visible nor kept. A batch is one IMMEDIATE transaction on the single writer thread;
its counts cost three indexed lookups per counted row, each stopping at the cap. A batch is
written by a few multi-row statements (one per power of two of its rows, at most 256 a
statement), each cluster's cells side by side, and counted by one: sqlite3 releases the
GIL around every statement step, so a statement per row would hand the GIL back and forth
with the event loop twice per email.

A cell expires at stored_ms + TTL: the scans report that as its expires_at_ms, and `restore`
writes stored_ms = expires_at_ms - TTL, so a loaded cell keeps its remaining life whatever
the TTL of the store it was dumped from. The scans page by keyset on each table's primary
key, one short read per page.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from storage.clock import now_ms
from storage.ports import ClusterCounts, ClusterWrite, StoredEmail, StoredTemplates, StoredUser
from storage.sqlite.database import SqliteDatabase

__all__ = ["SqliteTemplateStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cluster_email (
    key BLOB NOT NULL, email_id TEXT NOT NULL, stored_ms INTEGER NOT NULL, payload BLOB NOT NULL,
    PRIMARY KEY (key, email_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS cluster_email_age ON cluster_email (stored_ms);
CREATE TABLE IF NOT EXISTS cluster_user (
    key BLOB NOT NULL, user BLOB NOT NULL, stored_ms INTEGER NOT NULL,
    PRIMARY KEY (key, user)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS cluster_user_age ON cluster_user (stored_ms);
CREATE TABLE IF NOT EXISTS cluster_template (
    key BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL, sender TEXT NOT NULL,
    formed_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS cluster_template_sender ON cluster_template (sender, key);
"""


_WAL_CHECKPOINT_PAGES = 10_000
"""The writer checkpoints the WAL every this many pages (SQLite's default: 1,000). Every
batch dirties a leaf page per cluster it touches, mostly the same hot clusters' pages: a
checkpoint copies each page once however often it changed since the last, so a longer
interval copies far fewer pages (the WAL grows to ~40 MB between checkpoints)."""
_WRITER_CACHE_KIB = 32 * 1024
"""The writer's page cache (SQLite's default: 2 MB): the clusters' hot leaf pages stay in
it instead of being read back from the file system at every batch."""


def _tune_writer(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA wal_autocheckpoint={_WAL_CHECKPOINT_PAGES}")
    conn.execute(f"PRAGMA cache_size=-{_WRITER_CACHE_KIB}")


_MAX_ROWS = 256
"""Rows one statement writes or counts (4 parameters a row, far below SQLite's 32,766)."""


def _sizes(n: int) -> Iterator[int]:
    """`n` as powers of two, largest first, none above `_MAX_ROWS`: one statement per size,
    so a handful of SQL texts serve every batch (sqlite3 caches prepared statements by
    their text)."""
    while n:
        size = min(_MAX_ROWS, 1 << (n.bit_length() - 1))
        yield size
        n -= size


@functools.lru_cache(maxsize=64)
def _statement(head: str, width: int, rows: int, tail: str) -> str:
    row = "(" + ",".join("?" * width) + ")"
    return f"{head} VALUES {','.join([row] * rows)} {tail}"


def _insert(
    conn: sqlite3.Connection, head: str, tail: str, rows: Sequence[tuple[object, ...]]
) -> None:
    """Writes `rows` with a few multi-row statements rather than one per row: sqlite3
    lets go of the GIL around every statement step and takes it back after, and on a busy
    event loop each of those hand-backs is a wait and a context switch."""
    at = 0
    for size in _sizes(len(rows)):
        chunk = rows[at : at + size]
        at += size
        conn.execute(_statement(head, len(chunk[0]), size, tail), [v for row in chunk for v in row])


_COUNT_HEAD = (
    "SELECT k.column1, "
    "(SELECT count(*) FROM (SELECT 1 FROM cluster_email e "
    "WHERE e.key = k.column1 AND e.stored_ms > ?1 LIMIT ?2)), "
    "(SELECT count(*) FROM (SELECT 1 FROM cluster_user u "
    "WHERE u.key = k.column1 AND u.stored_ms > ?1 LIMIT ?2)), "
    "(SELECT formed_ms FROM cluster_template t WHERE t.key = k.column1) FROM ("
)


def _counts(
    conn: sqlite3.Connection, keys: Sequence[bytes], horizon: int, limit: int
) -> dict[bytes, ClusterCounts]:
    """s, n, t of each row in `keys` (a few statements for all of them); a count never
    walks more than `limit` cells of a family."""
    out: dict[bytes, ClusterCounts] = {}
    at = 0
    for size in _sizes(len(keys)):
        part = keys[at : at + size]
        at += size
        sql = _statement(_COUNT_HEAD, 1, size, ") AS k")
        for key, emails, users, formed in conn.execute(sql, (horizon, limit, *part)):
            out[bytes(key)] = ClusterCounts(
                emails=int(emails),
                users=int(users),
                template_at_ms=None if formed is None else int(formed),
            )
    return out


class SqliteTemplateStore:
    """`storage.ports.TemplateStore` on one SQLite file."""

    def __init__(self, db: SqliteDatabase, email_ttl_s: float) -> None:
        self._db = db
        self._ttl_ms = int(email_ttl_s * 1000)
        self._next_sweep_ms = 0

    @classmethod
    async def open(
        cls, path: Path, *, email_ttl_s: float, synchronous: str = "FULL", readers: int = 4
    ) -> SqliteTemplateStore:
        """Opens (creating when missing) the database at `path`."""
        db = SqliteDatabase(path, synchronous=synchronous, readers=readers)
        await db.migrate(_SCHEMA)
        await db.write(_tune_writer)
        return cls(db, email_ttl_s)

    async def add_emails(
        self,
        writes: Sequence[ClusterWrite],
        counted: Collection[bytes] | None = None,
        cap: int | None = None,
    ) -> dict[bytes, ClusterCounts]:
        now = now_ms()
        horizon = now - self._ttl_ms
        keys = list(dict.fromkeys(w.key for w in writes) if counted is None else counted)
        limit = -1 if cap is None else max(1, cap)  # SQLite: a negative LIMIT is none
        sweep = now >= self._next_sweep_ms
        if sweep:
            self._next_sweep_ms = now + max(1000, self._ttl_ms // 10)
        # One cluster's cells side by side: each B-tree page is visited once per batch.
        rows = sorted(writes, key=lambda w: w.key)

        def run(conn: sqlite3.Connection) -> dict[bytes, ClusterCounts]:
            if sweep:
                for table in ("cluster_email", "cluster_user"):
                    conn.execute(f"DELETE FROM {table} WHERE stored_ms <= ?", (horizon,))
            if rows:
                _insert(
                    conn,
                    "INSERT INTO cluster_email (key, email_id, stored_ms, payload)",
                    "ON CONFLICT (key, email_id) DO UPDATE SET stored_ms = excluded.stored_ms, "
                    "payload = excluded.payload",
                    [(w.key, w.email_id, now, w.payload) for w in rows],
                )
                _insert(
                    conn,
                    "INSERT INTO cluster_user (key, user, stored_ms)",
                    "ON CONFLICT (key, user) DO UPDATE SET stored_ms = excluded.stored_ms",
                    [(w.key, w.user, now) for w in rows],
                )
            return _counts(conn, keys, horizon, limit)

        return await self._db.write(run)

    async def get_emails(self, key: bytes, limit: int) -> list[bytes]:
        horizon = now_ms() - self._ttl_ms

        def run(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(
                "SELECT payload FROM cluster_email WHERE key = ? AND stored_ms > ? "
                "ORDER BY stored_ms DESC LIMIT ?",
                (key, horizon, max(0, limit)),
            ).fetchall()
            return [bytes(r[0]) for r in rows]

        return await self._db.read(run)

    async def put_templates(self, key: bytes, data: bytes, sender: str, formed_at_ms: int) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO cluster_template (key, data, sender, formed_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET data = excluded.data, sender = excluded.sender, "
                "formed_ms = excluded.formed_ms",
                (key, bytes(data), sender, formed_at_ms),
            )

        await self._db.write(run)

    async def get_templates(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        wanted = list(dict.fromkeys(keys))

        def run(conn: sqlite3.Connection) -> dict[bytes, bytes]:
            found: dict[bytes, bytes] = {}
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                marks = ",".join("?" * len(part))
                for key, data in conn.execute(
                    f"SELECT key, data FROM cluster_template WHERE key IN ({marks})", part
                ):
                    found[bytes(key)] = bytes(data)
            return found

        return await self._db.read(run)

    async def list_templates(
        self, after: bytes | None, limit: int, sender: str | None
    ) -> list[tuple[bytes, bytes]]:
        def run(conn: sqlite3.Connection) -> list[tuple[bytes, bytes]]:
            sql = "SELECT key, data FROM cluster_template WHERE key > ?"
            args: list[object] = [after or b""]
            if sender is not None:
                sql += " AND sender = ?"
                args.append(sender)
            sql += " ORDER BY key LIMIT ?"
            args.append(max(0, limit))
            return [(bytes(k), bytes(d)) for k, d in conn.execute(sql, args)]

        return await self._db.read(run)

    async def scan_emails(self, page: int) -> AsyncIterator[list[StoredEmail]]:
        ttl = self._ttl_ms
        async for rows in self._scan("cluster_email", "email_id", "payload", page):
            yield [
                StoredEmail(
                    key=bytes(k), email_id=str(e), payload=bytes(p), expires_at_ms=int(t) + ttl
                )
                for k, e, t, p in rows
            ]

    async def scan_users(self, page: int) -> AsyncIterator[list[StoredUser]]:
        ttl = self._ttl_ms
        async for rows in self._scan("cluster_user", "user", None, page):
            yield [
                StoredUser(key=bytes(k), user=bytes(u), expires_at_ms=int(t) + ttl)
                for k, u, t in rows
            ]

    async def _scan(
        self, table: str, column: str, value: str | None, page: int
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        """Live (key, `column`, stored_ms[, `value`]) rows of `table`, a page at a time.

        Keyset pagination on the primary key (key, `column`): one short read per page,
        starting after the previous page's last row, so no cursor or read transaction
        outlives a page. Expired rows the sweep has not deleted yet are passed over.
        """
        if page < 1:
            raise ValueError(f"scan page must be at least 1, not {page}")
        cols = f"key, {column}, stored_ms" + ("" if value is None else f", {value}")
        # `+stored_ms`: the age filter must not lure the planner onto the age index (and a
        # sort); the walk is the primary key's, from the cursor on.
        first = f"SELECT {cols} FROM {table} WHERE +stored_ms > ? ORDER BY key, {column} LIMIT ?"
        more = (
            f"SELECT {cols} FROM {table} WHERE (key, {column}) > (?, ?) AND +stored_ms > ? "
            f"ORDER BY key, {column} LIMIT ?"
        )
        after: tuple[object, object] | None = None
        while True:
            horizon = now_ms() - self._ttl_ms
            if after is None:
                rows = await self._rows(first, (horizon, page))
            else:
                rows = await self._rows(more, (*after, horizon, page))
            if rows:
                yield rows
            if len(rows) < page:
                return
            after = (rows[-1][0], rows[-1][1])

    async def _rows(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
        """The rows of one short read."""

        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(sql, args).fetchall()

        return await self._db.read(run)

    async def scan_templates(self, page: int) -> AsyncIterator[list[StoredTemplates]]:
        if page < 1:
            raise ValueError(f"scan page must be at least 1, not {page}")
        cols = "SELECT key, data, sender, formed_ms FROM cluster_template"
        after: bytes | None = None  # not b"": a row may have the empty key
        while True:
            if after is None:
                rows = await self._rows(f"{cols} ORDER BY key LIMIT ?", (page,))
            else:
                rows = await self._rows(f"{cols} WHERE key > ? ORDER BY key LIMIT ?", (after, page))
            if rows:
                yield [
                    StoredTemplates(key=bytes(k), data=bytes(d), sender=str(s), formed_at_ms=int(f))
                    for k, d, s, f in rows
                ]
            if len(rows) < page:
                return
            after = bytes(rows[-1][0])

    async def restore(
        self,
        emails: Sequence[StoredEmail],
        users: Sequence[StoredUser],
        templates: Sequence[StoredTemplates],
    ) -> None:
        now = now_ms()
        ttl = self._ttl_ms
        # A cell expiring at e is a cell stored at e - TTL; an expired one is not written.
        email_rows = [
            (e.key, e.email_id, e.expires_at_ms - ttl, e.payload)
            for e in emails
            if e.expires_at_ms > now
        ]
        user_rows = [(u.key, u.user, u.expires_at_ms - ttl) for u in users if u.expires_at_ms > now]
        template_rows = [(t.key, t.data, t.sender, t.formed_at_ms) for t in templates]

        def run(conn: sqlite3.Connection) -> None:
            # The later expiry wins (and brings its payload); a tie changes nothing.
            conn.executemany(
                "INSERT INTO cluster_email (key, email_id, stored_ms, payload) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (key, email_id) DO UPDATE SET stored_ms = excluded.stored_ms, "
                "payload = excluded.payload WHERE excluded.stored_ms > cluster_email.stored_ms",
                email_rows,
            )
            conn.executemany(
                "INSERT INTO cluster_user (key, user, stored_ms) VALUES (?, ?, ?) "
                "ON CONFLICT (key, user) DO UPDATE SET stored_ms = excluded.stored_ms "
                "WHERE excluded.stored_ms > cluster_user.stored_ms",
                user_rows,
            )
            # The newer formation wins; templates formed at the same time are kept.
            conn.executemany(
                "INSERT INTO cluster_template (key, data, sender, formed_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET data = excluded.data, sender = excluded.sender, "
                "formed_ms = excluded.formed_ms "
                "WHERE excluded.formed_ms > cluster_template.formed_ms",
                template_rows,
            )

        if email_rows or user_rows or template_rows:
            await self._db.write(run)

    async def close(self) -> None:
        await self._db.close()
