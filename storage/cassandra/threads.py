"""ThreadStore on Apache Cassandra: the seed's Scylla schema, without its secondary indexes.

    thread_ut   ((gid, thread_id)) -> ut             LWT INSERT ... IF NOT EXISTS
    rfc_ut      (rfc_key) -> ut, sent_at             LWT INSERT ... IF NOT EXISTS
    ut_threads  (ut, gid, thread_id)                 UT -> threads, clustered in read order
    ut_messages (ut, rfc_key) -> sent_at             UT -> stats: count(*) + max per partition
    ut_merges   (ut, neighbour)                      UT -> links, both directions of each

Reverse relations live in tables partitioned by UT rather than in secondary indexes (the
Yammer lesson: a secondary index read fans out to every node and is slow on hot paths).
They are plain idempotent inserts written for the *winner* on every call, so a crash between
an LWT and its reverse row heals the next time anybody writes that key.

A put first reads the keys it is given (an IN query per chunk); only keys not there yet pay
an LWT (a Paxos round costs several round trips between replicas). An LWT that is not
applied returns the row that beat it (`[applied]` = False plus the current columns), so
every writer learns the winner without a second read, as in the seed. Reads of many UTs
are IN queries on the partition key, chunked: one round trip per read level, with the
count and latest send time aggregated by Cassandra itself.

Scans (`loom dump`) are `storage.cassandra.threads_scan`'s; deletions (edges, rehoming,
retired marks) `storage.cassandra.threads_unweave`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from cassandra.query import BatchStatement, BatchType

from storage.cassandra import versions
from storage.cassandra.session import CassandraSession, Row, gather
from storage.cassandra.store import text
from storage.cassandra.threads_scan import ThreadScans
from storage.cassandra.threads_unweave import UNWEAVE_TABLES, ThreadUnweaving
from storage.errors import StorageCorrupt
from storage.ports import MessageMapping, ThreadKey, UnifiedStats, UtRows
from storage.slices import slices

__all__ = ["TABLES", "CassandraThreadStore"]

# Rows are written once (a thread row once more, to flag it recorded), so size-tiered
# compaction is right: leveled compaction only pays for its write amplification when a
# row's versions spread over many SSTables. Only links are ever deleted (pruned after a
# merge); their tombstones may go after an hour, since a link that comes back because a
# replica missed its delete is harmless (it still joins UTs of one conversation).
_COMPACTION = "WITH compaction = {'class': 'SizeTieredCompactionStrategy'}"

TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.thread_ut (gid text, thread_id text, ut text, "
    "recorded boolean, PRIMARY KEY ((gid, thread_id))) " + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.rfc_ut (rfc_key blob PRIMARY KEY, ut text, sent_at bigint) "
    + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.ut_threads (ut text, gid text, thread_id text, "
    "PRIMARY KEY (ut, gid, thread_id)) " + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.ut_messages (ut text, rfc_key blob, sent_at bigint, "
    "PRIMARY KEY (ut, rfc_key)) " + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.ut_merges (ut text, neighbour text, "
    "PRIMARY KEY (ut, neighbour)) " + _COMPACTION + " AND gc_grace_seconds = 3600",
    *UNWEAVE_TABLES,
)

_BATCH_BYTES = 4096  # estimated payload per reverse-row batch (server warns at 5 KiB)
_GIDS_PER_IN = 100  # clustering IN lists stay small: one slice per gid on the replica
_KEYS_PER_IN = 100  # partition keys per IN query: a bounded fan-out on the coordinator


class CassandraThreadStore(ThreadUnweaving, ThreadScans):
    """`storage.ports.PortableThreadStore` on one Cassandra keyspace (scans: `ThreadScans`)."""

    @classmethod
    async def on_session(
        cls, session: CassandraSession, *, owns_session: bool = False
    ) -> CassandraThreadStore:
        """A store on a session shared with other Cassandra stores (which it won't close)."""
        await versions.upgrade(session, TABLES, versions.THREADS)
        return cls(session, owns_session=owns_session)

    async def _thread_rows(self, threads: Iterable[ThreadKey]) -> dict[ThreadKey, tuple[str, bool]]:
        """(UT, recorded) of each mapped thread: one IN query per owner (and 100 threads)."""
        by_gid: dict[str, list[str]] = {}
        for key in dict.fromkeys(threads):
            by_gid.setdefault(key.gid, []).append(key.thread_id)

        async def one(gid: str, thread_ids: Sequence[str]) -> list[Row]:
            return await self._q(
                "SELECT gid, thread_id, ut, recorded FROM {ks}.thread_ut "
                "WHERE gid = ? AND thread_id IN ?",
                (gid, list(thread_ids)),
                all_pages=True,
            )

        found = await gather(
            one(gid, chunk) for gid, ids in by_gid.items() for chunk in slices(ids, _KEYS_PER_IN)
        )
        return {
            ThreadKey(text(r, "gid"), text(r, "thread_id")): (
                text(r, "ut"),
                r["recorded"] is True,
            )
            for rows in found
            for r in rows
        }

    async def get_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        rows = await self._thread_rows(threads)
        return {t: ut for t, (ut, recorded) in rows.items() if recorded}

    async def put_thread_uts_if_absent(self, items: Sequence[tuple[ThreadKey, str]]) -> list[str]:
        """LWT for unmapped threads; reverse rows, then the `recorded` flag, for unflagged ones.

        A thread is reported by `get_thread_uts` only once flagged, so one whose writer died
        between its LWT and its reverse row comes back here on the next call that meets it.
        """
        proposals: dict[ThreadKey, str] = {}
        for key, ut in items:
            proposals.setdefault(key, ut)  # one LWT per key: duplicates share its winner

        async def one(key: ThreadKey, ut: str) -> tuple[str, bool]:
            rows = await self._q(
                "INSERT INTO {ks}.thread_ut (gid, thread_id, ut) VALUES (?, ?, ?) IF NOT EXISTS",
                (key.gid, key.thread_id, ut),
            )
            return _winner(rows, ut), bool(rows and rows[0].get("recorded") is True)

        winners = await self._thread_rows(proposals)
        missing = [(k, ut) for k, ut in proposals.items() if k not in winners]
        winners.update(
            zip((k for k, _ in missing), await gather(one(k, ut) for k, ut in missing), strict=True)
        )
        unrecorded = [(k, ut) for k, (ut, recorded) in winners.items() if not recorded]
        await self._reverse_rows(
            "INSERT INTO {ks}.ut_threads (ut, gid, thread_id) VALUES (?, ?, ?)",
            [(ut, k.gid, k.thread_id) for k, ut in unrecorded],
        )
        await self._mailbox_rows([k for k, _ in unrecorded])
        await gather(
            self._q(
                "UPDATE {ks}.thread_ut SET recorded = true WHERE gid = ? AND thread_id = ?",
                (k.gid, k.thread_id),
            )
            for k, _ in unrecorded
        )
        return [winners[key][0] for key, _ in items]

    async def put_message_uts_if_absent(self, items: Sequence[MessageMapping]) -> list[str]:
        proposals: dict[bytes, MessageMapping] = {}
        for m in items:
            proposals.setdefault(m.rfc_key, m)

        async def read(keys: Sequence[bytes]) -> list[Row]:
            return await self._q(
                "SELECT rfc_key, ut, sent_at FROM {ks}.rfc_ut WHERE rfc_key IN ?",
                (list(keys),),
                all_pages=True,
            )

        async def one(m: MessageMapping) -> tuple[str, bytes, int]:
            rows = await self._q(
                "INSERT INTO {ks}.rfc_ut (rfc_key, ut, sent_at) VALUES (?, ?, ?) IF NOT EXISTS",
                (m.rfc_key, m.ut, m.sent_at_ms),
            )
            winner = _winner(rows, m.ut)
            sent_at = m.sent_at_ms if rows[0]["[applied]"] else rows[0].get("sent_at")
            return winner, m.rfc_key, _sent(sent_at)

        won: dict[bytes, tuple[str, bytes, int]] = {}
        for rows in await gather(read(chunk) for chunk in slices(list(proposals), _KEYS_PER_IN)):
            for r in rows:
                key = r.get("rfc_key")
                if isinstance(key, bytes):
                    won[key] = (text(r, "ut"), key, _sent(r.get("sent_at")))
        missing = [m for key, m in proposals.items() if key not in won]
        for winner in await gather(one(m) for m in missing):
            won[winner[1]] = winner
        await self._reverse_rows(
            "INSERT INTO {ks}.ut_messages (ut, rfc_key, sent_at) VALUES (?, ?, ?)",
            list(won.values()),
        )
        return [won[m.rfc_key][0] for m in items]

    async def _reverse_rows(
        self, cql: str, rows: Sequence[tuple[str, *tuple[object, ...]]]
    ) -> None:
        """Writes reverse rows (partition key first) as unlogged batches, one per partition.

        A single-partition unlogged batch is one mutation on one replica set: far cheaper
        than a statement per row, with none of a logged batch's batchlog. Chunks stay under
        Cassandra's 5 KiB batch-size warning so even 512-byte ids never near its fail limit.
        """
        stmt = await self._stmt(cql)
        batches: list[BatchStatement] = []
        open_batch: dict[str, tuple[BatchStatement, int]] = {}
        for row in rows:
            size = sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row) * 2
            batch, used = open_batch.get(row[0], (None, 0))
            if batch is None or used + size > _BATCH_BYTES:
                batch, used = BatchStatement(batch_type=BatchType.UNLOGGED), 0
                batches.append(batch)
            batch.add(stmt, row)
            open_batch[row[0]] = (batch, used + size)
        await gather(self._s.run(b) for b in batches)

    async def add_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        rows = sorted({(a, b) for x, y in pairs if x != y for a, b in ((x, y), (y, x))})
        await self._reverse_rows("INSERT INTO {ks}.ut_merges (ut, neighbour) VALUES (?, ?)", rows)

    async def remove_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        rows = sorted({(a, b) for x, y in pairs for a, b in ((x, y), (y, x))})
        await self._reverse_rows("DELETE FROM {ks}.ut_merges WHERE ut = ? AND neighbour = ?", rows)

    async def get_links(self, uts: Sequence[str]) -> dict[str, frozenset[str]]:
        async def one(chunk: Sequence[str]) -> list[Row]:
            return await self._q(
                "SELECT ut, neighbour FROM {ks}.ut_merges WHERE ut IN ?",
                (list(chunk),),
                all_pages=True,
            )

        found: dict[str, set[str]] = {}
        for rows in await gather(one(c) for c in slices(list(dict.fromkeys(uts)), _KEYS_PER_IN)):
            for r in rows:
                found.setdefault(text(r, "ut"), set()).add(text(r, "neighbour"))
        return {ut: frozenset(linked) for ut, linked in found.items()}

    async def read_uts(
        self, uts: Sequence[str], gids: frozenset[str] | None, thread_limit: int
    ) -> UtRows:
        wanted = list(dict.fromkeys(uts))
        team = sorted(gids) if gids is not None else None
        if team == []:
            thread_limit = 0
        ut_chunks = list(slices(wanted, _KEYS_PER_IN))

        async def threads_of(chunk: Sequence[str], gid_chunk: list[str] | None) -> list[Row]:
            if gid_chunk is None:
                cql = "SELECT gid, thread_id FROM {ks}.ut_threads WHERE ut IN ? LIMIT ?"
                params: tuple[object, ...] = (list(chunk), thread_limit)
            else:
                cql = (
                    "SELECT gid, thread_id FROM {ks}.ut_threads WHERE ut IN ? AND gid IN ? LIMIT ?"
                )
                params = (list(chunk), gid_chunk, thread_limit)
            return await self._q(cql, params, all_pages=True)

        async def stats_of(chunk: Sequence[str]) -> list[Row]:
            return await self._q(
                "SELECT count(*) AS n, max(sent_at) AS last FROM {ks}.ut_messages WHERE ut IN ?",
                (list(chunk),),
            )

        gid_chunks: list[list[str] | None] = (
            [None]
            if team is None
            else [team[i : i + _GIDS_PER_IN] for i in range(0, len(team), _GIDS_PER_IN)]
        )
        thread_jobs = (
            [threads_of(c, g) for c in ut_chunks for g in gid_chunks] if thread_limit > 0 else []
        )
        links, thread_rows, stat_rows = await asyncio.gather(
            self.get_links(wanted),
            gather(thread_jobs),
            gather(stats_of(c) for c in ut_chunks),
        )
        threads = [
            ThreadKey(text(r, "gid"), text(r, "thread_id")) for rows in thread_rows for r in rows
        ]
        count, lasts = 0, []
        for rows in stat_rows:
            for r in rows:
                count += int(r["n"] or 0)
                if r["last"] is not None:
                    lasts.append(int(r["last"]))
        return UtRows(
            links={ut: links.get(ut, frozenset()) for ut in wanted},
            threads=threads[:thread_limit],
            stats=UnifiedStats(message_count=count, last_message_at_ms=max(lasts, default=None)),
        )


def _winner(rows: list[Row], proposed: str) -> str:
    """The UT that owns the key after an `INSERT ... IF NOT EXISTS`."""
    if not rows:
        raise StorageCorrupt("cassandra: LWT returned no row")
    if rows[0]["[applied]"]:
        return proposed
    return text(rows[0], "ut")


def _sent(value: object) -> int:
    if not isinstance(value, int):
        raise StorageCorrupt(f"cassandra: rfc_ut.sent_at is {value!r}")
    return value
