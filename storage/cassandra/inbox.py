"""InboxStore on Apache Cassandra: Yammer's second design, with its fixes.

    inbox            ((inbox_id), kind, thread_id) -> last_message_id, is_read
                     kind 1: the inbox entry; kind 0: the thread's unread marker (the
                     materialized unread count is COUNT(*) of the kind-0 slice)
    inbox_deliveries ((delivery_id)) -> progress   LWT IF NOT EXISTS on create

plus the deletion tables (`storage.cassandra.inbox_deletes`) and the change log
(`storage.cassandra.inbox_changes`), which every write below appends to once it succeeded.

No secondary index, no ordering that relies on deletes (the domain sorts a whole, trimmed
inbox itself); LeveledCompaction and a 3 h gc_grace_seconds on the mutating table (why:
`storage.cassandra.inbox_rows`).

Write timestamps carry the ordering (see `storage.cassandra.inbox_clock`): delivery of
message m writes at m*K, a mark on a row showing m writes inside (m*K, (m+1)*K - 1), and a
trim of a row read at m deletes at (m+1)*K - 1. Cassandra's last-write-wins then yields
"last_message_id = max, newest delivery decides is_read, a mark sticks until the next
message, a trim loses to any newer message" under any interleaving, with no LWT. So a
write never needs the row's current state to be right. `deliver` still reads first (one
token-aware IN query per replica group), because the Protocol returns how many rows changed
and a retried small post should cost reads only; the background fan-out's
`deliver_unread` needs no count and writes blind.

A fan-out chunk (the 300,000-inbox announcement is 600 chunks of 500) is, per group of 50
inboxes sharing one replica set, one ``UPDATE inbox … WHERE inbox_id IN ? AND kind IN (0,
1)``: each inbox's entry and unread marker as one mutation of its own partition, routed to
a replica of every key. Measured by ``loadtest/benches/cassandra_fanout.py`` (shape
``one-table-in-50`` against ``in-50``, the two-table layout before) and at store level:
one table halves the node's CPU per inbox, and dropping the read saves another ~40 %.
Why not one request per inbox (a single-partition batch of its two rows): the Python driver
costs ~100 µs of client CPU per request, so 300,000 requests are ~30 s of the server's one
core before Cassandra does anything. Why not a multi-partition unlogged BATCH: binding 100
statements per group cost twice the client CPU, and Cassandra warned about every such
batch. The writes are still multi-partition, but never cross replica sets, so no
coordinator forwards anything a single-row write would not.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from cassandra.query import BatchStatement, BatchType, PreparedStatement

from storage.cassandra import inbox_clock as clock
from storage.cassandra import inbox_rows as ir
from storage.cassandra import versions
from storage.cassandra.inbox_changes import CHANGE_TABLES
from storage.cassandra.inbox_deletes import DELETION_TABLES, CassandraInboxDeletes
from storage.cassandra.session import CassandraSession, Row, gather
from storage.cassandra.store import CassandraStore
from storage.errors import StorageCorrupt
from storage.idlists import decode_parts, encode_parts
from storage.ports import DeletedThread, DeliveryRecord, InboxEntry
from storage.slices import slices

__all__ = ["CassandraInboxStore"]

_IN_KEYS = 50
"""Inboxes per IN list of a delivery: one request reads or writes 50 partitions, all of one
replica set, so a 1,000-inbox chunk is 20 concurrent read-then-write pipelines."""
DELIVERY_GROUPS_IN_FLIGHT = 16
"""Delivery pipelines (read, unread rows, entries) of one store running at once, whatever
the number of chunks the fan-out stage has in flight: enough to keep one node busy, and
well under the session's `MAX_IN_FLIGHT`, so interactive reads (an unread count) never
wait behind a fan-out for a driver slot."""
_BATCH_BYTES = 4 * 1024
"""Estimated payload per unlogged batch of marks and trims, which are single-partition (one
inbox): under Cassandra's 5 KiB batch-size warn threshold."""


