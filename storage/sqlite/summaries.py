"""SummaryStore on the embedded SQLite engine: one row per message, compare-and-set by version.

    summary (message_id TEXT PRIMARY KEY, version INTEGER, data BLOB)

A conditional write is a single statement inside one IMMEDIATE transaction on the single
writer thread: ``INSERT ... ON CONFLICT DO NOTHING`` to create, ``UPDATE ... WHERE version = ?``
to update; ``changes()`` says whether it happened. No other writer (thread or process) can
slip in between, which is the same guarantee DynamoDB's ConditionExpression gives.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from storage.ports import StoredSummary
from storage.sqlite import versions
from storage.sqlite.database import SqliteDatabase

__all__ = ["SqliteSummaryStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS summary (
    message_id TEXT NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL,
    data BLOB NOT NULL
) WITHOUT ROWID;
"""


def _page_after(
    after: str | None, page: int
) -> Callable[[sqlite3.Connection], list[tuple[str, bytes, int]]]:
    """The read of up to `page` summaries whose id sorts after `after` (None: the first)."""
    where, params = ("", (page,)) if after is None else ("WHERE message_id > ? ", (after, page))

    def run(conn: sqlite3.Connection) -> list[tuple[str, bytes, int]]:
        rows = conn.execute(
            f"SELECT message_id, data, version FROM summary {where}ORDER BY message_id LIMIT ?",
            params,
        )
        return [(str(m), bytes(d), int(v)) for m, d, v in rows]

    return run


class SqliteSummaryStore:
    """`storage.ports.SummaryStore` on one SQLite file."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    @classmethod
    async def open(
        cls, path: Path, *, synchronous: str = "FULL", readers: int = 4
    ) -> SqliteSummaryStore:
        """Opens (creating when missing) the database at `path`."""
        db = SqliteDatabase(path, synchronous=synchronous, readers=readers)
        await db.migrate(_SCHEMA, versions.SUMMARIES)
        return cls(db)

    async def get(self, message_id: str) -> StoredSummary | None:
        def run(conn: sqlite3.Connection) -> StoredSummary | None:
            row = conn.execute(
                "SELECT data, version FROM summary WHERE message_id = ?", (message_id,)
            ).fetchone()
            return None if row is None else StoredSummary(bytes(row[0]), int(row[1]))

        return await self._db.read(run)

    async def put_if_version(
        self, message_id: str, data: bytes, expected_version: int | None
    ) -> bool:
        blob = bytes(data)

        def run(conn: sqlite3.Connection) -> bool:
            if expected_version is None:
                cursor = conn.execute(
                    "INSERT INTO summary (message_id, version, data) VALUES (?, 1, ?) "
                    "ON CONFLICT DO NOTHING",
                    (message_id, blob),
                )
            else:
                cursor = conn.execute(
                    "UPDATE summary SET data = ?, version = version + 1 "
                    "WHERE message_id = ? AND version = ?",
                    (blob, message_id, expected_version),
                )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def page_after(
        self, after: str | None, limit: int
    ) -> tuple[list[tuple[str, StoredSummary]], str | None]:
        if limit < 1:
            raise ValueError(f"page limit must be at least 1, not {limit}")
        rows = await self._db.read(_page_after(after, limit))
        found = [(m, StoredSummary(d, v)) for m, d, v in rows]
        return found, (rows[-1][0] if len(rows) == limit else None)

    async def scrub(self) -> None:
        await self._db.scrub()

    async def scan(self, page: int) -> AsyncIterator[list[tuple[str, StoredSummary]]]:
        # Keyset pagination on the primary key: each page is one short read starting after
        # the previous page's last id, so no cursor (nor read transaction) outlives a page
        # and the writer never waits behind a dump.
        if page < 1:
            raise ValueError(f"scan page must be at least 1, not {page}")
        after: str | None = None
        while True:
            rows = await self._db.read(_page_after(after, page))
            if rows:
                yield [(m, StoredSummary(d, v)) for m, d, v in rows]
            if len(rows) < page:
                return
            after = rows[-1][0]

    async def close(self) -> None:
        await self._db.close()
