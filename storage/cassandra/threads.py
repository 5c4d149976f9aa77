"""ThreadStore on Apache Cassandra: the seed's Scylla schema, without its secondary indexes.

    thread_ut   ((gid, thread_id)) -> ut             LWT INSERT ... IF NOT EXISTS
    rfc_ut      (rfc_key) -> ut, sent_at             LWT INSERT ... IF NOT EXISTS
    ut_threads  (ut, gid, thread_id)                 UT -> threads, clustered in read order
    ut_messages (ut, rfc_key) -> sent_at             UT -> stats: count(*) + max per partition
    ut_merges   (ut, neighbour)                      both directions of every merge

Reverse relations live in tables partitioned by UT rather than in secondary indexes (the
Yammer lesson: a secondary index read fans out to every node and is slow on hot paths).
They are plain idempotent inserts written for the *winner* on every call, so a crash between
an LWT and its reverse row heals the next time anybody writes that key.

An LWT that is not applied returns the row that beat it (`[applied]` = False plus the
current columns), so every writer learns the winner without a second read, as in the seed.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from cassandra.query import BatchStatement, BatchType

from storage.cassandra.session import CassandraSession, Row, gather
from storage.errors import StorageCorrupt
from storage.ports import MessageMapping, ThreadKey, UnifiedStats
from storage.settings import CassandraSettings

__all__ = ["CassandraThreadStore"]


# Rows are written once and never updated or deleted, so size-tiered compaction is right:
# leveled compaction only pays for its write amplification when a row's versions spread over
# many SSTables, which write-once rows never do (and no tombstones ever need purging).
_COMPACTION = "WITH compaction = {'class': 'SizeTieredCompactionStrategy'}"

_TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.thread_ut (gid text, thread_id text, ut text, "
    "PRIMARY KEY ((gid, thread_id))) " + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.rfc_ut (rfc_key blob PRIMARY KEY, ut text, sent_at bigint) "
    + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.ut_threads (ut text, gid text, thread_id text, "
    "PRIMARY KEY (ut, gid, thread_id)) " + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.ut_messages (ut text, rfc_key blob, sent_at bigint, "
    "PRIMARY KEY (ut, rfc_key)) " + _COMPACTION,
    "CREATE TABLE IF NOT EXISTS {ks}.ut_merges (ut text, neighbour text, "
    "PRIMARY KEY (ut, neighbour)) " + _COMPACTION,
)

_BATCH_BYTES = 4096  # estimated payload per reverse-row batch (server warns at 5 KiB)
_GIDS_PER_IN = 100  # clustering IN lists stay small: one slice per gid on the replica


class CassandraThreadStore:
    """`storage.ports.ThreadStore` on one Cassandra keyspace."""

    def __init__(self, session: CassandraSession, *, owns_session: bool) -> None:
        self._s = session
        self._owns = owns_session
        self._ks = session.keyspace

    @classmethod
    async def open(cls, settings: CassandraSettings) -> CassandraThreadStore:
        """Connects its own session (closed with the store), creating the schema if asked."""
        session = await CassandraSession.open(settings)
        try:
            return await cls.on_session(session, owns_session=True)
        except BaseException:
            await session.close()
            raise

    @classmethod
    async def on_session(
        cls, session: CassandraSession, *, owns_session: bool = False
    ) -> CassandraThreadStore:
        """A store on a session shared with other Cassandra stores (which it won't close)."""
        await session.ensure_schema(_TABLES)
        return cls(session, owns_session=owns_session)

    async def _q(self, cql: str, params: Sequence[object], *, all_pages: bool = False) -> list[Row]:
        stmt = await self._s.prepare(cql.replace("{ks}", self._ks))
        return await self._s.run(stmt, params, all_pages=all_pages)

    async def get_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        keys = list(dict.fromkeys(threads))

        async def one(key: ThreadKey) -> str | None:
            rows = await self._q(
                "SELECT ut FROM {ks}.thread_ut WHERE gid = ? AND thread_id = ?",
                (key.gid, key.thread_id),
            )
            return _text(rows[0], "ut") if rows else None

        found = await gather(one(k) for k in keys)
        return {k: ut for k, ut in zip(keys, found, strict=True) if ut is not None}

    async def put_thread_uts_if_absent(self, items: Sequence[tuple[ThreadKey, str]]) -> list[str]:
        proposals: dict[ThreadKey, str] = {}
        for key, ut in items:
            proposals.setdefault(key, ut)  # one LWT per key: duplicates share its winner

        async def one(key: ThreadKey, ut: str) -> str:
            rows = await self._q(
                "INSERT INTO {ks}.thread_ut (gid, thread_id, ut) VALUES (?, ?, ?) IF NOT EXISTS",
                (key.gid, key.thread_id, ut),
            )
            return _winner(rows, ut)

        winners = await gather(one(k, ut) for k, ut in proposals.items())
        by_key = dict(zip(proposals, winners, strict=True))
        await self._reverse_rows(
            "INSERT INTO {ks}.ut_threads (ut, gid, thread_id) VALUES (?, ?, ?)",
            [(w, k.gid, k.thread_id) for k, w in by_key.items()],
        )
        return [by_key[key] for key, _ in items]

    async def put_message_uts_if_absent(self, items: Sequence[MessageMapping]) -> list[str]:
        proposals: dict[bytes, MessageMapping] = {}
        for m in items:
            proposals.setdefault(m.rfc_key, m)

        async def one(m: MessageMapping) -> tuple[str, bytes, int]:
            rows = await self._q(
                "INSERT INTO {ks}.rfc_ut (rfc_key, ut, sent_at) VALUES (?, ?, ?) IF NOT EXISTS",
                (m.rfc_key, m.ut, m.sent_at_ms),
            )
            winner = _winner(rows, m.ut)
            sent_at = m.sent_at_ms if rows[0]["[applied]"] else rows[0].get("sent_at")
            if not isinstance(sent_at, int):
                raise StorageCorrupt(f"cassandra: rfc_ut.sent_at is {sent_at!r}")
            return winner, m.rfc_key, sent_at

        won = await gather(one(m) for m in proposals.values())
        await self._reverse_rows(
            "INSERT INTO {ks}.ut_messages (ut, rfc_key, sent_at) VALUES (?, ?, ?)", won
        )
        by_key = {rfc_key: winner for winner, rfc_key, _ in won}
        return [by_key[m.rfc_key] for m in items]

    async def _reverse_rows(self, cql: str, rows: Sequence[tuple[str, object, object]]) -> None:
        """Writes reverse rows (partition key first) as unlogged batches, one per partition.

        A single-partition unlogged batch is one mutation on one replica set: far cheaper
        than a statement per row, with none of a logged batch's batchlog. Chunks stay under
        Cassandra's 5 KiB batch-size warning so even 512-byte ids never near its fail limit.
        """
        stmt = await self._s.prepare(cql.replace("{ks}", self._ks))
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

    async def add_merges(self, pairs: Sequence[tuple[str, str]]) -> None:
        rows = dict.fromkeys((a, b) for x, y in pairs if x != y for a, b in ((x, y), (y, x)))
        await gather(
            self._q("INSERT INTO {ks}.ut_merges (ut, neighbour) VALUES (?, ?)", (a, b))
            for a, b in rows
        )

    async def get_merge_neighbours(self, uts: Sequence[str]) -> dict[str, set[str]]:
        wanted = list(dict.fromkeys(uts))

        async def one(ut: str) -> set[str]:
            rows = await self._q(
                "SELECT neighbour FROM {ks}.ut_merges WHERE ut = ?", (ut,), all_pages=True
            )
            return {_text(r, "neighbour") for r in rows}

        found = await gather(one(ut) for ut in wanted)
        return {ut: n for ut, n in zip(wanted, found, strict=True) if n}

    async def get_threads_of(
        self, uts: Sequence[str], gids: frozenset[str] | None, limit: int
    ) -> list[ThreadKey]:
        wanted = list(dict.fromkeys(uts))
        team = sorted(gids) if gids is not None else None
        if not wanted or limit <= 0 or team == []:
            return []

        async def slice_of(ut: str, gid_chunk: list[str] | None) -> list[ThreadKey]:
            # The partition is clustered by (gid, thread_id): rows arrive sorted, so LIMIT
            # (and a clustering IN, whose slices come back in clustering order) is exact.
            cql = "SELECT gid, thread_id FROM {ks}.ut_threads WHERE ut = ? LIMIT ?"
            params: tuple[object, ...] = (ut, limit)
            if gid_chunk is not None:
                cql = "SELECT gid, thread_id FROM {ks}.ut_threads WHERE ut = ? AND gid IN ? LIMIT ?"
                params = (ut, gid_chunk, limit)
            rows = await self._q(cql, params, all_pages=True)
            return [ThreadKey(_text(r, "gid"), _text(r, "thread_id")) for r in rows]

        async def of_ut(ut: str) -> list[ThreadKey]:
            if team is None:
                return await slice_of(ut, None)
            chunks = [team[i : i + _GIDS_PER_IN] for i in range(0, len(team), _GIDS_PER_IN)]
            # Chunks cover ascending gid ranges, so concatenating them keeps the order.
            parts = await gather(slice_of(ut, c) for c in chunks)
            return [t for part in parts for t in part][:limit]

        streams = await gather(of_ut(ut) for ut in wanted)
        merged = heapq.merge(*streams)
        return [t for t, _ in zip(merged, range(limit), strict=False)]

    async def get_stats(self, uts: Sequence[str]) -> UnifiedStats:
        wanted = list(dict.fromkeys(uts))

        async def one(ut: str) -> tuple[int, int | None]:
            rows = await self._q(
                "SELECT count(*) AS n, max(sent_at) AS last FROM {ks}.ut_messages WHERE ut = ?",
                (ut,),
            )
            if not rows:
                return 0, None
            return int(rows[0]["n"]), rows[0]["last"]

        results = await gather(one(ut) for ut in wanted)
        lasts = [last for _, last in results if last is not None]
        return UnifiedStats(
            message_count=sum(n for n, _ in results), last_message_at_ms=max(lasts, default=None)
        )

    async def close(self) -> None:
        if self._owns:
            await self._s.close()


def _winner(rows: list[Row], proposed: str) -> str:
    """The UT that owns the key after an `INSERT ... IF NOT EXISTS`."""
    if not rows:
        raise StorageCorrupt("cassandra: LWT returned no row")
    if rows[0]["[applied]"]:
        return proposed
    return _text(rows[0], "ut")


def _text(row: Row, column: str) -> str:
    value = row.get(column)
    if not isinstance(value, str):
        raise StorageCorrupt(f"cassandra: column {column} holds {value!r}")
    return value
