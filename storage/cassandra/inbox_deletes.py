"""Deletions of the Cassandra InboxStore, designed around tombstones (Yammer's lesson).

    inbox_deleted_threads ((thread_id)) -> operation_id, deleted_at_ms    for ever
    inbox_deleting        ((shard), deleted_at_ms, thread_id) -> operation_id   until swept
    inbox_operations      ((operation_id)) -> kind, state, progress

- DeleteInbox is one *partition* delete of ``inbox`` (entries and unread markers): a single
  partition tombstone, which a read of another inbox never meets, and which a read of this
  inbox skips in one step. Its timestamp is the trim timestamp of the newest message the
  inbox held (`storage.cassandra.inbox_clock`), so a later message starts the inbox anew.
- Deleting a thread writes two small rows (its marker and its pending row) and nothing in
  the inboxes: reads are exact at once because GetUnreadCount and ListInbox net out the
  pending set, one small partition read beside theirs. The rows of the thread are removed by
  the sweep (a token-ordered walk of ``inbox``) and by listings that meet them; those are
  row deletes, unavoidable (one per inbox that held the thread), each written at a timestamp
  above every delivery so no late write of the dead thread can outlive it. They sit in the
  partitions of the inboxes that held the thread, between live rows; a ListInbox of such an
  inbox walks them until compaction purges them after ``gc_grace_seconds`` (3 h here).
- The pending set is one partition clustered by deletion time; a finished sweep drops its
  threads with one *range* tombstone (``deleted_at_ms <= bound``), not a tombstone per
  thread, so the partition every read of the pending set scans holds one or two range
  markers, whatever the number of deletions.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import Any

from cassandra.query import PreparedStatement

from storage.cassandra import inbox_clock as clock
from storage.cassandra import inbox_rows as ir
from storage.cassandra.inbox_changes import CassandraInboxChanges
from storage.cassandra.session import Row, gather
from storage.ports import InboxChange, InboxEntry, InboxOperation, PendingDeletion, SweepStep
from storage.slices import slices

__all__ = ["DELETION_TABLES", "CassandraInboxDeletes"]

DELETION_TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_deleted_threads (thread_id text PRIMARY KEY, "
    "operation_id text, deleted_at_ms bigint)",
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_deleting (shard int, deleted_at_ms bigint, "
    "thread_id text, operation_id text, PRIMARY KEY ((shard), deleted_at_ms, thread_id)) "
    "WITH gc_grace_seconds = 10800",
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_operations (operation_id text PRIMARY KEY, "
    "kind text, state text, done bigint, total bigint, error text, updated_at_ms bigint)",
)
_DEAD_TS = clock.trim_ts(clock.MAX_MESSAGE_ID - 1)
"""Timestamp of the sweep's deletes: above every delivery's, so they shadow any write of
the deleted thread, whenever it lands."""
_RING = 1 << 64
_IN_KEYS = 50
_OPERATION_COLUMNS = "operation_id, kind, state, done, total, error, updated_at_ms"


class CassandraInboxDeletes(CassandraInboxChanges):
    """The deletion half of `storage.cassandra.inbox.CassandraInboxStore` (a mixin), which
    logs what it removes in the change log (`storage.cassandra.inbox_changes`)."""

    async def _rows_of(self, inbox_id: str, thread_ids: Sequence[str] | None) -> list[Row]:
        raise NotImplementedError

    async def delete_entries(self, inbox_id: str, entries: Sequence[InboxEntry]) -> int:
        raise NotImplementedError

    async def _pending_set(self) -> set[str]:
        return {p.thread_id for p in await self.pending_deletions()}

    async def _log_removed(self, inbox_id: str, thread_ids: Sequence[str]) -> None:
        """Logs rows removed from one inbox: `deleted` for threads deleted everywhere (a
        listing's cleanup of rows the sweep has not reached), `removed` for the others."""
        if not thread_ids:
            return
        dead = await self.deleted_threads(thread_ids)
        plain = tuple(t for t in thread_ids if t not in dead)
        marked = tuple(t for t in thread_ids if t in dead)
        changes = (
            [InboxChange(inbox_id=inbox_id, kind="removed", thread_ids=plain)] if plain else []
        )
        if marked:
            changes.append(InboxChange(inbox_id=inbox_id, kind="deleted", thread_ids=marked))
        await self._log_changes(changes)

    async def remove_threads(self, inbox_id: str, thread_ids: Sequence[str]) -> int:
        rows = await self._rows_of(inbox_id, list(dict.fromkeys(thread_ids)))
        # A trim of what was read: a newer message (a later write timestamp) brings it back.
        entries = [
            InboxEntry(
                thread_id=ir.text(r, "thread_id"),
                last_message_id=ir.integer(r, "last_message_id"),
                is_read=bool(r["is_read"]),
            )
            for r in rows
        ]
        return await self.delete_entries(inbox_id, entries)

    async def delete_inbox(self, inbox_id: str) -> int:
        rows = await self._q(
            "SELECT COUNT(*) AS n, MAX(last_message_id) AS m FROM {ks}.inbox "
            f"WHERE inbox_id = ? AND kind = {ir.ENTRY}",
            (inbox_id,),
        )
        held = ir.integer(rows[0], "n") if rows else 0
        newest = rows[0].get("m") if rows else None
        if isinstance(newest, int) and newest > 0:
            await self._q(
                "DELETE FROM {ks}.inbox USING TIMESTAMP ? WHERE inbox_id = ?",
                (clock.trim_ts(newest), inbox_id),
            )
        sent = await self._q(
            "SELECT delivery_id FROM {ks}.inbox_deliveries WHERE sender_inbox_id = ? "
            "ALLOW FILTERING",
            (inbox_id,),
            all_pages=True,
        )
        for r in sent:
            delivery_id = ir.text(r, "delivery_id")
            for cql in (
                "DELETE FROM {ks}.inbox_deliveries WHERE delivery_id = ?",
                "DELETE FROM {ks}.inbox_delivery_recipients WHERE delivery_id = ?",
                "DELETE FROM {ks}.inbox_unfinished WHERE shard = 0 AND delivery_id = ?",
            ):
                await self._q(cql, (delivery_id,))
        # Its log names it and its threads: erased with it, and nothing logged after (a
        # row naming the erased inbox would outlive the erasure).
        await self.forget_changes(inbox_id)
        return held

    async def mark_deleted(
        self, thread_ids: Sequence[str], operation_id: str, deleted_at_ms: int
    ) -> None:
        threads = list(dict.fromkeys(thread_ids))
        marker = await self._stmt(
            "INSERT INTO {ks}.inbox_deleted_threads (thread_id, operation_id, deleted_at_ms) "
            "VALUES (?, ?, ?)"
        )
        pending = await self._stmt(
            "INSERT INTO {ks}.inbox_deleting (shard, deleted_at_ms, thread_id, operation_id) "
            "VALUES (0, ?, ?, ?)"
        )
        await gather(
            self._s.run(marker, (t, operation_id, deleted_at_ms)) for t in threads
        )  # fmt: skip
        await gather(
            self._s.run(pending, (deleted_at_ms, t, operation_id)) for t in threads
        )  # fmt: skip

    async def deleted_threads(self, thread_ids: Sequence[str]) -> set[str]:
        parts = await gather(
            self._q(
                "SELECT thread_id FROM {ks}.inbox_deleted_threads WHERE thread_id IN ?",
                (list(chunk),),
            )
            for chunk in slices(list(dict.fromkeys(thread_ids)), _IN_KEYS)
        )
        return {ir.text(r, "thread_id") for part in parts for r in part}

    async def pending_deletions(self) -> list[PendingDeletion]:
        rows = await self._q(
            "SELECT deleted_at_ms, thread_id, operation_id FROM {ks}.inbox_deleting "
            "WHERE shard = 0",
            (),
            all_pages=True,
        )
        return [
            PendingDeletion(
                thread_id=ir.text(r, "thread_id"),
                operation_id=ir.text(r, "operation_id"),
                deleted_at_ms=ir.integer(r, "deleted_at_ms"),
            )
            for r in rows
        ]

    async def sweep_deleted(
        self, thread_ids: Collection[str], cursor: str | None, page: int
    ) -> SweepStep:
        if page < 1:
            raise ValueError(f"sweep page must be at least 1, not {page}")
        state: bytes | None = None
        done = 0
        if cursor is not None:
            saved = json.loads(cursor)
            state, done = bytes.fromhex(saved["state"]), int(saved["done"])
        stmt = await self._stmt(
            "SELECT token(inbox_id) AS tk, inbox_id, thread_id FROM {ks}.inbox "
            f"WHERE kind = {ir.ENTRY} ALLOW FILTERING"
        )
        rows, state = await self._s.run_page(stmt, (), fetch_size=page, paging_state=state)
        doomed: dict[str, list[str]] = defaultdict(list)
        for r in rows:
            thread = ir.text(r, "thread_id")
            if thread in thread_ids:
                doomed[thread].append(ir.text(r, "inbox_id"))
        removed = await self._delete_rows(doomed)
        if rows:
            done = max(done, (ir.integer(rows[-1], "tk") + (1 << 63)) * 1000 // _RING)
        if state is None:
            await self._drop_deliveries(thread_ids)
            return SweepStep(removed=removed, cursor=None, done=1000, total=1000)
        nxt = json.dumps({"state": state.hex(), "done": done})
        return SweepStep(removed=removed, cursor=nxt, done=done, total=1000)

    async def _drop_deliveries(self, thread_ids: Collection[str]) -> None:
        """The walk's end: the threads' delivery records go too (a small table, read whole;
        each record and its recipient list is one partition delete)."""
        rows = await self._q(
            "SELECT delivery_id, thread_id FROM {ks}.inbox_deliveries", (), all_pages=True
        )
        for r in rows:
            if ir.text(r, "thread_id") not in thread_ids:
                continue
            delivery_id = ir.text(r, "delivery_id")
            for cql in (
                "DELETE FROM {ks}.inbox_deliveries WHERE delivery_id = ?",
                "DELETE FROM {ks}.inbox_delivery_recipients WHERE delivery_id = ?",
                "DELETE FROM {ks}.inbox_unfinished WHERE shard = 0 AND delivery_id = ?",
            ):
                await self._q(cql, (delivery_id,))

    async def _delete_rows(self, doomed: dict[str, list[str]]) -> int:
        """Deletes each thread's entry and unread marker in the listed inboxes, one request
        per group of inboxes sharing a replica set (as deliveries write them)."""
        stmt = await self._stmt(
            "DELETE FROM {ks}.inbox USING TIMESTAMP ? "
            f"WHERE inbox_id IN ? AND kind IN ({ir.UNREAD}, {ir.ENTRY}) AND thread_id = ?"
        )
        calls: list[tuple[PreparedStatement, tuple[Any, ...], str]] = []
        for thread, inboxes in doomed.items():
            for group in self._s.replica_groups(inboxes):
                for chunk in slices(group, _IN_KEYS):
                    calls.append((stmt, (_DEAD_TS, list(chunk), thread), chunk[0]))
        held: dict[str, list[str]] = defaultdict(list)
        for thread, inboxes in doomed.items():
            for inbox_id in inboxes:
                held[inbox_id].append(thread)
        try:
            await gather(self._s.run(s, p, routing_key=key) for s, p, key in calls)
        finally:  # a partial failure too: a walk started again does not meet those rows
            await self._log_changes(
                InboxChange(inbox_id=i, kind="deleted", thread_ids=tuple(sorted(t)))
                for i, t in held.items()
            )
        return sum(len(v) for v in doomed.values())

    async def finish_deletions(self, swept: Sequence[PendingDeletion]) -> None:
        if not swept:
            return
        keys = {(p.deleted_at_ms, p.thread_id) for p in swept}
        unswept = [
            p.deleted_at_ms
            for p in await self.pending_deletions()
            if (p.deleted_at_ms, p.thread_id) not in keys
        ]
        floor = min(unswept, default=None)
        ranged = [p for p in swept if floor is None or p.deleted_at_ms < floor]
        if ranged:
            # One range tombstone for the lot (nothing pending sorts before `floor`).
            await self._q(
                "DELETE FROM {ks}.inbox_deleting WHERE shard = 0 AND deleted_at_ms <= ?",
                (max(p.deleted_at_ms for p in ranged),),
            )
        single = await self._stmt(
            "DELETE FROM {ks}.inbox_deleting WHERE shard = 0 AND deleted_at_ms = ? "
            "AND thread_id = ?"
        )
        await gather(
            self._s.run(single, (p.deleted_at_ms, p.thread_id))
            for p in swept
            if floor is not None and p.deleted_at_ms >= floor
        )

    async def get_operation(self, operation_id: str) -> InboxOperation | None:
        rows = await self._q(
            f"SELECT {_OPERATION_COLUMNS} FROM {{ks}}.inbox_operations WHERE operation_id = ?",
            (operation_id,),
        )
        if not rows:
            return None
        r = rows[0]
        state = r.get("state")
        return InboxOperation(
            operation_id=ir.text(r, "operation_id"),
            kind=ir.text(r, "kind"),
            state=state if state in ("running", "done", "failed") else "failed",
            done=ir.integer(r, "done"),
            total=ir.integer(r, "total"),
            error=ir.text(r, "error"),
            updated_at_ms=ir.integer(r, "updated_at_ms"),
        )

    async def save_operation(self, record: InboxOperation) -> None:
        r = record
        await self._q(
            f"INSERT INTO {{ks}}.inbox_operations ({_OPERATION_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (r.operation_id, r.kind, r.state, r.done, r.total, r.error, r.updated_at_ms),
        )
