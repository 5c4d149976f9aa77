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

Scans (`loom dump`) page by keyset on the row key, each page one short request starting
after the last row (or cell) of the page before: mappings from the forward tables (one row
each, whether or not its `r` flag is set yet), links from the `n` cells of UT rows, streamed
and cut after a page's worth of cells (a wide row is finished cell range by cell range),
each undirected link kept once, from the row of its smaller UT. UT rows without links are
skipped by the engine, but still scanned by it.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

from google.cloud.bigtable.data import (
    DeleteRangeFromColumn,
    ReadRowsQuery,
    RowMutationEntry,
    RowRange,
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
    LONGEST_UT,
    RECORD_WIDTH,
    WIDEST_CELL,
    cells_per_response,
    decode_thread,
    encode_thread,
    latest,
    needs_repack,
    pack,
    record,
    unpack,
)
from storage.clock import now_ms
from storage.errors import StorageCorrupt, StorageError
from storage.ports import MessageMapping, ThreadKey, UnifiedStats, UtRows
from storage.settings import BigtableSettings
from storage.slices import slices

__all__ = ["TABLES", "BigtableThreadStore"]


_THREAD_UT, _MESSAGE_UT, _UT = "thread_ut", "message_ut", "ut"
_FAM_U, _FAM_M, _FAM_Q, _FAM_P, _FAM_N = "u", "m", "q", "p", "n"
_ONE = gc_rule(max_versions=1)
TABLES = {
    _THREAD_UT: {_FAM_U: _ONE},
    _MESSAGE_UT: {_FAM_M: _ONE},
    _UT: {_FAM_Q: _ONE, _FAM_P: _ONE, _FAM_N: _ONE},
}
_READ_KEYS = 500  # row keys per ReadRows request
_REPACK_CELLS = 2_000  # packed cells merged by one atomic row mutation
_SENT = struct.Struct(">q")
_LATEST = rf.CellsColumnLimitFilter(1)  # single-family tables: no (per-cell regex) family filter
_WIDTHS: dict[str, int | None] = {_FAM_Q: None, _FAM_P: RECORD_WIDTH}  # fixed entry sizes
_Stored = tuple[str, int, bool]  # a message row: (UT, sent_at, recorded in its UT)
_LINK_ROW_CELLS = cells_per_response([b"\0" * LONGEST_UT], LONGEST_UT)  # per row per response
T = TypeVar("T")


def _links_only(limit: int) -> rf.RowFilter:
    """Links only, without a regex: the emulator would compile a family regex for every cell."""
    return rf.RowFilterChain(
        [
            rf.ColumnRangeFilter(_FAM_N),
            rf.StripValueTransformerFilter(True),
            rf.CellsRowLimitFilter(limit),
        ]
    )


