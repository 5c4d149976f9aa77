"""ThreadStore on Cloud Bigtable: the seed's design, one conditional mutation per new key.

Tables (ids are `table_prefix` + name); every family keeps one version (MaxVersionsGCRule(1)),
nothing expires because mappings are permanent:

    thread_ut   row enc(gid, thread_id)  family u: u = UT                     thread -> UT
    message_ut  row MD5 of Message-ID    family m: u = UT, s = sent_at,       Message-ID -> UT
                                                   r = "recorded in its UT"
    ut          row UT (UTF-8)           family t: enc(gid, thread_id) -> b""  UT -> threads
                                         family p: packed message records      UT -> messages
    ut_links    row UT (UTF-8)           family n: linked UT -> b""            UT -> links

Cell spellings (enc, packed records, team filters) are in `thread_cells.py`. Links live in a
table of their own so the writers' link reads never scan a UT's threads and messages.

Insert-if-absent is the seed's check-and-mutate: predicate "family holds any cell", SetCell
in the false branch. A put first reads every key in bulk (re-seen keys, the common case, cost
no conditional write); only missing keys get check-and-mutate, and since the async client
tells whether the predicate matched, the winner is read back only when a racer was first.
Reverse cells are idempotent (fixed timestamp 0, same value every time) and written for the
*winner*: thread cells on every call, message records for every key whose forward row lacks
its `r` flag, which is set only after the records are written. So a crash between a forward
write and its reverse heals on the next call that meets the key, whoever makes it.

A read level (`read_uts`) is two multi-row ReadRows in parallel (UT rows with the team's
thread cells and the record cells; link rows); a row too wide for one response (per-family
cell limits keep each under the emulator's 4 MiB) is finished page by page.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Sequence
from typing import Any

from google.cloud.bigtable.data import ReadRowsQuery, SetCell
from google.cloud.bigtable.data import row_filters as rf

from storage.bigtable.client import (
    BigtableHandle,
    bounded_gather,
    bulk_set_cells,
    chunks,
    escape_family,
    family_has_cells,
    gc_rule,
    read_row_cells,
    translate_errors,
)
from storage.bigtable.thread_cells import (
    decode_thread,
    encode_thread,
    pack_records,
    team_filter,
    team_selectors,
    unpack_records,
)
from storage.errors import StorageCorrupt
from storage.ports import MessageMapping, ThreadKey, UnifiedStats, UtRows
from storage.settings import BigtableSettings

__all__ = ["BigtableThreadStore"]


_THREAD_UT, _MESSAGE_UT, _UT, _LINKS = "thread_ut", "message_ut", "ut", "ut_links"
_FAM_U, _FAM_M, _FAM_T, _FAM_P, _FAM_N = "u", "m", "t", "p", "n"
_ONE = gc_rule(max_versions=1)
_TABLES = {
    _THREAD_UT: {_FAM_U: _ONE},
    _MESSAGE_UT: {_FAM_M: _ONE},
    _UT: {_FAM_T: _ONE, _FAM_P: _ONE},
    _LINKS: {_FAM_N: _ONE},
}
_READ_KEYS = 500  # row keys per ReadRows request
_ROW_THREADS = 2_000  # thread cells per row in one response (<= ~1 KB each)
_ROW_RECORD_CELLS = 128  # record cells per row in one response (<= 6 KB each)
_SENT = struct.Struct(">q")
_Stored = tuple[str, int, bool]  # a message row: (UT, sent_at, recorded in its UT)


def _text(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise StorageCorrupt(f"bad UT bytes {data!r}") from exc


def _now_micros() -> int:
    return time.time_ns() // 1_000_000 * 1000  # Bigtable wants whole milliseconds


def _cells(row: Any, family: str) -> dict[bytes, bytes]:
    return {} if row is None else {c.qualifier: c.value for c in row.cells if c.family == family}


def _message_row(row: Any) -> _Stored | None:
    stored = _cells(row, _FAM_M)
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
        self._links = handle.table(_LINKS)

    @classmethod
    async def open(cls, settings: BigtableSettings) -> BigtableThreadStore:
        """Connects (creating tables and families first when `settings.create_tables`)."""
        return cls(await BigtableHandle.open(settings, _TABLES))

    async def _read_rows(
        self, table: Any, keys: Sequence[bytes], row_filter: rf.RowFilter
    ) -> dict[bytes, Any]:
        """Rows by key, in concurrent requests of `_READ_KEYS` keys."""

        async def read(chunk: Sequence[bytes]) -> list[Any]:
            with translate_errors("read rows"):
                query = ReadRowsQuery(row_keys=list(chunk), row_filter=row_filter)
                return list(await table.read_rows(query))

        found: dict[bytes, Any] = {}
        for rows in await bounded_gather(read, list(chunks(keys, _READ_KEYS))):
            found.update((row.row_key, row) for row in rows)
        return found

    def _family(self, family: str) -> rf.RowFilter:
        return rf.RowFilterChain(
            [rf.FamilyNameRegexFilter(escape_family(family)), rf.CellsColumnLimitFilter(1)]
        )

    async def get_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        keys = {encode_thread(t): t for t in dict.fromkeys(threads)}
        rows = await self._read_rows(self._thread_ut, list(keys), self._family(_FAM_U))
        found: dict[ThreadKey, str] = {}
        for row_key, row in rows.items():
            value = _cells(row, _FAM_U).get(b"u")
            if value is not None and row_key in keys:
                found[keys[row_key]] = _text(value)
        return found

    async def put_thread_uts_if_absent(self, items: Sequence[tuple[ThreadKey, str]]) -> list[str]:
        proposals: dict[ThreadKey, str] = {}
        for key, ut in items:
            proposals.setdefault(key, ut)  # one conditional write per distinct thread
        predicate = family_has_cells(_FAM_U)

        async def put(pair: tuple[ThreadKey, str]) -> str:
            key, ut = pair
            row_key = encode_thread(key)
            cell = SetCell(_FAM_U, b"u", ut.encode(), timestamp_micros=_now_micros())
            with translate_errors("put thread ut"):
                taken = await self._thread_ut.check_and_mutate_row(
                    row_key, predicate, false_case_mutations=[cell]
                )
                if not taken:
                    return ut
                row = await self._thread_ut.read_row(
                    row_key, row_filter=rf.CellsColumnLimitFilter(1)
                )
            value = _cells(row, _FAM_U).get(b"u")
            if value is None:
                raise StorageCorrupt(f"thread row {row_key!r} matched but holds no UT")
            return _text(value)

        winners = await self.get_thread_uts(list(proposals))  # most keys exist: 1 bulk read
        missing = [(k, ut) for k, ut in proposals.items() if k not in winners]
        winners.update(
            zip((k for k, _ in missing), await bounded_gather(put, missing), strict=True)
        )
        await bulk_set_cells(
            self._ut,
            ((ut.encode(), _FAM_T, encode_thread(k), b"") for k, ut in winners.items()),
            timestamp_micros=0,
        )
        return [winners[key] for key, _ in items]

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
            with translate_errors("put message ut"):
                taken = await self._message_ut.check_and_mutate_row(
                    mapping.rfc_key, predicate, false_case_mutations=cells
                )
                if not taken:
                    return mapping.ut, mapping.sent_at_ms, False
                row = await self._message_ut.read_row(
                    mapping.rfc_key, row_filter=rf.CellsColumnLimitFilter(1)
                )
            stored = _message_row(row)
            if stored is None:
                raise StorageCorrupt(f"message row {mapping.rfc_key.hex()} is incomplete")
            return stored

        winners: dict[bytes, _Stored] = {}
        rows = await self._read_rows(self._message_ut, list(proposals), self._family(_FAM_M))
        for rfc, row in rows.items():
            stored = _message_row(row)
            if stored is not None:
                winners[rfc] = stored
        missing = [m for rfc, m in proposals.items() if rfc not in winners]
        winners.update(
            zip((m.rfc_key for m in missing), await bounded_gather(put, missing), strict=True)
        )
        await self._record(winners)
        return [winners[m.rfc_key][0] for m in items]

    async def _record(self, winners: dict[bytes, _Stored]) -> None:
        """Writes the records of keys not yet recorded in their UT, then flags them recorded."""
        by_ut: dict[str, list[tuple[bytes, int]]] = {}
        for rfc, (ut, sent, recorded) in winners.items():
            if not recorded:
                by_ut.setdefault(ut, []).append((rfc, sent))
        if not by_ut:
            return
        await bulk_set_cells(
            self._ut,
            (
                (ut.encode(), _FAM_P, qualifier, value)
                for ut, records in by_ut.items()
                for qualifier, value in pack_records(records)
            ),
            timestamp_micros=0,
        )
        await bulk_set_cells(
            self._message_ut,
            ((rfc, _FAM_M, b"r", b"") for records in by_ut.values() for rfc, _ in records),
            timestamp_micros=0,
        )

    async def add_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        await bulk_set_cells(
            self._links,
            (
                (a.encode(), _FAM_N, b.encode(), b"")
                for x, y in pairs
                if x != y
                for a, b in ((x, y), (y, x))
            ),
            timestamp_micros=0,
        )

    async def get_links(self, uts: Sequence[str]) -> dict[str, frozenset[str]]:
        wanted = list(dict.fromkeys(uts))
        if not wanted:
            return {}
        links_filter = rf.RowFilterChain(
            [rf.FamilyNameRegexFilter(escape_family(_FAM_N)), rf.StripValueTransformerFilter(True)]
        )
        rows = await self._read_rows(self._links, [ut.encode() for ut in wanted], links_filter)
        return {
            _text(key): frozenset(_text(c.qualifier) for c in row.cells)
            for key, row in rows.items()
            if row.cells
        }

    async def read_uts(
        self, uts: Sequence[str], gids: frozenset[str] | None, thread_limit: int
    ) -> UtRows:
        wanted = list(dict.fromkeys(uts))
        if gids is not None and not gids:
            thread_limit = 0
        if not wanted:
            return UtRows({}, [], UnifiedStats(0, None))
        row_threads = min(thread_limit, _ROW_THREADS)
        branches: list[rf.RowFilter] = [
            rf.RowFilterChain(
                [
                    rf.FamilyNameRegexFilter(escape_family(_FAM_P)),
                    rf.CellsRowLimitFilter(_ROW_RECORD_CELLS),
                ]
            )
        ]
        if row_threads > 0:
            branches.append(
                rf.RowFilterChain([team_filter(_FAM_T, gids), rf.CellsRowLimitFilter(row_threads)])
            )
        ut_filter = rf.RowFilterChain(
            [
                rf.CellsColumnLimitFilter(1),
                branches[0] if len(branches) == 1 else rf.RowFilterUnion(branches),
            ]
        )
        rows, links = await asyncio.gather(
            self._read_rows(self._ut, [ut.encode() for ut in wanted], ut_filter),
            self.get_links(wanted),
        )
        threads: list[ThreadKey] = []
        records: dict[bytes, int] = {}
        for key, row in rows.items():
            t_cells = [c.qualifier for c in row.cells if c.family == _FAM_T]
            p_cells = [c.value for c in row.cells if c.family == _FAM_P]
            if len(p_cells) >= _ROW_RECORD_CELLS:
                p_cells = [v async for _, v in read_row_cells(self._ut, key, _FAM_P)]
            for value in p_cells:
                unpack_records(value, records)
            if len(t_cells) >= _ROW_THREADS and len(threads) + len(t_cells) < thread_limit:
                t_cells = await self._page_threads(key, gids, thread_limit - len(threads))
            threads.extend(decode_thread(q) for q in t_cells)
        return UtRows(
            links=links,
            threads=threads[:thread_limit],
            stats=UnifiedStats(len(records), max(records.values()) if records else None),
        )

    async def _page_threads(
        self, row_key: bytes, gids: frozenset[str] | None, limit: int
    ) -> list[bytes]:
        """A UT row's team threads (up to `limit`), page by page: a row too wide for one read."""
        out: list[bytes] = []
        for prefix, regex in team_selectors(gids):
            cells = read_row_cells(
                self._ut,
                row_key,
                _FAM_T,
                limit=limit - len(out),
                qualifier_prefix=prefix,
                qualifier_regex=regex,
                strip_values=True,
            )
            out.extend([q async for q, _ in cells])
            if len(out) >= limit:
                break
        return out

    async def close(self) -> None:
        await self._handle.close()
