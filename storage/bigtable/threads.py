"""ThreadStore on Cloud Bigtable: the seed's design, one conditional mutation per key.

Tables (ids are `table_prefix` + name); every family keeps one version (MaxVersionsGCRule(1)),
nothing expires because mappings are permanent:

    thread_ut   row enc(gid, thread_id)  family u: u = UT                 thread -> UT
    message_ut  row MD5 of Message-ID    family m: u = UT, s = sent_at    Message-ID -> UT
    ut          row UT (UTF-8)           family t: enc(gid, thread_id) -> b""   UT -> threads
                                         family m: MD5 -> sent_at               UT -> messages
                                         family n: neighbour UT -> b""          UT -> merges

enc(gid, thread_id) = UTF-8(gid) with every NUL byte written as 00 02, then the terminator
00 01, then UTF-8(thread_id). It is unambiguous (an escaped gid never holds 00 01) and
order-preserving, so a UT row's `t` qualifiers come back in (gid, thread_id) order, and one
gid's threads are the qualifiers starting with enc(gid) + 00 01: a small team reads one
column range per gid, a large one a server-side qualifier regex (the seed's "filter the
cells in the row").

Insert-if-absent is the seed's check-and-mutate: predicate "family holds any cell", SetCell
in the false branch. A put first reads every key in bulk (re-seen keys, the common case, cost
no conditional write); only missing keys get check-and-mutate, and since the async client
tells whether the predicate matched, the winner is read back only when a racer was first. Reverse cells are written after every put for
the *winner* (fixed timestamp 0, same value every time), so they are idempotent and a crash
between the forward and the reverse write heals on the caller's retry. sent_at is a signed
64-bit big-endian integer. Forward cells carry whole-millisecond timestamps.
"""

from __future__ import annotations

import heapq
import struct
import time
from collections.abc import Iterable, Sequence
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
    regex_literal,
    translate_errors,
)
from storage.errors import StorageCorrupt
from storage.ports import MessageMapping, ThreadKey, UnifiedStats
from storage.settings import BigtableSettings

__all__ = ["BigtableThreadStore", "decode_thread", "encode_thread"]


_THREAD_UT, _MESSAGE_UT, _UT = "thread_ut", "message_ut", "ut"
_FAM_U, _FAM_M, _FAM_T, _FAM_N = "u", "m", "t", "n"
_ONE = gc_rule(max_versions=1)
_TABLES = {
    _THREAD_UT: {_FAM_U: _ONE},
    _MESSAGE_UT: {_FAM_M: _ONE},
    _UT: {_FAM_T: _ONE, _FAM_M: _ONE, _FAM_N: _ONE},
}
_READ_KEYS = 500  # row keys per ReadRows request
_REGEX_BUDGET = 8_000  # bytes of one team-filter regex; larger teams are split into groups
_RANGE_TEAM = 32  # teams up to this many gids read one column range per gid
_Selector = tuple[bytes | None, bytes | None]
_SEP = b"\x00\x01"
_SENT = struct.Struct(">q")


def encode_thread(key: ThreadKey) -> bytes:
    """enc(gid, thread_id): see the module docstring."""
    return key.gid.encode().replace(b"\x00", b"\x00\x02") + _SEP + key.thread_id.encode()


