"""How the SQLite TemplateStore writes and counts a batch: a few multi-row statements.

sqlite3 releases the GIL around every statement step and takes it back after; on a busy
event loop each of those hand-backs is a wait and a context switch. A statement per email
(two per email, three per counted row) did that hundreds of times per batch; one statement
per power of two of the batch's rows (at most `_MAX_ROWS`) does it a handful of times, and
a handful of SQL texts serve every batch (sqlite3 caches prepared statements by text).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Sequence

from storage.ports import ClusterCounts, ClusterWrite

__all__ = ["counts", "tune_writer", "write_cells"]

_WAL_CHECKPOINT_PAGES = 10_000
"""The writer checkpoints the WAL every this many pages (SQLite's default: 1,000). Every
batch dirties a leaf page per cluster it touches, mostly the same hot clusters' pages: a
checkpoint copies each page once however often it changed since the last, so a longer
interval copies far fewer pages (the WAL grows to ~40 MB between checkpoints)."""
_WRITER_CACHE_KIB = 32 * 1024
"""The writer's page cache (SQLite's default: 2 MB): the clusters' hot leaf pages stay in
it instead of being read back from the file system at every batch."""


def tune_writer(conn: sqlite3.Connection) -> None:
    """The writer connection's checkpoint interval and page cache (see the constants)."""
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


def counts(
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


def write_cells(conn: sqlite3.Connection, writes: Sequence[ClusterWrite], now: int) -> None:
    """Stores each write's email and user cells (stored at `now`), cluster by cluster: each
    B-tree page is visited once per batch."""
    if not writes:
        return
    rows = sorted(writes, key=lambda w: w.key)
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