def _text(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise StorageCorrupt(f"bad UT bytes {data!r}") from exc


def _now_micros() -> int:
    return now_ms() * 1000  # Bigtable wants whole milliseconds


def _cells(row: Any) -> dict[bytes, bytes]:
    return {} if row is None else {c.qualifier: c.value for c in row.cells}


def _message_row(row: Any) -> _Stored | None:
    stored = _cells(row)
    if b"u" not in stored or len(stored.get(b"s", b"")) != _SENT.size:
        return None
    return _text(stored[b"u"]), _SENT.unpack(stored[b"s"])[0], b"r" in stored


class BigtableThreadStore:
    """`storage.ports.ThreadStore` on Cloud Bigtable (or its emulator)."""

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
        rows = await self._read_rows(self._thread_ut, list(keys), _LATEST)
        found: dict[ThreadKey, tuple[str, bool]] = {}
        for row_key, row in rows.items():
            cells = _cells(row)
            if b"u" in cells and row_key in keys:
                found[keys[row_key]] = (_text(cells[b"u"]), b"r" in cells)
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
                row = await self._thread_ut.read_row(row_key, row_filter=_LATEST)
            cells = _cells(row)
            if b"u" not in cells:
                raise StorageCorrupt(f"thread row {row_key!r} matched but holds no UT")
            return _text(cells[b"u"]), b"r" in cells

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

        async def put(mapping: MessageMapping) -> _Stored:
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
                row = await self._message_ut.read_row(mapping.rfc_key, row_filter=_LATEST)
            stored = _message_row(row)
            if stored is None:
                raise StorageCorrupt(f"message row {mapping.rfc_key.hex()} is incomplete")
            return stored

        winners: dict[bytes, _Stored] = {}
        for rfc, row in (await self._read_rows(self._message_ut, list(proposals), _LATEST)).items():
            stored = _message_row(row)
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
        rows = await self._read_rows(self._ut, keys, _links_only(limit))
        found: dict[str, frozenset[str]] = {}
        for key, row in rows.items():
            cells = [c.qualifier for c in row.cells]
            if len(cells) >= limit:  # the smallest UT of a huge component: page it
                pages = read_row_cells(
                    self._ut, key, _FAM_N, strip_values=True, max_cell_bytes=LONGEST_UT
                )
                cells = [q async for q, _ in pages]
            if cells:
                found[_text(key)] = frozenset(_text(q) for q in cells)
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
                links[_text(row_key)] = frozenset(_text(q) for q in cells[_FAM_N])
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

    async def scan_thread_uts(self, page: int) -> AsyncIterator[list[tuple[ThreadKey, str]]]:
        def mapping(row: Any) -> tuple[ThreadKey, str] | None:
            cells = _cells(row)
            return (decode_thread(row.row_key), _text(cells[b"u"])) if b"u" in cells else None

        async with contextlib.aclosing(self._scan_rows(self._thread_ut, mapping, page)) as scan:
            async for items in scan:
                yield items

    async def scan_message_uts(self, page: int) -> AsyncIterator[list[MessageMapping]]:
        def mapping(row: Any) -> MessageMapping | None:
            stored = _message_row(row)
            if stored is None:  # no mapping: as absent, as a put reads it
                return None
            return MessageMapping(rfc_key=row.row_key, ut=stored[0], sent_at_ms=stored[1])

        async with contextlib.aclosing(self._scan_rows(self._message_ut, mapping, page)) as scan:
            async for items in scan:
                yield items

    async def _scan_rows(
        self, table: Any, mapping: Callable[[Any], T | None], page: int
    ) -> AsyncGenerator[list[T], None]:
        """`mapping` of every row of a forward table (rows it maps to None left out), in
        pages of `page`: one ReadRows of up to `page` rows per page, after the last key."""
        _check_page(page)
        held: list[T] = []
        after: bytes | None = None
        while True:
            ranges = [] if after is None else [RowRange(start_key=after, start_is_inclusive=False)]
            with errors("scan rows"):
                rows = await table.read_rows(
                    ReadRowsQuery(row_ranges=ranges, limit=page, row_filter=_LATEST)
                )
            held += [item for item in map(mapping, rows) if item is not None]
            if len(held) >= page:
                yield held[:page]
                held = held[page:]
            if len(rows) < page:
                if held:
                    yield held
                return
            after = rows[-1].row_key

    async def scan_links(self, page: int) -> AsyncIterator[list[tuple[str, str]]]:
        held: list[tuple[str, str]] = []
        async with contextlib.aclosing(self._link_cells(page)) as scan:
            async for cells in scan:
                # Each link is two cells, one in each UT's row: keep the smaller UT's.
                held += [(_text(row), _text(q)) for row, q in cells if row < q]
                if len(held) >= page:
                    yield held[:page]
                    held = held[page:]
        if held:
            yield held

    async def _link_cells(self, page: int) -> AsyncGenerator[list[tuple[bytes, bytes]], None]:
        """Every link cell of the UT table as (row key, qualifier), in key then qualifier
        order, in lists of at most `page`: each one short request that resumes after the
        last cell of the list before (none held open while the caller works)."""
        _check_page(page)
        per_row = max(1, min(page, _LINK_ROW_CELLS))
        row: bytes | None = None  # the last row a list reached
        after: bytes | None = None  # its last qualifier read, when it may hold more links
        while True:
            if row is not None and after is not None:  # finish the row, a range at a time
                chain = rf.RowFilterChain(
                    [
                        rf.ColumnRangeFilter(_FAM_N, start_qualifier=after, inclusive_start=False),
                        rf.StripValueTransformerFilter(True),
                        rf.CellsRowLimitFilter(per_row),
                    ]
                )
                with errors("scan links"):
                    found = await self._ut.read_row(row, row_filter=chain)
                rest = [] if found is None else [c.qualifier for c in found.cells]
                if rest:
                    yield [(row, q) for q in rest]
                after = rest[-1] if len(rest) >= per_row else None
                continue
            # Rows after `row`, streamed until a list's worth of cells; a row cut short (by
            # the list's end or the per-row limit that keeps a response small) is resumed.
            taken: list[tuple[bytes, bytes]] = []
            ended = True
            ranges = [] if row is None else [RowRange(start_key=row, start_is_inclusive=False)]
            query = ReadRowsQuery(row_ranges=ranges, row_filter=_links_only(per_row))
            with errors("scan links"):
                stream = await self._ut.read_rows_stream(query)
                async with contextlib.aclosing(stream):
                    async for found in stream:
                        cells = [c.qualifier for c in found.cells]
                        room = page - len(taken)
                        taken += [(found.row_key, q) for q in cells[:room]]
                        row = found.row_key
                        if len(cells) > room or len(cells) >= per_row:
                            after = taken[-1][1]
                        if len(taken) >= page or after is not None:
                            ended = False
                            break
            if taken:
                yield taken
            if ended:
                return

    async def close(self) -> None:
        await self._handle.close()


def _check_page(page: int) -> None:
    if page < 1:
        raise ValueError(f"page must be at least 1, not {page}")
