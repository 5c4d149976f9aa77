"""ThreadStore on Cloud Bigtable: the seed's design, one conditional mutation per new key.

Tables (ids are `table_prefix` + name); every family keeps one version (MaxVersionsGCRule(1)),
nothing expires because mappings are permanent:

    thread_ut   row enc(gid, thread_id)  family u: u = UT, r = recorded        thread -> UT
    message_ut  row MD5 of Message-ID    family m: u = UT, s = sent_at,        Message-ID -> UT
                                                   r = recorded
    ut          row UT (UTF-8)           family q: packed enc(gid, thread_id)  UT -> threads
                                         family p: packed message records      UT -> messages
                                         family n: linked UT -> b""            UT -> links

Cell spellings (enc, packed sets) are in `thread_cells.py`. A UT's row is everything a
read needs of it, so one level of a read is one multi-row ReadRows.

Insert-if-absent is the seed's check-and-mutate: predicate "family holds any cell", SetCell
in the false branch. A put first reads every key in bulk (re-seen keys, the common case, cost
no conditional write); only missing keys get check-and-mutate, and since the async client
tells whether the predicate matched, the winner is read back only when a racer was first.
Reverse cells are idempotent (fixed timestamp 0) and written for the *winner* of every key
whose forward row lacks its `r` flag, which is set only after they are written. A forward
row without `r` is treated as not there by `get_thread_uts`, so the next call that meets
the key, whoever makes it, completes what a crashed writer left undone.

A read level (`read_uts`) is one multi-row ReadRows of whole UT rows with no family or
qualifier filter: the emulator pays per cell scanned for every filter (it compiles a regex
per cell), so rows are split by family and team-filtered here. A row too wide for one
response (a cell-count limit, sized for the longest UT id, keeps each under the emulator's
4 MiB) is the rare huge unified thread (or one whose many small cells were never re-packed),
read again page by page; such a read stops as soon as it has the threads it was asked for.

Scans (`loom dump`) are `storage.bigtable.threads_scan`'s.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from google.cloud.bigtable.data import (
    DeleteRangeFromColumn,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)
from google.cloud.bigtable.data import row_filters as rf

from storage.bigtable import versions
from storage.bigtable.client import (
    BigtableHandle,
    bounded_gather,
    bulk_set_cells,
    errors,
    family_has_cells,
    gc_rule,
    read_row_cells,
)
from storage.bigtable.thread_cells import (
    LATEST,
    LINKS,
    LONGEST_UT,
    RECORD_WIDTH,
    WIDEST_CELL,
    StoredMessage,
    cells_per_response,
    decode_thread,
    encode_thread,
    latest,
    links_only,
    message_row,
    needs_repack,
    pack,
    record,
    row_cells,
    text,
    unpack,
)
from storage.bigtable.threads_unweave import ThreadUnweaving, unweave_tables
from storage.clock import now_ms
from storage.errors import StorageCorrupt, StorageError
from storage.ports import MessageMapping, ThreadKey, UnifiedStats, UtRows
from storage.settings import BigtableSettings
from storage.slices import slices

__all__ = ["TABLES", "BigtableThreadStore"]


_THREAD_UT, _MESSAGE_UT, _UT = "thread_ut", "message_ut", "ut"
_FAM_U, _FAM_M, _FAM_Q, _FAM_P, _FAM_N = "u", "m", "q", "p", LINKS
_ONE = gc_rule(max_versions=1)
TABLES = {
    _THREAD_UT: {_FAM_U: _ONE},
    _MESSAGE_UT: {_FAM_M: _ONE},
    _UT: {_FAM_Q: _ONE, _FAM_P: _ONE, _FAM_N: _ONE},
    **unweave_tables(_ONE),
}
_READ_KEYS = 500  # row keys per ReadRows request
_REPACK_CELLS = 2_000  # packed cells merged by one atomic row mutation
_SENT = struct.Struct(">q")
_WIDTHS: dict[str, int | None] = {_FAM_Q: None, _FAM_P: RECORD_WIDTH}  # fixed entry sizes


def _now_micros() -> int:
    return now_ms() * 1000  # Bigtable wants whole milliseconds


class BigtableThreadStore(ThreadUnweaving):
    """`storage.ports.PortableThreadStore` on Cloud Bigtable (or its emulator); its scans
    are `ThreadScans`', its deletions `ThreadUnweaving`'s."""

    def __init__(self, handle: BigtableHandle) -> None:
        self._handle = handle
        self._thread_ut = handle.table(_THREAD_UT)
        self._message_ut = handle.table(_MESSAGE_UT)
        self._ut = handle.table(_UT)

    @classmethod
    async def open(cls, settings: BigtableSettings) -> BigtableThreadStore:
        """Connects (creating tables and families first when `settings.create_tables`)."""
        migrate = partial(versions.upgrade, settings, TABLES, versions.THREADS)
        return cls(await BigtableHandle.open(settings, TABLES, migrate))

    async def _read_rows(
        self, table: Any, keys: Sequence[bytes], row_filter: rf.RowFilter
    ) -> dict[bytes, Any]:
        """Rows by key, in concurrent requests of `_READ_KEYS` keys."""

        async def read(chunk: Sequence[bytes]) -> list[Any]:
            with errors("read rows"):
                query = ReadRowsQuery(row_keys=list(chunk), row_filter=row_filter)
                return list(await table.read_rows(query))

        found: dict[bytes, Any] = {}
        for rows in await bounded_gather(read, list(slices(keys, _READ_KEYS))):
            found.update((row.row_key, row) for row in rows)
        return found

    async def _thread_rows(self, threads: Iterable[ThreadKey]) -> dict[ThreadKey, tuple[str, bool]]:
        """(UT, recorded) of each mapped thread."""
        keys = {encode_thread(t): t for t in dict.fromkeys(threads)}
        rows = await self._read_rows(self._thread_ut, list(keys), LATEST)
        found: dict[ThreadKey, tuple[str, bool]] = {}
        for row_key, row in rows.items():
            cells = row_cells(row)
            if b"u" in cells and row_key in keys:
                found[keys[row_key]] = (text(cells[b"u"]), b"r" in cells)
        return found

    async def get_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        rows = await self._thread_rows(threads)
        return {t: ut for t, (ut, recorded) in rows.items() if recorded}

    async def put_thread_uts_if_absent(self, items: Sequence[tuple[ThreadKey, str]]) -> list[str]:
        proposals: dict[ThreadKey, str] = {}
        for key, ut in items:
            proposals.setdefault(key, ut)  # one conditional write per distinct thread
        predicate = family_has_cells(_FAM_U)

        async def put(pair: tuple[ThreadKey, str]) -> tuple[str, bool]:
            key, ut = pair
            row_key = encode_thread(key)
            cell = SetCell(_FAM_U, b"u", ut.encode(), timestamp_micros=_now_micros())
            with errors("put thread ut"):
                taken = await self._thread_ut.check_and_mutate_row(
                    row_key, predicate, false_case_mutations=[cell]
                )
                if not taken:
                    return ut, False
                row = await self._thread_ut.read_row(row_key, row_filter=LATEST)
            cells = row_cells(row)
            if b"u" not in cells:
                raise StorageCorrupt(f"thread row {row_key!r} matched but holds no UT")
            return text(cells[b"u"]), b"r" in cells

        winners = await self._thread_rows(proposals)  # most keys exist: 1 bulk read
        missing = [(k, ut) for k, ut in proposals.items() if k not in winners]
        winners.update(
            zip((k for k, _ in missing), await bounded_gather(put, missing), strict=True)
        )
        unrecorded = {k: ut for k, (ut, recorded) in winners.items() if not recorded}
        if unrecorded:
            by_ut: dict[str, list[bytes]] = {}
            for k, ut in unrecorded.items():
                by_ut.setdefault(ut, []).append(encode_thread(k))
            await self._write_packed(_FAM_Q, by_ut)
            await self._flag_recorded(
                self._thread_ut, _FAM_U, (encode_thread(k) for k in unrecorded)
            )
        return [winners[key][0] for key, _ in items]

    async def put_message_uts_if_absent(self, items: Sequence[MessageMapping]) -> list[str]:
        proposals: dict[bytes, MessageMapping] = {}
        for mapping in items:
            proposals.setdefault(mapping.rfc_key, mapping)
        predicate = family_has_cells(_FAM_M)

        async def put(mapping: MessageMapping) -> StoredMessage:
            stamp = _now_micros()
            cells = [
                SetCell(_FAM_M, b"u", mapping.ut.encode(), timestamp_micros=stamp),
                SetCell(_FAM_M, b"s", _SENT.pack(mapping.sent_at_ms), timestamp_micros=stamp),
            ]
            with errors("put message ut"):
                taken = await self._message_ut.check_and_mutate_row(
                    mapping.rfc_key, predicate, false_case_mutations=cells
                )
                if not taken:
                    return mapping.ut, mapping.sent_at_ms, False
                row = await self._message_ut.read_row(mapping.rfc_key, row_filter=LATEST)
            stored = message_row(row)
            if stored is None:
                raise StorageCorrupt(f"message row {mapping.rfc_key.hex()} is incomplete")
            return stored

        winners: dict[bytes, StoredMessage] = {}
        for rfc, row in (await self._read_rows(self._message_ut, list(proposals), LATEST)).items():
            stored = message_row(row)
            if stored is not None:
                winners[rfc] = stored
        missing = [m for rfc, m in proposals.items() if rfc not in winners]
        winners.update(
            zip((m.rfc_key for m in missing), await bounded_gather(put, missing), strict=True)
        )
        by_ut: dict[str, list[bytes]] = {}
        for rfc, (ut, sent, recorded) in winners.items():
            if not recorded:
                by_ut.setdefault(ut, []).append(record(rfc, sent))
        if by_ut:
            await self._write_packed(_FAM_P, by_ut, RECORD_WIDTH)
            await self._flag_recorded(
                self._message_ut, _FAM_M, (e[:16] for entries in by_ut.values() for e in entries)
            )
        return [winners[m.rfc_key][0] for m in items]

    async def _write_packed(
        self, family: str, by_ut: dict[str, list[bytes]], width: int | None = None
    ) -> None:
        await bulk_set_cells(
            self._ut,
            (
                (ut.encode(), family, qualifier, value)
                for ut, entries in by_ut.items()
                for qualifier, value in pack(entries, width)
            ),
            timestamp_micros=0,
        )

    async def _flag_recorded(self, table: Any, family: str, keys: Iterable[bytes]) -> None:
        await bulk_set_cells(table, ((k, family, b"r", b"") for k in keys), timestamp_micros=0)

    async def add_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        await bulk_set_cells(
            self._ut,
            (
                (a.encode(), _FAM_N, b.encode(), b"")
                for x, y in pairs
                if x != y
                for a, b in ((x, y), (y, x))
            ),
            timestamp_micros=0,
        )

    async def remove_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        by_row: dict[bytes, set[bytes]] = {}
        for x, y in pairs:
            for a, b in ((x, y), (y, x)):
                by_row.setdefault(a.encode(), set()).add(b.encode())
        entries = [
            RowMutationEntry(row, [DeleteRangeFromColumn(_FAM_N, q) for q in sorted(qs)])
            for row, qs in by_row.items()
        ]

        async def send(batch: Sequence[RowMutationEntry]) -> None:
            with errors("remove links"):
                await self._ut.bulk_mutate_rows(list(batch))

        await bounded_gather(send, list(slices(entries, _READ_KEYS)))

    async def get_links(self, uts: Sequence[str]) -> dict[str, frozenset[str]]:
        keys = [ut.encode() for ut in dict.fromkeys(uts)]
        limit = cells_per_response(keys, LONGEST_UT)
        rows = await self._read_rows(self._ut, keys, links_only(limit))
        found: dict[str, frozenset[str]] = {}
        for key, row in rows.items():
            cells = [c.qualifier for c in row.cells]
            if len(cells) >= limit:  # the smallest UT of a huge component: page it
                pages = read_row_cells(
                    self._ut, key, _FAM_N, strip_values=True, max_cell_bytes=LONGEST_UT
                )
                cells = [q async for q, _ in pages]
            if cells:
                found[text(key)] = frozenset(text(q) for q in cells)
        return found

    async def read_uts(
        self, uts: Sequence[str], gids: frozenset[str] | None, thread_limit: int
    ) -> UtRows:
        wanted = list(dict.fromkeys(uts))
        if gids is not None and not gids:
            thread_limit = 0
        keys = [ut.encode() for ut in wanted]
        limit = cells_per_response(keys, WIDEST_CELL)
        rows = await self._read_rows(self._ut, keys, rf.CellsRowLimitFilter(limit))
        links: dict[str, frozenset[str]] = dict.fromkeys(wanted, frozenset())
        threads: list[ThreadKey] = []
        records: set[bytes] = set()
        for row_key, row in rows.items():
            cells: dict[str, dict[bytes, bytes]] = {_FAM_Q: {}, _FAM_P: {}, _FAM_N: {}}
            wide = len(row.cells) >= limit
            if wide:  # a huge (or never re-packed) unified thread: page through it
                for family in (_FAM_P, _FAM_N):
                    pages = read_row_cells(self._ut, row_key, family, max_cell_bytes=WIDEST_CELL)
                    cells[family] = {q: v async for q, v in pages}
            else:
                for cell in row.cells:
                    cells[cell.family][cell.qualifier] = cell.value
            if cells[_FAM_N]:
                links[text(row_key)] = frozenset(text(q) for q in cells[_FAM_N])
            records |= await self._entries(row_key, _FAM_P, cells[_FAM_P])
            if thread_limit > len(threads):
                if wide:
                    threads += await self._page_threads(row_key, gids, thread_limit - len(threads))
                else:
                    entries = await self._entries(row_key, _FAM_Q, cells[_FAM_Q])
                    found = (decode_thread(e) for e in entries)
                    threads += found if gids is None else (t for t in found if t.gid in gids)
        return UtRows(
            links=links,
            threads=threads[:thread_limit],
            stats=UnifiedStats(len(records), latest(records)),
        )

    async def _entries(self, row_key: bytes, family: str, cells: dict[bytes, bytes]) -> set[bytes]:
        """The entries of a family's packed cells (all of them), re-packing them if needed."""
        entries: set[bytes] = set()
        width = _WIDTHS[family]
        for value in cells.values():
            unpack(value, entries, width)
        if needs_repack(len(cells), sum(len(v) for v in cells.values())):
            await self._repack(row_key, family, cells)
        return entries

    async def _page_threads(
        self, row_key: bytes, gids: frozenset[str] | None, limit: int
    ) -> list[ThreadKey]:
        """A wide row's threads (owners in `gids` when given), until `limit` are found."""
        threads: set[ThreadKey] = set()
        cells: dict[bytes, bytes] = {}
        pages = read_row_cells(self._ut, row_key, _FAM_Q, max_cell_bytes=WIDEST_CELL)
        async for qualifier, value in pages:
            cells[qualifier] = value
            entries: set[bytes] = set()
            unpack(value, entries)
            found = (decode_thread(e) for e in entries)
            threads.update(found if gids is None else (t for t in found if t.gid in gids))
            if len(threads) >= limit:
                return list(threads)
        await self._entries(row_key, _FAM_Q, cells)  # read whole: re-pack it if needed
        return list(threads)

    async def _repack(self, row_key: bytes, family: str, cells: dict[bytes, bytes]) -> None:
        """Replaces many small packed cells of a row by full ones, atomically per slice.

        Each mutation deletes only cells this read saw and sets cells holding every entry
        of them, so concurrent writers and re-packers never lose an entry (at worst one
        sits in two cells, and readers take the union). Best effort: the read already has
        its answer, so a failure here is left for the next reader.
        """
        ordered = sorted(cells.items())
        for start in range(0, len(ordered), _REPACK_CELLS):
            part = dict(ordered[start : start + _REPACK_CELLS])
            entries: set[bytes] = set()
            for value in part.values():
                unpack(value, entries, _WIDTHS[family])
            full = dict(pack(entries, _WIDTHS[family]))
            mutations: list[Any] = [
                SetCell(family, q, v, timestamp_micros=0) for q, v in full.items() if q not in part
            ]
            mutations += [DeleteRangeFromColumn(family, q) for q in part if q not in full]
            if mutations:
                with contextlib.suppress(StorageError), errors("repack"):
                    await self._ut.mutate_row(row_key, mutations)

    async def close(self) -> None:
        await self._handle.close()