def decode_thread(data: bytes) -> ThreadKey:
    """Inverse of `encode_thread`; a malformed qualifier is StorageCorrupt."""
    try:
        cut = data.index(_SEP)
        gid = data[:cut].replace(b"\x00\x02", b"\x00").decode()
        return ThreadKey(gid, data[cut + len(_SEP) :].decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise StorageCorrupt(f"bad thread qualifier {data!r}") from exc


def _text(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise StorageCorrupt(f"bad UT bytes {data!r}") from exc


def _now_micros() -> int:
    return time.time_ns() // 1_000_000 * 1000  # Bigtable wants whole milliseconds


def _cells(row: Any, family: str) -> dict[bytes, bytes]:
    return {} if row is None else {c.qualifier: c.value for c in row.cells if c.family == family}


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
        return cls(await BigtableHandle.open(settings, _TABLES))

    async def _read_rows(self, table: Any, keys: Sequence[bytes], family: str) -> dict[bytes, Any]:
        """Rows by key (latest cell of `family` only), in requests of `_READ_KEYS` keys."""
        row_filter = rf.RowFilterChain(
            [rf.FamilyNameRegexFilter(escape_family(family)), rf.CellsColumnLimitFilter(1)]
        )

        async def read(chunk: Sequence[bytes]) -> list[Any]:
            with translate_errors("read rows"):
                query = ReadRowsQuery(row_keys=list(chunk), row_filter=row_filter)
                return list(await table.read_rows(query))

        found: dict[bytes, Any] = {}
        for rows in await bounded_gather(read, list(chunks(keys, _READ_KEYS))):
            found.update((row.row_key, row) for row in rows)
        return found

    async def _write_reverse(self, cells: Iterable[tuple[str, str, bytes, bytes]]) -> None:
        """Idempotent reverse cells (ut, family, qualifier, value) at timestamp 0, in bulk."""
        await bulk_set_cells(
            self._ut, ((ut.encode(), f, q, v) for ut, f, q, v in cells), timestamp_micros=0
        )

    async def get_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        keys = {encode_thread(t): t for t in dict.fromkeys(threads)}
        rows = await self._read_rows(self._thread_ut, list(keys), _FAM_U)
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
        await self._write_reverse((ut, _FAM_T, encode_thread(k), b"") for k, ut in winners.items())
        return [winners[key] for key, _ in items]

    async def put_message_uts_if_absent(self, items: Sequence[MessageMapping]) -> list[str]:
        proposals: dict[bytes, MessageMapping] = {}
        for mapping in items:
            proposals.setdefault(mapping.rfc_key, mapping)
        predicate = family_has_cells(_FAM_M)

        async def put(mapping: MessageMapping) -> tuple[str, int]:
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
                    return mapping.ut, mapping.sent_at_ms
                row = await self._message_ut.read_row(
                    mapping.rfc_key, row_filter=rf.CellsColumnLimitFilter(1)
                )
            stored = _cells(row, _FAM_M)
            if b"u" not in stored or len(stored.get(b"s", b"")) != _SENT.size:
                raise StorageCorrupt(f"message row {mapping.rfc_key.hex()} is incomplete")
            return _text(stored[b"u"]), _SENT.unpack(stored[b"s"])[0]

        winners: dict[bytes, tuple[str, int]] = {}
        for rfc, row in (await self._read_rows(self._message_ut, list(proposals), _FAM_M)).items():
            stored = _cells(row, _FAM_M)
            if b"u" in stored and len(stored.get(b"s", b"")) == _SENT.size:
                winners[rfc] = _text(stored[b"u"]), _SENT.unpack(stored[b"s"])[0]
        missing = [m for rfc, m in proposals.items() if rfc not in winners]
        winners.update(
            zip((m.rfc_key for m in missing), await bounded_gather(put, missing), strict=True)
        )
        await self._write_reverse(
            (ut, _FAM_M, rfc, _SENT.pack(sent)) for rfc, (ut, sent) in winners.items()
        )
        return [winners[m.rfc_key][0] for m in items]

    async def add_merges(self, pairs: Sequence[tuple[str, str]]) -> None:
        await self._write_reverse(
            (a, _FAM_N, b.encode(), b"") for x, y in pairs if x != y for a, b in ((x, y), (y, x))
        )

    async def get_merge_neighbours(self, uts: Sequence[str]) -> dict[str, set[str]]:
        wanted = list(dict.fromkeys(uts))

        async def neighbours(ut: str) -> set[str]:
            cells = read_row_cells(self._ut, ut.encode(), _FAM_N, strip_values=True)
            return {_text(q) async for q, _ in cells}

        found = dict(zip(wanted, await bounded_gather(neighbours, wanted), strict=True))
        return {ut: found[ut] for ut in wanted if found[ut]}

    async def get_threads_of(
        self, uts: Sequence[str], gids: frozenset[str] | None, limit: int
    ) -> list[ThreadKey]:
        wanted = list(dict.fromkeys(uts))
        if not wanted or limit <= 0 or (gids is not None and not gids):
            return []
        selectors = _team_selectors(gids)

        async def stream(job: tuple[str, _Selector]) -> list[ThreadKey]:
            ut, (prefix, regex) = job
            cells = read_row_cells(
                self._ut,
                ut.encode(),
                _FAM_T,
                limit=limit,
                qualifier_prefix=prefix,
                qualifier_regex=regex,
                strip_values=True,
            )
            return [decode_thread(q) async for q, _ in cells]

        streams = await bounded_gather(stream, [(ut, s) for ut in wanted for s in selectors])
        result: list[ThreadKey] = []
        for key in heapq.merge(*streams):
            if not result or result[-1] != key:
                result.append(key)
                if len(result) == limit:
                    break
        return result

    async def get_stats(self, uts: Sequence[str]) -> UnifiedStats:
        wanted = list(dict.fromkeys(uts))

        async def messages(ut: str) -> dict[bytes, bytes]:
            return {q: v async for q, v in read_row_cells(self._ut, ut.encode(), _FAM_M)}

        seen: dict[bytes, int] = {}
        for cells in await bounded_gather(messages, wanted):
            for rfc, value in cells.items():
                if len(value) != _SENT.size:
                    raise StorageCorrupt(f"bad sent_at for {rfc.hex()}")
                seen[rfc] = _SENT.unpack(value)[0]
        return UnifiedStats(len(seen), max(seen.values()) if seen else None)

    async def close(self) -> None:
        await self._handle.close()


def _team_selectors(gids: frozenset[str] | None) -> list[_Selector]:
    """How to read the team's threads from a UT row: (qualifier prefix, qualifier regex).

    A small team reads one column range per gid (the server seeks; cost ~ cells returned);
    a large team uses full-match regexes over the row, split to stay under `_REGEX_BUDGET`.
    """
    if gids is None:
        return [(None, None)]
    prefixes = [encode_thread(ThreadKey(gid, "")) for gid in sorted(gids)]
    if len(prefixes) <= _RANGE_TEAM:
        return [(prefix, None) for prefix in prefixes]
    groups: list[list[bytes]] = [[]]
    size = 0
    for prefix in prefixes:
        literal = regex_literal(prefix)
        if groups[-1] and size + len(literal) > _REGEX_BUDGET:
            groups.append([])
            size = 0
        groups[-1].append(literal)
        size += len(literal) + 1
    return [(None, b"(?s)(?:" + b"|".join(group) + b").*") for group in groups]
