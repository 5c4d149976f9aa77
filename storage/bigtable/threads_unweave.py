"""The Bigtable ThreadStore's deletion support: edges, rehoming, retired marks.

    thread_msg  row enc(gid, thread_id)  family e: MD5 Message-ID -> sent_at   thread -> edges
    ut_retired  row UT (UTF-8)           family r: "" = retired                 retired marks

A mailbox's threads are the row range of its ``enc(gid, ...)`` prefix, in ``thread_msg``
(and in ``thread_ut`` for threads woven before edges were kept). Rehoming rewrites a
forward cell by deleting the column and setting it in one atomic row mutation (never two
versions), and moves reverse entries between UT rows: the new row gets them packed like any
write; the old row's packed cells are read whole and replaced, in one row mutation that
deletes only the cells it read, so entries written meanwhile (a concurrent weave) survive,
as in `_repack`. Deleted rows and cells leave the tables at the next compaction.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

from google.cloud.bigtable.data import (
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data import row_filters as rf

from storage.bigtable.client import bounded_gather, bulk_set_cells, errors, read_row_cells
from storage.bigtable.thread_cells import (
    LATEST,
    RECORD_WIDTH,
    WIDEST_CELL,
    decode_thread,
    encode_thread,
    message_row,
    pack,
    record,
    row_cells,
    text,
    unpack,
)
from storage.bigtable.threads_scan import ThreadScans
from storage.clock import now_ms
from storage.ports import MessageMapping, ThreadKey, ThreadMessage
from storage.slices import slices

__all__ = ["ThreadUnweaving", "unweave_tables"]

_EDGES, _RETIRED = "thread_msg", "ut_retired"
_FAM_E, _FAM_R = "e", "r"
_FAM_Q, _FAM_P, _FAM_M, _FAM_U = "q", "p", "m", "u"
_SENT = struct.Struct(">q")
_BATCH = 500


def unweave_tables(one: Any) -> dict[str, dict[str, Any]]:
    """The tables (with their families' GC rule `one`) this module adds to the store."""
    return {_EDGES: {_FAM_E: one}, _RETIRED: {_FAM_R: one}}


class ThreadUnweaving(ThreadScans):
    """The deletion methods of `storage.ports.ThreadStore` on Bigtable (module doc)."""

    _handle: Any
    _thread_ut: Any
    _message_ut: Any
    _ut: Any

    async def _read_rows(
        self, table: Any, keys: Sequence[bytes], row_filter: rf.RowFilter
    ) -> dict[bytes, Any]:
        raise NotImplementedError  # BigtableThreadStore's

    async def _write_packed(
        self, family: str, by_ut: dict[str, list[bytes]], width: int | None = None
    ) -> None:
        raise NotImplementedError  # BigtableThreadStore's

    async def _mutate(self, table: Any, entries: list[RowMutationEntry]) -> None:
        async def send(batch: Sequence[RowMutationEntry]) -> None:
            with errors("rehome"):
                await table.bulk_mutate_rows(list(batch))

        await bounded_gather(send, list(slices(entries, _BATCH)))

    async def put_thread_messages(self, edges: Sequence[ThreadMessage]) -> None:
        await bulk_set_cells(
            self._handle.table(_EDGES),
            ((encode_thread(e.thread), _FAM_E, e.rfc_key, _SENT.pack(e.sent_at_ms)) for e in edges),
            timestamp_micros=0,
        )

    async def get_thread_messages(
        self, threads: Sequence[ThreadKey]
    ) -> dict[ThreadKey, dict[bytes, int]]:
        keys = {encode_thread(t): t for t in dict.fromkeys(threads)}
        rows = await self._read_rows(self._handle.table(_EDGES), list(keys), LATEST)
        out: dict[ThreadKey, dict[bytes, int]] = {}
        for key, row in rows.items():
            cells = row_cells(row)
            if cells and key in keys:
                out[keys[key]] = {q: _SENT.unpack(v)[0] for q, v in cells.items()}
        return out

    async def get_message_uts(self, keys: Sequence[bytes]) -> dict[bytes, MessageMapping]:
        rows = await self._read_rows(self._message_ut, list(dict.fromkeys(keys)), LATEST)
        out: dict[bytes, MessageMapping] = {}
        for key, row in rows.items():
            stored = message_row(row)
            if stored is not None:
                out[key] = MessageMapping(rfc_key=key, ut=stored[0], sent_at_ms=stored[1])
        return out

    async def get_ut_messages(self, uts: Sequence[str]) -> list[MessageMapping]:
        async def one(ut: str) -> list[MessageMapping]:
            records: set[bytes] = set()
            async for _, value in read_row_cells(
                self._ut, ut.encode(), _FAM_P, max_cell_bytes=WIDEST_CELL
            ):
                unpack(value, records, RECORD_WIDTH)
            by_key = {r[:16]: _SENT.unpack(r[16:])[0] for r in sorted(records)}
            return [MessageMapping(rfc_key=k, ut=ut, sent_at_ms=s) for k, s in by_key.items()]

        found = await bounded_gather(one, list(dict.fromkeys(uts)))
        return [m for ms in found for m in ms]

    async def _current_thread_uts(self, threads: Iterable[ThreadKey]) -> dict[ThreadKey, str]:
        keys = {encode_thread(t): t for t in dict.fromkeys(threads)}
        rows = await self._read_rows(self._thread_ut, list(keys), LATEST)
        found: dict[ThreadKey, str] = {}
        for key, row in rows.items():
            cells = row_cells(row)
            if b"u" in cells and key in keys:
                found[keys[key]] = text(cells[b"u"])
        return found

    async def rehome(
        self,
        threads: Sequence[tuple[ThreadKey, str | None]],
        messages: Sequence[MessageMapping],
        dropped_messages: Sequence[bytes],
    ) -> None:
        old_t = await self._current_thread_uts(t for t, _ in threads)
        old_m = await self.get_message_uts([m.rfc_key for m in messages] + [*dropped_messages])
        moved = [(t, ut) for t, ut in threads if ut is not None and t in old_t]
        gone = [t for t, ut in threads if ut is None and t in old_t]
        msgs = [m for m in messages if m.rfc_key in old_m]
        drop = [k for k in dropped_messages if k in old_m]
        new_q: dict[str, list[bytes]] = {}
        for t, ut in moved:
            new_q.setdefault(ut, []).append(encode_thread(t))
        new_p: dict[str, list[bytes]] = {}
        for m in msgs:
            new_p.setdefault(m.ut, []).append(record(m.rfc_key, m.sent_at_ms))
        await self._write_packed(_FAM_Q, new_q)
        await self._write_packed(_FAM_P, new_p, RECORD_WIDTH)
        stamp = now_ms() * 1000
        entries = [
            RowMutationEntry(
                encode_thread(t),
                [
                    DeleteRangeFromColumn(_FAM_U, b"u"),
                    SetCell(_FAM_U, b"u", ut.encode(), timestamp_micros=stamp),
                    SetCell(_FAM_U, b"r", b"", timestamp_micros=0),
                ],
            )
            for t, ut in moved
        ]
        entries += [RowMutationEntry(encode_thread(t), [DeleteAllFromRow()]) for t in gone]
        await self._mutate(self._thread_ut, entries)
        message_entries = [
            RowMutationEntry(
                m.rfc_key,
                [
                    DeleteRangeFromColumn(_FAM_M, b"u"),
                    DeleteRangeFromColumn(_FAM_M, b"s"),
                    SetCell(_FAM_M, b"u", m.ut.encode(), timestamp_micros=stamp),
                    SetCell(_FAM_M, b"s", _SENT.pack(m.sent_at_ms), timestamp_micros=stamp),
                    SetCell(_FAM_M, b"r", b"", timestamp_micros=0),
                ],
            )
            for m in msgs
        ]
        message_entries += [RowMutationEntry(k, [DeleteAllFromRow()]) for k in drop]
        await self._mutate(self._message_ut, message_entries)
        new_t = dict(moved)
        old_q: dict[str, set[bytes]] = {}
        for t, ut in old_t.items():
            if t in gone or new_t.get(t, ut) != ut:
                old_q.setdefault(ut, set()).add(encode_thread(t))
        new_m = {m.rfc_key: m.ut for m in msgs}
        old_p: dict[str, set[bytes]] = {}
        for key, m in old_m.items():
            if new_m.get(key, "") != m.ut:
                old_p.setdefault(m.ut, set()).add(record(key, m.sent_at_ms))
        await bounded_gather(
            self._remove_entries,
            [(ut, _FAM_Q, e) for ut, e in old_q.items()]
            + [(ut, _FAM_P, e) for ut, e in old_p.items()],
        )

    async def _remove_entries(self, job: tuple[str, str, set[bytes]]) -> None:
        """Drops `entries` from a UT row's packed family, keeping every other entry."""
        ut, family, entries = job
        row_key = ut.encode()
        width = RECORD_WIDTH if family == _FAM_P else None
        cells = {
            q: v
            async for q, v in read_row_cells(self._ut, row_key, family, max_cell_bytes=WIDEST_CELL)
        }
        kept: set[bytes] = set()
        for value in cells.values():
            unpack(value, kept, width)
        if not kept & entries:
            return
        full = dict(pack(kept - entries, width))
        mutations: list[Any] = [
            SetCell(family, q, v, timestamp_micros=0) for q, v in full.items() if q not in cells
        ]
        mutations += [DeleteRangeFromColumn(family, q) for q in cells if q not in full]
        with errors("rehome"):
            await self._ut.mutate_row(row_key, mutations)

    async def remove_thread_messages(self, threads: Sequence[ThreadKey]) -> None:
        entries = [
            RowMutationEntry(encode_thread(t), [DeleteAllFromRow()]) for t in sorted(set(threads))
        ]
        await self._mutate(self._handle.table(_EDGES), entries)

    async def get_mailbox_threads(self, gid: str) -> list[ThreadKey]:
        prefix = encode_thread(ThreadKey(gid, ""))
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        found: dict[ThreadKey, None] = {}
        for table in (self._handle.table(_EDGES), self._thread_ut):
            query = ReadRowsQuery(
                row_ranges=[RowRange(start_key=prefix, end_key=end)],
                row_filter=rf.RowFilterChain(
                    [rf.CellsRowLimitFilter(1), rf.StripValueTransformerFilter(True)]
                ),
            )
            with errors("list mailbox"):
                rows = await table.read_rows(query)
            found.update((decode_thread(r.row_key), None) for r in rows)
        return list(found)

    async def retire_uts(self, uts: Sequence[str]) -> None:
        await bulk_set_cells(
            self._handle.table(_RETIRED),
            ((ut.encode(), _FAM_R, b"r", b"") for ut in set(uts)),
            timestamp_micros=0,
        )

    async def get_retired(self, uts: Sequence[str]) -> frozenset[str]:
        keys = [ut.encode() for ut in dict.fromkeys(uts)]
        rows = await self._read_rows(self._handle.table(_RETIRED), keys, LATEST)
        return frozenset(text(k) for k, row in rows.items() if row_cells(row))

    async def forget_retired(self, uts: Sequence[str]) -> None:
        entries = [RowMutationEntry(ut.encode(), [DeleteAllFromRow()]) for ut in sorted(set(uts))]
        await self._mutate(self._handle.table(_RETIRED), entries)

    async def scrub(self) -> None:
        """Nothing to do here: deleted cells leave Bigtable's files at compaction."""
