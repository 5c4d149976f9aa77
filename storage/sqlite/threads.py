"""ThreadStore on the embedded SQLite engine.

Tables mirror the seed's Scylla schema, with the reverse lookups as covering indexes:

    thread_ut (gid, thread_id) -> ut          index by (ut, gid, thread_id): UT -> threads
    rfc_ut    (md5 Message-ID) -> ut, sent_at index by (ut, sent_at):      UT -> stats
    ut_merge  (a, b)            both directions stored:                    UT -> links
    thread_msg (gid, thread_id, md5 Message-ID) -> sent_at   thread -> its messages (edges)
    ut_retired (ut)             UTs a deletion's rebuild is moving rows away from

`get_links` and `read_uts` walk the link graph themselves (one recursive query) and cover
every UT they reach, with its team threads and stats, in one read transaction: a whole
unified-thread read is one thread hop after the thread's own lookup.

Scans (`loom dump`) page by keyset on each primary key: every page is one short read
transaction that starts after the last key of the page before (no cursor held between
pages). They read one consistent snapshot per page, not one for the whole scan.

Insert-if-absent reads the batch's winners in bulk and inserts only the absent keys, inside
one IMMEDIATE transaction on the single writer thread, so no other writer (thread or process)
can slip in between; a batch of keys already mapped (most copies of a Message-ID) writes
nothing.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from storage.ports import MessageMapping, ThreadKey, UnifiedStats, UtRows
from storage.slices import slices
from storage.sqlite import versions
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.thread_unweave import SqliteThreadUnweaving

__all__ = ["SqliteThreadStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS thread_ut (
    gid TEXT NOT NULL, thread_id TEXT NOT NULL, ut TEXT NOT NULL,
    PRIMARY KEY (gid, thread_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS thread_ut_by_ut ON thread_ut (ut, gid, thread_id);
CREATE TABLE IF NOT EXISTS rfc_ut (
    rfc_key BLOB NOT NULL PRIMARY KEY, ut TEXT NOT NULL, sent_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rfc_ut_by_ut ON rfc_ut (ut, sent_at);
CREATE TABLE IF NOT EXISTS ut_merge (
    a TEXT NOT NULL, b TEXT NOT NULL, PRIMARY KEY (a, b)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS thread_msg (
    gid TEXT NOT NULL, thread_id TEXT NOT NULL, rfc_key BLOB NOT NULL, sent_at INTEGER NOT NULL,
    PRIMARY KEY (gid, thread_id, rfc_key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ut_retired (ut TEXT NOT NULL PRIMARY KEY) WITHOUT ROWID;
"""

T = TypeVar("T")

_CHUNK = 500  # bound parameters per statement, well under SQLite's limit
_MAX_REACH = 20_000  # UTs one walk of the link graph may visit