class CassandraInboxStore(CassandraStore, CassandraInboxDeletes):
    """`storage.ports.PortableInboxStore` on one Cassandra keyspace."""

    def __init__(self, session: CassandraSession, *, owns_session: bool) -> None:
        super().__init__(session, owns_session=owns_session)
        self._deliveries = asyncio.Semaphore(DELIVERY_GROUPS_IN_FLIGHT)

    @classmethod
    async def on_session(
        cls, session: CassandraSession, *, owns_session: bool = False
    ) -> CassandraInboxStore:
        """A store on a session shared with other Cassandra stores (which it won't close)."""
        tables = (*ir.TABLES, *DELETION_TABLES, *CHANGE_TABLES)
        await versions.upgrade(session, tables, versions.INBOX)
        legacy = session.tables_present(ir.LEGACY_TABLES)
        if legacy:
            raise ValueError(
                f"cassandra: keyspace {session.keyspace} holds inbox tables of an earlier Loom "
                f"({', '.join(legacy)}); this version keeps inboxes in {session.keyspace}.inbox "
                "and would serve them empty. Point cassandra.keyspace at a new "
                "keyspace, or drop those tables once their inboxes are no longer wanted"
            )
        return cls(session, owns_session=owns_session)

    # --- deliveries into inboxes ------------------------------------------------------

    async def deliver(
        self,
        thread_id: str,
        message_id: int,
        *,
        unread: Sequence[str],
        read: Sequence[str] = (),
    ) -> int:
        flags = {**dict.fromkeys(unread, False), **dict.fromkeys(read, True)}
        return await self._deliver(thread_id, message_id, flags, counted=True)

    async def deliver_unread(self, thread_id: str, message_id: int, inboxes: Sequence[str]) -> None:
        await self._deliver(thread_id, message_id, dict.fromkeys(inboxes, False), counted=False)

    async def _deliver(
        self, thread_id: str, message_id: int, flags: dict[str, bool], *, counted: bool
    ) -> int:
        """Writes `flags` (inbox -> delivered read) in replica-set groups; with `counted`,
        reads each group first and skips rows already at or past the message (the count,
        and a retry that costs reads only). Without it the writes go blind: every write
        carries the message's timestamp, so a row already past it keeps its newer cells and
        the end state is the same."""
        ts = clock.delivery_ts(message_id)
        if not flags:
            return 0
        groups = [
            chunk
            for group in self._s.replica_groups(list(flags))
            for chunk in slices(group, _IN_KEYS)
        ]
        current_of = await self._stmt(
            "SELECT inbox_id, last_message_id FROM {ks}.inbox "
            f"WHERE inbox_id IN ? AND kind = {ir.ENTRY} AND thread_id = ?"
        )
        make_unread = await self._stmt(
            "UPDATE {ks}.inbox USING TIMESTAMP ? SET last_message_id = ?, is_read = false "
            f"WHERE inbox_id IN ? AND kind IN ({ir.UNREAD}, {ir.ENTRY}) AND thread_id = ?"
        )
        drop_unread = await self._stmt(
            "DELETE FROM {ks}.inbox USING TIMESTAMP ? "
            f"WHERE inbox_id IN ? AND kind = {ir.UNREAD} AND thread_id = ?"
        )
        make_read = await self._stmt(
            "UPDATE {ks}.inbox USING TIMESTAMP ? SET last_message_id = ?, is_read = true "
            f"WHERE inbox_id IN ? AND kind = {ir.ENTRY} AND thread_id = ?"
        )
        run = self._s.run
        advanced: list[str] = []  # logged as `delivered`, even when a later group fails

        async def one_group(inboxes: Sequence[str]) -> int:
            async with self._deliveries:
                # Counted, read first: rows already at (or past) this message are skipped,
                # which makes a retried chunk cost one read and gives the Protocol its count
                # of advanced rows. Every key of `inboxes` shares one replica set, so the
                # coordinator `route` reaches owns all of them.
                route = inboxes[0]
                done: set[str] = set()
                if counted:
                    rows = await run(current_of, (inboxes, thread_id), routing_key=route)
                    done = {
                        ir.text(r, "inbox_id")
                        for r in rows
                        if ir.integer(r, "last_message_id") >= message_id
                    }
                to_unread = [i for i in inboxes if i not in done and not flags[i]]
                to_read = [i for i in inboxes if i not in done and flags[i]]
                # An unread recipient's entry and unread marker share its partition: one
                # UPDATE writes both as one mutation, applied whole or not at all. A read
                # recipient (the sender) needs a delete and an update; the marker goes first,
                # so an entry showing this message implies its marker is in step and the
                # skip above never leaves a marker behind when a chunk is retried.
                # Coroutines are made only after the delete succeeded, so a failed delete
                # leaves none un-awaited behind it.
                if to_read:
                    await run(drop_unread, (ts, to_read, thread_id), routing_key=route)
                steps: list[tuple[PreparedStatement, tuple[Any, ...]]] = []
                if to_unread:
                    steps.append((make_unread, (ts, message_id, to_unread, thread_id)))
                if to_read:
                    steps.append((make_read, (ts, message_id, to_read, thread_id)))
                await gather(run(stmt, params, routing_key=route) for stmt, params in steps)
                advanced.extend(to_unread + to_read)
                return len(to_unread) + len(to_read)

        try:
            return sum(await gather(one_group(g) for g in groups))
        finally:
            await self._log_delivered(thread_id, message_id, advanced)

    async def _write_batches(
        self, writes: Sequence[tuple[PreparedStatement, tuple[Any, ...], int]]
    ) -> None:
        """Sends `writes` as unlogged batches of about `_BATCH_BYTES` each, concurrently.

        Callers pass writes of one inbox (one partition), so each batch is one mutation
        applied by a replica of it, with no batchlog: one request instead of one per row.
        """
        batches: list[BatchStatement] = []
        used = _BATCH_BYTES
        for stmt, params, size in writes:
            if used + size > _BATCH_BYTES:
                batches.append(BatchStatement(batch_type=BatchType.UNLOGGED))
                used = 0
            batches[-1].add(stmt, params)
            used += size
        await gather(self._s.run(b) for b in batches)

    # --- reads ------------------------------------------------------------------------

    async def scan_inbox(self, inbox_id: str, limit: int) -> list[InboxEntry]:
        if limit <= 0:
            return []
        rows = await self._q(
            "SELECT thread_id, last_message_id, is_read FROM {ks}.inbox "
            f"WHERE inbox_id = ? AND kind = {ir.ENTRY} LIMIT ?",
            (inbox_id, limit),
            all_pages=True,
        )
        return [
            InboxEntry(
                thread_id=ir.text(r, "thread_id"),
                last_message_id=ir.integer(r, "last_message_id"),
                is_read=bool(r["is_read"]),
            )
            for r in rows
        ]

    async def unread_count(self, inbox_id: str) -> int:
        # Net of the deleted threads not swept yet: the pending set is read beside the
        # count (one small partition), and only when it is not empty are the unread
        # markers' thread ids read to take the deleted ones out.
        rows, pending = await asyncio.gather(
            self._q(
                f"SELECT COUNT(*) AS n FROM {{ks}}.inbox WHERE inbox_id = ? AND kind = {ir.UNREAD}",
                (inbox_id,),
            ),
            self._pending_set(),
        )
        count = ir.integer(rows[0], "n") if rows else 0
        if not pending or count == 0:
            return count
        threads = await self._q(
            f"SELECT thread_id FROM {{ks}}.inbox WHERE inbox_id = ? AND kind = {ir.UNREAD}",
            (inbox_id,),
            all_pages=True,
        )
        return sum(1 for r in threads if ir.text(r, "thread_id") not in pending)

    # --- whole-table scans (loom dump) --------------------------------------------------

    async def scan_entries(self, page: int) -> AsyncIterator[list[tuple[str, InboxEntry]]]:
        # The entries only: unread markers are derived from them. ``kind`` is the first
        # clustering column, so the filter is a slice of each partition (no marker is read),
        # and the ALLOW FILTERING a full scan needs anyway costs nothing more.
        cql = (
            "SELECT inbox_id, thread_id, last_message_id, is_read FROM {ks}.inbox "
            f"WHERE kind = {ir.ENTRY} ALLOW FILTERING"
        )
        async for rows in self._pages(cql, page):
            yield [
                (
                    ir.text(r, "inbox_id"),
                    InboxEntry(
                        thread_id=ir.text(r, "thread_id"),
                        last_message_id=ir.integer(r, "last_message_id"),
                        is_read=bool(r["is_read"]),
                    ),
                )
                for r in rows
            ]

    async def scan_deliveries(self, page: int) -> AsyncIterator[list[DeliveryRecord]]:
        cql = f"SELECT {ir.DELIVERY_COLUMNS} FROM {{ks}}.inbox_deliveries"
        async for rows in self._pages(cql, page):
            yield [ir.delivery_record(r) for r in rows]

    async def scan_deleted_threads(self, page: int) -> AsyncIterator[list[DeletedThread]]:
        cql = "SELECT thread_id, operation_id, deleted_at_ms FROM {ks}.inbox_deleted_threads"
        async for rows in self._pages(cql, page):
            yield [
                DeletedThread(
                    thread_id=r["thread_id"],
                    operation_id=r["operation_id"] or "",
                    deleted_at_ms=int(r["deleted_at_ms"] or 0),
                )
                for r in rows
            ]

    # --- marks and trims (single-partition writes, read first) --------------------------

    async def _rows_of(self, inbox_id: str, thread_ids: Sequence[str] | None) -> list[Row]:
        """The inbox's rows (all, or the named ones) with is_read's write timestamp."""
        cql = (
            "SELECT thread_id, last_message_id, is_read, WRITETIME(is_read) AS wt "
            f"FROM {{ks}}.inbox WHERE inbox_id = ? AND kind = {ir.ENTRY}"
        )
        if thread_ids is None:
            return await self._q(cql, (inbox_id,), all_pages=True)
        parts = await gather(
            self._q(cql + " AND thread_id IN ?", (inbox_id, list(c)), all_pages=True)
            for c in slices(list(dict.fromkeys(thread_ids)), _IN_KEYS)
        )
        return [r for part in parts for r in part]

    async def set_read(self, inbox_id: str, thread_ids: Sequence[str] | None, *, read: bool) -> int:
        if thread_ids is not None and not thread_ids:
            return 0
        rows = await self._rows_of(inbox_id, thread_ids)
        flip = await self._stmt(
            "UPDATE {ks}.inbox USING TIMESTAMP ? SET is_read = ? "
            f"WHERE inbox_id = ? AND kind = {ir.ENTRY} AND thread_id = ?"
        )
        unread = await self._stmt(
            "DELETE FROM {ks}.inbox USING TIMESTAMP ? "
            f"WHERE inbox_id = ? AND kind = {ir.UNREAD} AND thread_id = ?"
            if read
            else "INSERT INTO {ks}.inbox (inbox_id, kind, thread_id) "
            f"VALUES (?, {ir.UNREAD}, ?) USING TIMESTAMP ?"
        )
        writes: list[tuple[PreparedStatement, tuple[Any, ...], int]] = []
        for r in rows:
            if bool(r["is_read"]) == read:
                continue
            thread = ir.text(r, "thread_id")
            ts = clock.mark_ts(ir.integer(r, "last_message_id"), ir.integer(r, "wt"))
            writes.append((flip, (ts, read, inbox_id, thread), 2 * len(thread) + 40))
            params = (ts, inbox_id, thread) if read else (inbox_id, thread, ts)
            writes.append((unread, params, 2 * len(thread) + 40))
        try:
            await self._write_batches(writes)
        finally:  # a partial failure is logged too: its retry finds those rows flipped
            if writes:
                await self._log_mark(inbox_id, thread_ids, read=read)
        return len(writes) // 2

    async def delete_entries(self, inbox_id: str, entries: Sequence[InboxEntry]) -> int:
        if not entries:
            return 0
        seen = {e.thread_id: e.last_message_id for e in entries}
        rows = await self._rows_of(inbox_id, list(seen))
        doomed = [
            (ir.text(r, "thread_id"), seen[ir.text(r, "thread_id")])
            for r in rows
            if ir.integer(r, "last_message_id") <= seen[ir.text(r, "thread_id")]
        ]
        # Both rows of a thread (entry and unread marker) go in one statement.
        stmt = await self._stmt(
            "DELETE FROM {ks}.inbox USING TIMESTAMP ? "
            f"WHERE inbox_id = ? AND kind IN ({ir.UNREAD}, {ir.ENTRY}) AND thread_id = ?"
        )
        writes = [(stmt, (clock.trim_ts(last), inbox_id, t), 2 * len(t) + 40) for t, last in doomed]
        try:
            await self._write_batches(writes)
        finally:
            await self._log_removed(inbox_id, [t for t, _ in doomed])
        return len(doomed)

    # --- background fan-out progress --------------------------------------------------

    async def create_delivery(self, record: DeliveryRecord) -> DeliveryRecord:
        rows = await self._q(
            f"INSERT INTO {{ks}}.inbox_deliveries ({ir.DELIVERY_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
            ir.delivery_values(record),
        )
        if not rows:
            raise StorageCorrupt("cassandra: LWT returned no row")
        if not rows[0]["[applied]"]:
            return ir.delivery_record(rows[0])
        await self._track_unfinished(record)
        return record

    async def get_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        rows = await self._q(
            f"SELECT {ir.DELIVERY_COLUMNS} FROM {{ks}}.inbox_deliveries WHERE delivery_id = ?",
            (delivery_id,),
        )
        return ir.delivery_record(rows[0]) if rows else None

    async def save_delivery(self, record: DeliveryRecord) -> None:
        # A plain upsert after the LWT create: only the one worker running the fan-out
        # writes progress (a server adopts a delivery only after its owner stopped writing
        # for stall_after_s, through claim_delivery's LWT), so Paxos has nothing to order.
        await self._q(
            f"INSERT INTO {{ks}}.inbox_deliveries ({ir.DELIVERY_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ir.delivery_values(record),
        )
        await self._track_unfinished(record)

    async def _track_unfinished(self, record: DeliveryRecord) -> None:
        if record.state == "done":
            cql = "DELETE FROM {ks}.inbox_unfinished WHERE shard = 0 AND delivery_id = ?"
        else:
            cql = "INSERT INTO {ks}.inbox_unfinished (shard, delivery_id) VALUES (0, ?)"
        await self._q(cql, (record.delivery_id,))

    async def save_recipients(self, delivery_id: str, recipients: Sequence[str]) -> None:
        # The list is the same on a retry (planning is deterministic): parts overwrite.
        stmt = await self._stmt(
            "INSERT INTO {ks}.inbox_delivery_recipients (delivery_id, part, data) VALUES (?, ?, ?)"
        )
        await gather(
            self._s.run(stmt, (delivery_id, i, part))
            for i, part in enumerate(encode_parts(recipients))
        )

    async def drop_recipients(self, delivery_id: str) -> None:
        # One partition tombstone (the list's parts are one partition).
        await self._q(
            "DELETE FROM {ks}.inbox_delivery_recipients WHERE delivery_id = ?", (delivery_id,)
        )

    async def load_recipients(self, delivery_id: str) -> list[str] | None:
        rows = await self._q(
            "SELECT data FROM {ks}.inbox_delivery_recipients WHERE delivery_id = ?",
            (delivery_id,),
            all_pages=True,
        )
        return decode_parts([bytes(r["data"]) for r in rows]) if rows else None

    async def unfinished_deliveries(self, limit: int) -> list[DeliveryRecord]:
        rows = await self._q(
            "SELECT delivery_id FROM {ks}.inbox_unfinished WHERE shard = 0 LIMIT ?",
            (max(1, limit),),
        )
        found = await gather(self.get_delivery(ir.text(r, "delivery_id")) for r in rows)
        return [d for d in found if d is not None and d.state != "done"]

    async def claim_delivery(self, record: DeliveryRecord, expected_updated_at_ms: int) -> bool:
        rows = await self._q(
            "UPDATE {ks}.inbox_deliveries SET total = ?, done = ?, state = ?, error = ?, "
            "updated_at_ms = ? WHERE delivery_id = ? IF updated_at_ms = ?",
            (
                record.total,
                record.done,
                record.state,
                record.error,
                record.updated_at_ms,
                record.delivery_id,
                expected_updated_at_ms,
            ),
        )
        if not rows:
            raise StorageCorrupt("cassandra: LWT returned no row")
        return bool(rows[0]["[applied]"])
