"""ErasureLog on its own SQLite file, beside the stores but not one of them.

    erasure (service TEXT, subject BLOB, erased_at_ms INTEGER, PRIMARY KEY (service, subject))

The file is not among the stores `loom backup` copies, so restoring an older backup never
rolls the log back with the data.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from storage.ports import Erasure
from storage.sqlite import versions
from storage.sqlite.database import SqliteDatabase

__all__ = ["SqliteErasureLog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS erasure (
    service TEXT NOT NULL,
    subject BLOB NOT NULL,
    erased_at_ms INTEGER NOT NULL,
    PRIMARY KEY (service, subject)
) WITHOUT ROWID;
"""


class SqliteErasureLog:
    """`storage.ports.ErasureLog` on one SQLite file."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: Path, *, synchronous: str = "FULL") -> SqliteErasureLog:
        """Opens (creating when missing) the log at `path`."""
        db = SqliteDatabase(path, synchronous=synchronous, readers=1)
        await db.migrate(_SCHEMA, versions.ERASURES)
        return cls(db)

    async def record(self, erasures: Sequence[Erasure]) -> None:
        rows = [(e.service, e.subject, e.erased_at_ms) for e in erasures]

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO erasure (service, subject, erased_at_ms) VALUES (?, ?, ?) "
                "ON CONFLICT (service, subject) DO NOTHING",
                rows,
            )

        if rows:
            await self._db.write(run)

    async def subjects(self, service: str) -> frozenset[bytes]:
        def run(conn: sqlite3.Connection) -> frozenset[bytes]:
            found = conn.execute("SELECT subject FROM erasure WHERE service = ?", (service,))
            return frozenset(bytes(s) for (s,) in found)

        return await self._db.read(run)

    async def count(self) -> int:
        def run(conn: sqlite3.Connection) -> int:
            return int(conn.execute("SELECT count(*) FROM erasure").fetchone()[0])

        return await self._db.read(run)

    async def close(self) -> None:
        await self._db.close()