class SqliteThreadStore(SqliteThreadUnweaving):
    """`storage.ports.ThreadStore` on one SQLite file."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    @classmethod
    async def open(
        cls, path: Path, *, synchronous: str = "FULL", readers: int = 4
    ) -> SqliteThreadStore:
        """Opens (creating when missing) the database at `path`."""
        db = SqliteDatabase(path, synchronous=synchronous, readers=readers)
        await db.migrate(_SCHEMA, versions.THREADS)
        return cls(db)

    async def get_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        pairs = list(dict.fromkeys((key.gid, key.thread_id) for key in threads))
        if not pairs:
            return {}
        found = await self._db.read(lambda conn: _thread_uts(conn, pairs))
        return {ThreadKey(gid, thread_id): ut for (gid, thread_id), ut in found.items()}

    async def put_thread_uts_if_absent(self, items: Sequence[tuple[ThreadKey, str]]) -> list[str]:
        order = [(key.gid, key.thread_id) for key, _ in items]
        first: dict[tuple[str, str], str] = {}
        for pair, (_, ut) in zip(order, items, strict=True):
            first.setdefault(pair, ut)

        def run(conn: sqlite3.Connection) -> list[str]:
            # Read the winners first, insert only the absent keys (an earlier item of the
            # batch wins over a later one): inside this one IMMEDIATE transaction nobody else
            # writes in between, and a batch of repeats costs no write.
            won = _thread_uts(conn, list(first))
            new = [
                (gid, thread_id, ut)
                for (gid, thread_id), ut in first.items()
                if (gid, thread_id) not in won
            ]
            conn.executemany("INSERT INTO thread_ut (gid, thread_id, ut) VALUES (?, ?, ?)", new)
            won.update(((gid, thread_id), ut) for gid, thread_id, ut in new)
            return [won[pair] for pair in order]

        return await self._db.write(run) if items else []

    async def put_message_uts_if_absent(self, items: Sequence[MessageMapping]) -> list[str]:
        first: dict[bytes, tuple[str, int]] = {}
        for m in items:
            first.setdefault(m.rfc_key, (m.ut, m.sent_at_ms))

        def run(conn: sqlite3.Connection) -> list[str]:
            # As put_thread_uts_if_absent: winners read in bulk, absent keys inserted.
            won: dict[bytes, str] = {}
            for chunk in slices(list(first), _CHUNK):
                marks = ",".join("?" * len(chunk))
                won.update(
                    conn.execute(
                        f"SELECT rfc_key, ut FROM rfc_ut WHERE rfc_key IN ({marks})", chunk
                    )
                )
            new = [(key, ut, sent) for key, (ut, sent) in first.items() if key not in won]
            conn.executemany("INSERT INTO rfc_ut (rfc_key, ut, sent_at) VALUES (?, ?, ?)", new)
            won.update((key, ut) for key, ut, _ in new)
            return [won[m.rfc_key] for m in items]

        return await self._db.write(run) if items else []

    async def add_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        rows = sorted({(a, b) for x, y in pairs if x != y for a, b in ((x, y), (y, x))})
        if not rows:
            return

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO ut_merge (a, b) VALUES (?, ?) ON CONFLICT DO NOTHING", rows
            )

        await self._db.write(run)

    async def remove_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        rows = sorted({(a, b) for x, y in pairs for a, b in ((x, y), (y, x))})
        if not rows:
            return

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany("DELETE FROM ut_merge WHERE a = ? AND b = ?", rows)

        await self._db.write(run)

    async def get_links(self, uts: Sequence[str]) -> dict[str, frozenset[str]]:
        wanted = list(dict.fromkeys(uts))
        return await self._db.read(lambda conn: _links(conn, wanted)) if wanted else {}

    async def read_uts(
        self, uts: Sequence[str], gids: frozenset[str] | None, thread_limit: int
    ) -> UtRows:
        wanted = list(dict.fromkeys(uts))
        team = sorted(gids) if gids is not None else None
        if not wanted:
            return UtRows(links={}, threads=[], stats=UnifiedStats(0, None))

        def run(conn: sqlite3.Connection) -> UtRows:
            limit = thread_limit if team != [] else 0
            links = _links(conn, wanted)
            covered = list(links)
            return UtRows(
                links=links,
                threads=_threads(conn, covered, team, limit) if limit > 0 else [],
                stats=_stats(conn, covered),
            )

        return await self._db.read(run)

    async def scan_thread_uts(self, page: int) -> AsyncIterator[list[tuple[ThreadKey, str]]]:
        async with contextlib.aclosing(
            self._scan("thread_ut", ("gid", "thread_id"), "ut", page)
        ) as scan:
            async for rows in scan:
                yield [(ThreadKey(gid, thread_id), ut) for gid, thread_id, ut in rows]

    async def scan_message_uts(self, page: int) -> AsyncIterator[list[MessageMapping]]:
        async with contextlib.aclosing(
            self._scan("rfc_ut", ("rfc_key",), "ut, sent_at", page)
        ) as scan:
            async for rows in scan:
                yield [
                    MessageMapping(rfc_key=key, ut=ut, sent_at_ms=sent) for key, ut, sent in rows
                ]

    async def scan_links(self, page: int) -> AsyncIterator[list[tuple[str, str]]]:
        # Both directions are stored (in one transaction): keep the one with a < b. The
        # filter is applied here, not in SQL, so a page reads at most `page` rows however
        # many reverse rows lie in a row (a hub's members, all larger than the hub).
        held: list[tuple[str, str]] = []
        async with contextlib.aclosing(self._scan("ut_merge", ("a", "b"), "", page)) as scan:
            async for rows in scan:
                held += [(a, b) for a, b in rows if a < b]
                if len(held) >= page:
                    yield held[:page]
                    held = held[page:]
        if held:
            yield held

    async def _scan(
        self, table: str, key: tuple[str, ...], rest: str, page: int
    ) -> AsyncGenerator[list[tuple[Any, ...]], None]:
        """Every row of `table` as (*key, *rest) in pages of `page` rows (the last shorter,
        none empty): keyset pagination on its primary key `key`, one short read per page."""
        if page < 1:
            raise ValueError(f"page must be at least 1, not {page}")
        columns = ", ".join((*key, rest) if rest else key)
        first = f"SELECT {columns} FROM {table} ORDER BY {', '.join(key)} LIMIT ?"
        marks = ", ".join("?" * len(key))
        later = (
            f"SELECT {columns} FROM {table} WHERE ({', '.join(key)}) > ({marks})"
            f" ORDER BY {', '.join(key)} LIMIT ?"
        )
        after: tuple[Any, ...] | None = None
        while True:
            sql, params = (first, (page,)) if after is None else (later, (*after, page))
            rows = await self._db.read(functools.partial(_fetch, sql=sql, params=params))
            if rows:
                yield rows
            if len(rows) < page:
                return
            after = rows[-1][: len(key)]

    async def close(self) -> None:
        await self._db.close()


def _fetch(
    conn: sqlite3.Connection, *, sql: str, params: Sequence[object]
) -> list[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchall()


def _thread_uts(
    conn: sqlite3.Connection, pairs: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """The UT of every (gid, thread_id) in `pairs` that has one: a join on the primary key
    per chunk (a row-value `IN (VALUES …)` would scan the table)."""
    found: dict[tuple[str, str], str] = {}
    for chunk in slices(pairs, _CHUNK // 2):
        marks = ",".join(["(?, ?)"] * len(chunk))
        rows = conn.execute(
            f"WITH k(gid, thread_id) AS (VALUES {marks}) SELECT t.gid, t.thread_id, t.ut"
            " FROM k JOIN thread_ut t ON t.gid = k.gid AND t.thread_id = k.thread_id",
            [part for pair in chunk for part in pair],
        )
        found.update(((gid, thread_id), ut) for gid, thread_id, ut in rows)
    return found


def _links(conn: sqlite3.Connection, uts: Sequence[str]) -> dict[str, frozenset[str]]:
    """The complete links of every UT reachable from `uts` (each of `uts` is a key).

    One recursive query walks the whole link graph from `uts`, so a read needs no second
    round trip on this engine. The walk stops after `_MAX_REACH` UTs (an abused Message-ID);
    what it reached is still reported complete, and the caller's own bound refuses the rest.
    """
    found: dict[str, set[str]] = {ut: set() for ut in uts}
    rows = conn.execute(
        "WITH RECURSIVE reach(ut) AS ("
        " SELECT value FROM json_each(?)"
        " UNION SELECT m.b FROM ut_merge m JOIN reach r ON m.a = r.ut LIMIT ?)"
        " SELECT r.ut, m.b FROM reach r LEFT JOIN ut_merge m ON m.a = r.ut",
        (json.dumps(list(uts)), _MAX_REACH),
    )
    for a, b in rows:
        linked = found.setdefault(a, set())
        if b is not None:
            linked.add(b)
    return {ut: frozenset(linked) for ut, linked in found.items()}


def _threads(
    conn: sqlite3.Connection, uts: Sequence[str], team: list[str] | None, limit: int
) -> list[ThreadKey]:
    # Driven by the (ut, gid, thread_id) index; the team rides along as one JSON array
    # (json_each, whatever its size), which SQLite materializes once for the IN test.
    team_sql = "AND gid IN (SELECT value FROM json_each(?)) " if team is not None else ""
    team_param = (json.dumps(team),) if team is not None else ()
    out: list[ThreadKey] = []
    for chunk in slices(uts, _CHUNK):
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT gid, thread_id FROM thread_ut WHERE ut IN ({marks}) {team_sql}LIMIT ?",
            (*chunk, *team_param, limit - len(out)),
        )
        out.extend(ThreadKey(g, t) for g, t in rows)
        if len(out) >= limit:
            break
    return out


def _stats(conn: sqlite3.Connection, uts: Sequence[str]) -> UnifiedStats:
    count, latest = 0, None
    for chunk in slices(uts, _CHUNK):
        marks = ",".join("?" * len(chunk))
        n, last = conn.execute(
            f"SELECT COUNT(*), MAX(sent_at) FROM rfc_ut WHERE ut IN ({marks})", chunk
        ).fetchone()
        count += n
        if last is not None and (latest is None or last > latest):
            latest = last
    return UnifiedStats(message_count=count, last_message_at_ms=latest)
