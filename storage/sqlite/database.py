"""One SQLite database file served to asyncio: a single writer thread, a few readers.

SQLite allows one writer at a time; funnelling every write through one dedicated thread
makes each write function a transaction that no other writer can interleave with, which is
what insert-if-absent needs, and costs one thread hop per *batch* rather than per statement
(aiosqlite hops per statement, which would cap a 1,000-message batch at a few hundred per
second). WAL mode lets reader threads run beside the writer. Every sqlite3 error is
translated to `storage.errors` here, once.
"""

from __future__ import annotations

import asyncio
import fcntl
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from storage.errors import DriverErrors, StorageCorrupt, StorageError, StorageUnavailable
from storage.sqlite.versions import SqliteLayout, upgrade

__all__ = ["SqliteDatabase"]

R = TypeVar("R")


def _kind(exc: BaseException) -> type[StorageError]:
    if isinstance(exc, sqlite3.OperationalError | sqlite3.InterfaceError):
        return StorageUnavailable
    if isinstance(exc, sqlite3.DatabaseError) and "malformed" in str(exc):
        return StorageCorrupt
    return StorageError


_errors = DriverErrors("sqlite", (sqlite3.Error,), classify=_kind)


class SqliteDatabase:
    """A WAL-mode SQLite file with `write(fn)` / `read(fn)` running `fn(conn)` off the loop."""

    def __init__(
        self, path: Path, *, synchronous: str = "FULL", readers: int = 4, named_rows: bool = False
    ) -> None:
        """`named_rows`: rows come back as `sqlite3.Row`, read by column name (``row["seq"]``)
        as well as by position, for tables too wide to read by index without mistakes."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._synchronous = synchronous
        self._named_rows = named_rows
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"sqlite-w-{path.stem}")
        self._readers = ThreadPoolExecutor(max(1, readers), thread_name_prefix="sqlite-r")
        self._closed = False

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            # The busy timeout first: switching to WAL takes a lock that another process
            # (`loom serve --workers N`) may hold while it opens the same file.
            conn.execute("PRAGMA busy_timeout=5000")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            # Deleted rows are overwritten with zeros, not left in free space: an erased
            # subject must not be recoverable from the file (`scrub` empties the WAL too).
            conn.execute("PRAGMA secure_delete=ON")
            if self._named_rows:
                conn.row_factory = sqlite3.Row
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _in_transaction(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    def _read_only(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        conn = self._connection()
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    async def write(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """Runs `fn` in one IMMEDIATE transaction on the writer thread; commits or rolls back."""
        return await self._run(self._writer, self._in_transaction, fn)

    async def migrate(self, script: str, layout: SqliteLayout | None = None) -> None:
        """Runs an idempotent schema script (``CREATE ... IF NOT EXISTS``) on the writer;
        with `layout`, brings the file to that layout's version first
        (`storage.sqlite.versions.upgrade`: a newer file is refused before any write).

        One process at a time: the processes of ``loom serve --workers N`` open the same
        fresh files together, and the one that loses the race to switch a file to WAL is
        told "database is locked" at once — SQLite does not wait out a lock it would have to
        upgrade to, whatever the busy timeout — so start-up failed now and then. An exclusive
        `flock` on a file beside the database orders them (SQLite's own locks are `fcntl`
        locks on the database, which `flock` leaves alone).
        """

        def run(_: Callable[[sqlite3.Connection], None]) -> None:
            with self.path.with_name(f"{self.path.name}.open-lock").open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    if layout is None:
                        self._connection().executescript(script)
                    else:
                        upgrade(self._connection(), script, layout, self.path)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)

        await self._run(self._writer, run, lambda conn: None)

    async def scrub(self) -> None:
        """Copies the WAL into the file and truncates it to zero bytes, so the bytes of rows
        deleted so far (zeroed in the file by ``secure_delete``) survive in neither file.
        Erasures call it once their last delete has committed; readers holding an older
        snapshot make the checkpoint wait (``busy_timeout``), never fail."""

        def run(_: Callable[[sqlite3.Connection], None]) -> None:
            self._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

        await self._run(self._writer, run, lambda conn: None)

    async def read(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """Runs `fn` in a read transaction (a consistent snapshot) on a reader thread."""
        return await self._run(self._readers, self._read_only, fn)

    async def _run(
        self,
        pool: ThreadPoolExecutor,
        wrapper: Callable[[Callable[[sqlite3.Connection], R]], R],
        fn: Callable[[sqlite3.Connection], R],
    ) -> R:
        if self._closed:
            raise StorageUnavailable(f"sqlite database {self.path.name} is closed")
        loop = asyncio.get_running_loop()
        with _errors(self.path.name):
            # Shielded: once handed to the thread the transaction runs to its end anyway;
            # a cancelled caller must not leave the outcome unknown to the pool.
            return await asyncio.shield(loop.run_in_executor(pool, wrapper, fn))

    async def close(self) -> None:
        """Waits for queued work, then closes every connection."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._writer.shutdown, wait=True)
        await asyncio.to_thread(self._readers.shutdown, wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
