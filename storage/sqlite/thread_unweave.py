"""The SQLite ThreadStore's deletion support: edges, rehoming, retired marks, scrubbing.

Tables (created with the store's others, `storage.sqlite.threads`):

    thread_msg (gid, thread_id, md5 Message-ID) -> sent_at   thread -> its messages (edges)
    ut_retired (ut)             UTs a deletion's rebuild is moving rows away from

A mailbox's threads are a range of `thread_ut`'s and `thread_msg`'s primary keys. Every
rewrite is one IMMEDIATE transaction on the single writer thread; with ``secure_delete`` on,
deleted rows are zeroed in the file, and `scrub` truncates the WAL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from storage.ports import MessageMapping, ThreadKey, ThreadMessage
from storage.slices import slices
from storage.sqlite.database import SqliteDatabase

__all__ = ["SqliteThreadUnweaving"]

_CHUNK = 500  # bound parameters per statement, well under SQLite's limit


class SqliteThreadUnweaving:
    """The deletion methods of `storage.ports.ThreadStore` on SQLite (module doc)."""

    _db: SqliteDatabase

    async def put_thread_messages(self, edges: Sequence[ThreadMessage]) -> None:
        rows = sorted({(e.thread.gid, e.thread.thread_id, e.rfc_key, e.sent_at_ms) for e in edges})
        if not rows:
            return

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO thread_msg (gid, thread_id, rfc_key, sent_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                rows,
            )

        await self._db.write(run)

    async def get_thread_messages(
        self, threads: Sequence[ThreadKey]
    ) -> dict[ThreadKey, dict[bytes, int]]:
        pairs = list(dict.fromkeys((t.gid, t.thread_id) for t in threads))

        def run(conn: sqlite3.Connection) -> dict[ThreadKey, dict[bytes, int]]:
            out: dict[ThreadKey, dict[bytes, int]] = {}
            for chunk in slices(pairs, _CHUNK // 2):
                marks = ",".join(["(?, ?)"] * len(chunk))
                rows = conn.execute(
                    f"WITH k(gid, thread_id) AS (VALUES {marks})"
                    " SELECT e.gid, e.thread_id, e.rfc_key, e.sent_at FROM k JOIN thread_msg e"
                    " ON e.gid = k.gid AND e.thread_id = k.thread_id",
                    [part for pair in chunk for part in pair],
                )
                for gid, thread_id, key, sent in rows:
                    out.setdefault(ThreadKey(gid, thread_id), {})[key] = sent
            return out

        return await self._db.read(run) if pairs else {}

    async def get_message_uts(self, keys: Sequence[bytes]) -> dict[bytes, MessageMapping]:
        wanted = list(dict.fromkeys(keys))

        def run(conn: sqlite3.Connection) -> dict[bytes, MessageMapping]:
            out: dict[bytes, MessageMapping] = {}
            for chunk in slices(wanted, _CHUNK):
                marks = ",".join("?" * len(chunk))
                for key, ut, sent in conn.execute(
                    f"SELECT rfc_key, ut, sent_at FROM rfc_ut WHERE rfc_key IN ({marks})", chunk
                ):
                    out[key] = MessageMapping(rfc_key=key, ut=ut, sent_at_ms=sent)
            return out

        return await self._db.read(run) if wanted else {}

    async def get_ut_messages(self, uts: Sequence[str]) -> list[MessageMapping]:
        wanted = list(dict.fromkeys(uts))

        def run(conn: sqlite3.Connection) -> list[MessageMapping]:
            out: list[MessageMapping] = []
            for chunk in slices(wanted, _CHUNK):
                marks = ",".join("?" * len(chunk))
                out += [
                    MessageMapping(rfc_key=key, ut=ut, sent_at_ms=sent)
                    for key, ut, sent in conn.execute(
                        f"SELECT rfc_key, ut, sent_at FROM rfc_ut WHERE ut IN ({marks})", chunk
                    )
                ]
            return out

        return await self._db.read(run) if wanted else []

    async def rehome(
        self,
        threads: Sequence[tuple[ThreadKey, str | None]],
        messages: Sequence[MessageMapping],
        dropped_messages: Sequence[bytes],
    ) -> None:
        moved = [(ut, t.gid, t.thread_id) for t, ut in threads if ut is not None]
        gone = [(t.gid, t.thread_id) for t, ut in threads if ut is None]
        mapped = [(m.ut, m.sent_at_ms, m.rfc_key) for m in messages]
        dropped = [(key,) for key in dropped_messages]

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany("UPDATE thread_ut SET ut = ? WHERE gid = ? AND thread_id = ?", moved)
            conn.executemany("DELETE FROM thread_ut WHERE gid = ? AND thread_id = ?", gone)
            conn.executemany("UPDATE rfc_ut SET ut = ?, sent_at = ? WHERE rfc_key = ?", mapped)
            conn.executemany("DELETE FROM rfc_ut WHERE rfc_key = ?", dropped)

        if moved or gone or mapped or dropped:
            await self._db.write(run)

    async def remove_thread_messages(self, threads: Sequence[ThreadKey]) -> None:
        rows = sorted({(t.gid, t.thread_id) for t in threads})

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany("DELETE FROM thread_msg WHERE gid = ? AND thread_id = ?", rows)

        if rows:
            await self._db.write(run)

    async def get_mailbox_threads(self, gid: str) -> list[ThreadKey]:
        def run(conn: sqlite3.Connection) -> list[ThreadKey]:
            rows = conn.execute(
                "SELECT thread_id FROM thread_ut WHERE gid = ?1"
                " UNION SELECT thread_id FROM thread_msg WHERE gid = ?1",
                (gid,),
            )
            return [ThreadKey(gid, thread_id) for (thread_id,) in rows]

        return await self._db.read(run)

    async def retire_uts(self, uts: Sequence[str]) -> None:
        rows = [(ut,) for ut in sorted(set(uts))]

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany("INSERT INTO ut_retired (ut) VALUES (?) ON CONFLICT DO NOTHING", rows)

        if rows:
            await self._db.write(run)

    async def get_retired(self, uts: Sequence[str]) -> frozenset[str]:
        wanted = list(dict.fromkeys(uts))

        def run(conn: sqlite3.Connection) -> frozenset[str]:
            found: set[str] = set()
            for chunk in slices(wanted, _CHUNK):
                marks = ",".join("?" * len(chunk))
                found.update(
                    ut
                    for (ut,) in conn.execute(
                        f"SELECT ut FROM ut_retired WHERE ut IN ({marks})", chunk
                    )
                )
            return frozenset(found)

        return await self._db.read(run) if wanted else frozenset()

    async def forget_retired(self, uts: Sequence[str]) -> None:
        rows = [(ut,) for ut in sorted(set(uts))]

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany("DELETE FROM ut_retired WHERE ut = ?", rows)

        if rows:
            await self._db.write(run)

    async def scrub(self) -> None:
        await self._db.scrub()
