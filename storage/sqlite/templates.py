"""TemplateStore on the embedded SQLite engine: Crusher's three families as three tables.

    cluster_email    (key, email_id) -> payload, stored_ms     the `email` family
    cluster_user     (key, user)     -> stored_ms              the `user` family
    cluster_template key             -> data, sender, formed_ms the `template` family

The TTL is the adapter's: every read ignores email and user cells stored more than
`email_ttl_s` ago, and `add_emails` deletes expired cells
(a sweep of both tables by their age index, at most once per TTL/10), so an expired email is
neither visible nor kept. A batch is one IMMEDIATE transaction on the single writer thread;
its counts cost three indexed lookups per counted row, each stopping at the cap. Calls made
while a transaction runs share the next one (group commit), and a transaction writes and
counts with a few multi-row statements (`storage/sqlite/template_batches.py`).

A cell expires at stored_ms + TTL: the scans report that as its expires_at_ms, and `restore`
writes stored_ms = expires_at_ms - TTL, so a loaded cell keeps its remaining life whatever
the TTL of the store it was dumped from. The scans page by keyset on each table's primary
key, one short read per page.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.clock import now_ms
from storage.ports import ClusterCounts, ClusterWrite, StoredEmail, StoredTemplates, StoredUser
from storage.sqlite import versions
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.template_batches import counts, tune_writer, write_cells

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


@dataclass(slots=True)
class _Waiting:
    """An add_emails call waiting for its transaction."""

    writes: Sequence[ClusterWrite]
    keys: list[bytes]
    limit: int
    """The count cap (-1: none)."""
    done: asyncio.Future[dict[bytes, ClusterCounts]]


class SqliteTemplateStore:
    """`storage.ports.TemplateStore` on one SQLite file."""

    def __init__(self, db: SqliteDatabase, email_ttl_s: float) -> None:
        self._db = db
        self._ttl_ms = int(email_ttl_s * 1000)
        self._next_sweep_ms = 0
        self._waiting: list[_Waiting] = []
        """add_emails calls waiting for the next transaction (`_commit_waiting`)."""
        self._committer: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, path: Path, *, email_ttl_s: float, synchronous: str = "FULL", readers: int = 4
    ) -> SqliteTemplateStore:
        """Opens (creating when missing) the database at `path`."""
        db = SqliteDatabase(path, synchronous=synchronous, readers=readers)
        await db.migrate(_SCHEMA, versions.TEMPLATES)
        await db.write(tune_writer)
        return cls(db, email_ttl_s)

    async def add_emails(
        self,
        writes: Sequence[ClusterWrite],
        counted: Collection[bytes] | None = None,
        cap: int | None = None,
    ) -> dict[bytes, ClusterCounts]:
        keys = list(dict.fromkeys(w.key for w in writes) if counted is None else counted)
        limit = -1 if cap is None else max(1, cap)  # SQLite: a negative LIMIT is none
        call = _Waiting(writes, keys, limit, asyncio.get_running_loop().create_future())
        self._waiting.append(call)
        if self._committer is None:
            self._committer = asyncio.get_running_loop().create_task(self._commit_waiting())
        return await asyncio.shield(call.done)

    async def _commit_waiting(self) -> None:
        """Group commit: the calls waiting when a transaction starts share it.

        SQLite has one writer. The I/O stage's tasks store a CPU batch's emails in several
        calls at once; one transaction for all of them writes each page they share once,
        instead of once per call. Each call's rows are counted after the group's writes,
        as if the calls beside it had run first.
        """
        group: list[_Waiting] = []
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                try:
                    results = await self._db.write(self._transaction(group))
                except Exception as exc:  # each caller gets the engine's error
                    for call in group:
                        if not call.done.done():
                            call.done.set_exception(exc)
                else:
                    for call, result in zip(group, results, strict=True):
                        if not call.done.done():
                            call.done.set_result(result)
                group = []
        finally:
            self._committer = None
            for call in (*group, *self._waiting):  # cancelled: nobody is left hanging
                call.done.cancel()
            self._waiting = []

    def _transaction(
        self, group: list[_Waiting]
    ) -> Callable[[sqlite3.Connection], list[dict[bytes, ClusterCounts]]]:
        now = now_ms()
        horizon = now - self._ttl_ms
        sweep = now >= self._next_sweep_ms
        if sweep:
            self._next_sweep_ms = now + max(1000, self._ttl_ms // 10)
        writes = [w for call in group for w in call.writes]

        def run(conn: sqlite3.Connection) -> list[dict[bytes, ClusterCounts]]:
            if sweep:
                for table in ("cluster_email", "cluster_user"):
                    conn.execute(f"DELETE FROM {table} WHERE stored_ms <= ?", (horizon,))
            write_cells(conn, writes, now)
            return [counts(conn, call.keys, horizon, call.limit) for call in group]

        return run

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

    async def get_email_cells(self, key: bytes, limit: int) -> list[tuple[str, bytes]]:
        horizon = now_ms() - self._ttl_ms

        def run(conn: sqlite3.Connection) -> list[tuple[str, bytes]]:
            rows = conn.execute(
                "SELECT email_id, payload FROM cluster_email WHERE key = ? AND stored_ms > ? "
                "LIMIT ?",
                (key, horizon, max(0, limit)),
            ).fetchall()
            return [(str(e), bytes(p)) for e, p in rows]

        return await self._db.read(run)

    async def erase_cells(
        self, key: bytes, email_ids: Collection[str], users: Collection[bytes]
    ) -> None:
        emails = [(key, e) for e in email_ids]
        cells = [(key, bytes(u)) for u in users]

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany("DELETE FROM cluster_email WHERE key = ? AND email_id = ?", emails)
            conn.executemany("DELETE FROM cluster_user WHERE key = ? AND user = ?", cells)

        if emails or cells:
            await self._db.write(run)

    async def delete_templates(self, key: bytes) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM cluster_template WHERE key = ?", (key,))

        await self._db.write(run)

    async def scrub(self) -> None:
        await self._db.scrub()

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
        if self._committer is not None:
            await asyncio.gather(self._committer, return_exceptions=True)
        await self._db.close()
