"""Streak's pre-threadweaver unification: breadth-first search with one SQL query per level.

This is the baseline ThreadWeaver is measured against, implemented as the write-up shows
and as well as a competent engineer would: indexes on ``md5_rfc_message_id`` and on
``(gid, thread_id)``, one query per BFS level whose frontier is only the threads found in
the previous level::

    SELECT DISTINCT m2.gid, m2.thread_id FROM messages m1
    JOIN messages m2 USING (md5_rfc_message_id)
    WHERE (m1.gid, m1.thread_id) IN (:frontier) AND m2.gid IN (:gidList)

Two spellings differ from the write-up, neither changing the result: the join is a
``CROSS JOIN`` and the frontier list is ``IN (SELECT column1, column2 FROM (VALUES ...))``.
Left alone, SQLite's planner drives the join from ``m2.gid IN (:gidList)`` and scans every
team message on every level (measured ~10x slower on the default corpus); these are
SQLite's documented ways to pin the plan TiDB would pick — frontier threads via the
``(gid, thread_id)`` index, then their Message-IDs via the ``md5_rfc_message_id`` index —
so the baseline is the fast version of the old design, not a straw man. A frontier larger
than ``FRONTIER_CHUNK`` threads is sent as several queries, because SQLite caps bound
parameters; the work done is the same.

SQLite connections are per thread, so :meth:`BfsBaseline.unified_threads_async` can run
concurrent searches via ``asyncio.to_thread`` and be timed by the same harness as the RPCs.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadtest.corpora.threadweaver import ThreadKey, WovenMessage

__all__ = ["FRONTIER_CHUNK", "BfsBaseline", "BfsResult", "md5_hex"]

FRONTIER_CHUNK = 500
"""Threads per query (2 parameters each), well under SQLite's 32,766-parameter limit."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    gid TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    md5_rfc_message_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_rfc ON messages (md5_rfc_message_id, gid, thread_id);
CREATE INDEX IF NOT EXISTS messages_by_thread ON messages (gid, thread_id, md5_rfc_message_id);
"""


def md5_hex(rfc_message_id: str) -> str:
    """The Message-ID key as Streak stored it."""
    return hashlib.md5(rfc_message_id.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class BfsResult:
    """Threads found, and how much work it took (levels = SQL round trips that mattered)."""

    threads: frozenset[ThreadKey]
    levels: int
    queries: int


class BfsBaseline:
    """A SQLite ``messages`` table and the iterative BFS over it."""

    def __init__(self, path: Path) -> None:
        """Use (or create) the database file at ``path``; a file, so threads can share it."""
        self.path = path
        self._local = threading.local()
        with self._connect() as conn:
            conn.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=True, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")
        return conn

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def load(self, messages: Iterable[WovenMessage]) -> int:
        """Insert every message copy (one row each) and ANALYZE; returns rows inserted."""
        conn = self._conn()
        rows = ((m.gid, m.thread_id, md5_hex(m.rfc_message_id)) for m in messages)
        conn.execute("BEGIN")
        cur = conn.executemany("INSERT INTO messages VALUES (?, ?, ?)", rows)
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        return cur.rowcount

    def query_plan(self, frontier_size: int = 2, team_size: int = 2) -> list[str]:
        """``EXPLAIN QUERY PLAN`` of one BFS level, to check the indexes are used."""
        sql = _level_sql(frontier_size, team_size)
        params = ["x"] * (2 * frontier_size + team_size)
        return [row[3] for row in self._conn().execute(f"EXPLAIN QUERY PLAN {sql}", params)]

    def unified_threads(self, gid: str, thread_id: str, team_gids: Sequence[str]) -> BfsResult:
        """All team threads reachable from ``(gid, thread_id)`` through shared Message-IDs."""
        conn = self._conn()
        team = list(dict.fromkeys(team_gids))
        found: set[ThreadKey] = {(gid, thread_id)}
        frontier: list[ThreadKey] = [(gid, thread_id)]
        levels = queries = 0
        while frontier:
            levels += 1
            new: set[ThreadKey] = set()
            for start in range(0, len(frontier), FRONTIER_CHUNK):
                chunk = frontier[start : start + FRONTIER_CHUNK]
                params = [v for key in chunk for v in key] + team
                queries += 1
                for g, t in conn.execute(_level_sql(len(chunk), len(team)), params):
                    if (g, t) not in found:
                        new.add((g, t))
            found |= new
            frontier = sorted(new)
        return BfsResult(frozenset(found), levels, queries)

    async def unified_threads_async(
        self, gid: str, thread_id: str, team_gids: Sequence[str]
    ) -> BfsResult:
        """:meth:`unified_threads` on a worker thread, so the event loop keeps timing."""
        return await asyncio.to_thread(self.unified_threads, gid, thread_id, team_gids)

    def close(self) -> None:
        """Close this thread's connection (worker threads' close when they exit)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _level_sql(frontier_size: int, team_size: int) -> str:
    pairs = ", ".join(["(?, ?)"] * frontier_size)
    gids = ", ".join(["?"] * team_size)
    return (
        "SELECT DISTINCT m2.gid, m2.thread_id FROM messages m1 "
        "CROSS JOIN messages m2 USING (md5_rfc_message_id) "
        f"WHERE (m1.gid, m1.thread_id) IN (SELECT column1, column2 FROM (VALUES {pairs})) "
        f"AND m2.gid IN ({gids})"
    )
