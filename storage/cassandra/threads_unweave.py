"""The Cassandra ThreadStore's deletion support: edges, rehoming, retired marks.

    thread_msgs ((gid), thread_id, rfc_key) -> sent_at   thread -> messages; a mailbox's
                                                          threads are one partition (an
                                                          empty rfc_key: the thread is mapped)
    ut_retired  (ut)                                      UTs a rebuild is moving away from

Forward rows (``thread_ut``, ``rfc_ut``) are written by LWT everywhere else, so they are
rewritten and deleted by LWT here too (``IF EXISTS``): mixing plain writes with Paxos on
one partition may lose either. Reverse rows are plain idempotent writes, new ones first, so a
crash leaves a forward row whose new reverse row exists (the next rebuild completes it).

Tombstones (Yammer's lesson): a rebuild deletes rows only in partitions no read reaches
again: the reverse rows of retired UTs (every live row now names a new UT), the forward rows
of removed threads and messages (point reads by key), and a removed thread's edges (a range
delete of its clustering prefix in its mailbox's partition; UnweaveMailbox leaves the whole
partition deleted). So no serving read scans them. They go at compaction once
``gc_grace_seconds`` (the tables' default, 10 days, for the edges and retired marks) has
passed, the window in which a replica that missed a delete is repaired; until then they
take disk, not read time.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.cassandra.session import Row, gather
from storage.cassandra.store import CassandraStore, integer, text
from storage.errors import StorageCorrupt
from storage.ports import MessageMapping, ThreadKey, ThreadMessage
from storage.slices import slices

__all__ = ["UNWEAVE_TABLES", "ThreadUnweaving"]

_COMPACTION = "WITH compaction = {'class': 'SizeTieredCompactionStrategy'}"
UNWEAVE_TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.thread_msgs (gid text, thread_id text, rfc_key blob, "
    "sent_at bigint, PRIMARY KEY (gid, thread_id, rfc_key)) " + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.ut_retired (ut text PRIMARY KEY) " + _COMPACTION,
)
_KEYS_PER_IN = 100


class ThreadUnweaving(CassandraStore):
    """The deletion methods of `storage.ports.ThreadStore` on Cassandra (module doc)."""

    async def _reverse_rows(
        self, cql: str, rows: Sequence[tuple[str, *tuple[object, ...]]]
    ) -> None:
        raise NotImplementedError  # CassandraThreadStore's

    async def put_thread_messages(self, edges: Sequence[ThreadMessage]) -> None:
        rows = sorted({(e.thread.gid, e.thread.thread_id, e.rfc_key, e.sent_at_ms) for e in edges})
        await self._reverse_rows(
            "INSERT INTO {ks}.thread_msgs (gid, thread_id, rfc_key, sent_at) VALUES (?, ?, ?, ?)",
            rows,
        )

    async def get_thread_messages(
        self, threads: Sequence[ThreadKey]
    ) -> dict[ThreadKey, dict[bytes, int]]:
        by_gid: dict[str, list[str]] = {}
        for t in dict.fromkeys(threads):
            by_gid.setdefault(t.gid, []).append(t.thread_id)

        async def one(gid: str, ids: Sequence[str]) -> list[Row]:
            return await self._q(
                "SELECT gid, thread_id, rfc_key, sent_at FROM {ks}.thread_msgs "
                "WHERE gid = ? AND thread_id IN ?",
                (gid, list(ids)),
                all_pages=True,
            )

        out: dict[ThreadKey, dict[bytes, int]] = {}
        found = await gather(
            one(gid, chunk) for gid, ids in by_gid.items() for chunk in slices(ids, _KEYS_PER_IN)
        )
        for rows in found:
            for r in rows:
                if key := _key(r):  # the empty key is the thread's mailbox row, no edge
                    thread = ThreadKey(text(r, "gid"), text(r, "thread_id"))
                    out.setdefault(thread, {})[key] = integer(r, "sent_at")
        return out

    async def _mailbox_rows(self, threads: Sequence[ThreadKey]) -> None:
        """Lists mapped threads under their mailbox (an empty-key ``thread_msgs`` row), so
        `get_mailbox_threads` finds a thread mapped without edges (a loaded dump's)."""
        await self._reverse_rows(
            "INSERT INTO {ks}.thread_msgs (gid, thread_id, rfc_key, sent_at) VALUES (?, ?, ?, 0)",
            [(t.gid, t.thread_id, b"") for t in sorted(set(threads))],
        )

    async def get_message_uts(self, keys: Sequence[bytes]) -> dict[bytes, MessageMapping]:
        async def one(chunk: Sequence[bytes]) -> list[Row]:
            return await self._q(
                "SELECT rfc_key, ut, sent_at FROM {ks}.rfc_ut WHERE rfc_key IN ?",
                (list(chunk),),
                all_pages=True,
            )

        out: dict[bytes, MessageMapping] = {}
        for rows in await gather(one(c) for c in slices(list(dict.fromkeys(keys)), _KEYS_PER_IN)):
            for r in rows:
                key = _key(r)
                out[key] = MessageMapping(
                    rfc_key=key, ut=text(r, "ut"), sent_at_ms=integer(r, "sent_at")
                )
        return out

    async def get_ut_messages(self, uts: Sequence[str]) -> list[MessageMapping]:
        async def one(chunk: Sequence[str]) -> list[Row]:
            return await self._q(
                "SELECT ut, rfc_key, sent_at FROM {ks}.ut_messages WHERE ut IN ?",
                (list(chunk),),
                all_pages=True,
            )

        found = await gather(one(c) for c in slices(list(dict.fromkeys(uts)), _KEYS_PER_IN))
        return [
            MessageMapping(rfc_key=_key(r), ut=text(r, "ut"), sent_at_ms=integer(r, "sent_at"))
            for rows in found
            for r in rows
        ]

    async def _current_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        by_gid: dict[str, list[str]] = {}
        for t in dict.fromkeys(threads):
            by_gid.setdefault(t.gid, []).append(t.thread_id)

        async def one(gid: str, ids: Sequence[str]) -> list[Row]:
            return await self._q(
                "SELECT gid, thread_id, ut FROM {ks}.thread_ut WHERE gid = ? AND thread_id IN ?",
                (gid, list(ids)),
                all_pages=True,
            )

        found = await gather(
            one(gid, chunk) for gid, ids in by_gid.items() for chunk in slices(ids, _KEYS_PER_IN)
        )
        return {
            ThreadKey(text(r, "gid"), text(r, "thread_id")): text(r, "ut")
            for rows in found
            for r in rows
        }

    async def rehome(
        self,
        threads: Sequence[tuple[ThreadKey, str | None]],
        messages: Sequence[MessageMapping],
        dropped_messages: Sequence[bytes],
    ) -> None:
        old_threads = await self._current_thread_uts([t for t, _ in threads]) if threads else {}
        keys = [m.rfc_key for m in messages] + list(dropped_messages)
        old_messages = await self.get_message_uts(keys) if keys else {}
        moved = [(t, ut) for t, ut in threads if ut is not None and t in old_threads]
        gone = [t for t, ut in threads if ut is None and t in old_threads]
        await self._reverse_rows(
            "INSERT INTO {ks}.ut_threads (ut, gid, thread_id) VALUES (?, ?, ?)",
            [(ut, t.gid, t.thread_id) for t, ut in moved],
        )
        await self._reverse_rows(
            "INSERT INTO {ks}.ut_messages (ut, rfc_key, sent_at) VALUES (?, ?, ?)",
            [(m.ut, m.rfc_key, m.sent_at_ms) for m in messages if m.rfc_key in old_messages],
        )
        await gather(
            [
                *(
                    self._q(
                        "UPDATE {ks}.thread_ut SET ut = ?, recorded = true "
                        "WHERE gid = ? AND thread_id = ? IF EXISTS",
                        (ut, t.gid, t.thread_id),
                    )
                    for t, ut in moved
                ),
                *(
                    self._q(
                        "DELETE FROM {ks}.thread_ut WHERE gid = ? AND thread_id = ? IF EXISTS",
                        (t.gid, t.thread_id),
                    )
                    for t in gone
                ),
                *(
                    self._q(
                        "UPDATE {ks}.rfc_ut SET ut = ?, sent_at = ? WHERE rfc_key = ? IF EXISTS",
                        (m.ut, m.sent_at_ms, m.rfc_key),
                    )
                    for m in messages
                    if m.rfc_key in old_messages
                ),
                *(
                    self._q("DELETE FROM {ks}.rfc_ut WHERE rfc_key = ? IF EXISTS", (key,))
                    for key in dropped_messages
                    if key in old_messages
                ),
            ]
        )
        new_ut = dict(moved)
        await self._reverse_rows(
            "DELETE FROM {ks}.ut_threads WHERE ut = ? AND gid = ? AND thread_id = ?",
            [
                (old, t.gid, t.thread_id)
                for t, old in old_threads.items()
                if new_ut.get(t, old) != old or t in gone
            ],
        )
        new_message_ut = {m.rfc_key: m.ut for m in messages}
        await self._reverse_rows(
            "DELETE FROM {ks}.ut_messages WHERE ut = ? AND rfc_key = ?",
            [(m.ut, key) for key, m in old_messages.items() if new_message_ut.get(key, "") != m.ut],
        )

    async def remove_thread_messages(self, threads: Sequence[ThreadKey]) -> None:
        await gather(
            self._q(
                "DELETE FROM {ks}.thread_msgs WHERE gid = ? AND thread_id = ?",
                (t.gid, t.thread_id),
            )
            for t in sorted(set(threads))
        )

    async def get_mailbox_threads(self, gid: str) -> list[ThreadKey]:
        rows = await self._q(
            "SELECT thread_id FROM {ks}.thread_msgs WHERE gid = ?", (gid,), all_pages=True
        )
        return [
            ThreadKey(gid, thread_id)
            for thread_id in dict.fromkeys(text(r, "thread_id") for r in rows)
        ]

    async def retire_uts(self, uts: Sequence[str]) -> None:
        await gather(
            self._q("INSERT INTO {ks}.ut_retired (ut) VALUES (?)", (ut,)) for ut in sorted(set(uts))
        )

    async def get_retired(self, uts: Sequence[str]) -> frozenset[str]:
        async def one(chunk: Sequence[str]) -> list[Row]:
            return await self._q(
                "SELECT ut FROM {ks}.ut_retired WHERE ut IN ?", (list(chunk),), all_pages=True
            )

        found = await gather(one(c) for c in slices(list(dict.fromkeys(uts)), _KEYS_PER_IN))
        return frozenset(text(r, "ut") for rows in found for r in rows)

    async def forget_retired(self, uts: Sequence[str]) -> None:
        await gather(
            self._q("DELETE FROM {ks}.ut_retired WHERE ut = ?", (ut,)) for ut in sorted(set(uts))
        )

    async def scrub(self) -> None:
        """Nothing to do here: deleted rows leave Cassandra's files at compaction."""


def _key(r: Row) -> bytes:
    key = r.get("rfc_key")
    if not isinstance(key, bytes):
        raise StorageCorrupt(f"cassandra: rfc_key is {key!r}")
    return key
