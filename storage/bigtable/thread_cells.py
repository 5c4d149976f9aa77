"""How the Bigtable ThreadStore spells its cells: thread keys and packed sets.

enc(gid, thread_id) = UTF-8(gid) with every NUL byte written as 00 02, then the terminator
00 01, then UTF-8(thread_id): unambiguous (an escaped gid never holds 00 01), so a thread
is one row key or one packed entry.

Packed sets: what a read needs of a UT in full (its member threads, its message records:
16-byte MD5 key + 8-byte big-endian sent_at) is also kept packed, many entries per cell,
each cell qualified by the MD5 of its own value. The emulator's cost and the Python
client's are per cell, so a 2,000-message, 400-thread unified thread reads ~20 cells
instead of 2,400. An entry may sit in two cells (a writer that crashed after writing it,
then a retry that grouped differently); readers take the union, so nothing counts twice.
Many small cells (messages woven one call at a time) are re-packed by the reader that finds
them (`needs_repack`): one atomic row mutation sets the full cells and deletes the cells it
read, so every entry stays in some cell whatever runs concurrently.

Reading cells back (a row's cells, a message row, a UT's bytes, the filters that read only
what is needed) is here too, because serving and the scans (`threads_scan.py`) both do it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from typing import Any

from google.cloud.bigtable.data import row_filters as rf

from storage.errors import StorageCorrupt
from storage.ports import ThreadKey

__all__ = [
    "CELL_BYTES",
    "LATEST",
    "LINKS",
    "LONGEST_UT",
    "RECORD_WIDTH",
    "WIDEST_CELL",
    "StoredMessage",
    "cells_per_response",
    "decode_thread",
    "encode_thread",
    "latest",
    "links_only",
    "message_row",
    "needs_repack",
    "pack",
    "record",
    "row_cells",
    "text",
    "unpack",
]

CELL_BYTES = 4_096
"""Target size of a packed cell; one entry more may overshoot it by at most ~1.5 KB."""
LONGEST_UT = 3_073
"""Longest UT id the domain makes (two 512-byte ids with every byte percent-encoded, as
`server.threadweaver.model.MAX_UT_BYTES`): a row key, and a link's qualifier."""
WIDEST_CELL = max(16 + CELL_BYTES + 2 + 1_538, LONGEST_UT)
"""Qualifier + value of any cell of a UT row: a packed cell (an MD5 qualifier; a value under
`CELL_BYTES` before its last length-prefixed entry, at most a thread of two 512-byte ids
with NULs escaped) or a link (a UT id qualifier, no value)."""
_SEP = b"\x00\x01"
_RECORD = struct.Struct(">16sq")
_SENT = struct.Struct(">q")
RECORD_WIDTH = _RECORD.size
_LENGTH = struct.Struct(">H")


_ROW_BYTES = 3_000_000
"""One row's cells in one response: under the emulator channel's 4 MiB receive limit."""


def cells_per_response(keys: Iterable[bytes], widest: int) -> int:
    """How many cells of up to `widest` bytes one row of `keys` may return in one response.

    The emulator repeats the row key in every cell, so with a ~3 KB UT id as the key and as
    each link's qualifier ~480 links fit; with ordinary ids ~940.
    """
    return max(1, _ROW_BYTES // (max(map(len, keys), default=0) + widest + 64))


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


def record(key: bytes, sent_at_ms: int) -> bytes:
    """A message record entry: the MD5 key, then when the message was sent (>= 0).

    Big-endian, so the largest entry's last 8 bytes are the latest send time.
    """
    return _RECORD.pack(key, sent_at_ms)


def latest(records: Iterable[bytes]) -> int | None:
    """The latest sent_at among message record entries (None when there are none)."""
    last = max((r[16:] for r in records), default=None)
    return None if last is None else int(_SENT.unpack(last)[0])


def pack(entries: Iterable[bytes], width: int | None = None) -> Iterator[tuple[bytes, bytes]]:
    """(qualifier, value) cells holding `entries`, content-addressed.

    Entries of a fixed `width` are concatenated; others are each length-prefixed. Sorted
    first, so a retry that writes the same entries writes the same cells.
    """
    cell = bytearray()
    for entry in sorted(set(entries)):
        if width is None:
            cell += _LENGTH.pack(len(entry))
        elif len(entry) != width:
            raise ValueError(f"entry of {len(entry)} bytes in a set of width {width}")
        cell += entry
        if len(cell) >= CELL_BYTES:
            yield _cell(cell)
            cell = bytearray()
    if cell:
        yield _cell(cell)


def _cell(value: bytearray) -> tuple[bytes, bytes]:
    data = bytes(value)
    return hashlib.md5(data, usedforsecurity=False).digest(), data


def unpack(value: bytes, into: set[bytes], width: int | None = None) -> None:
    """Adds the entries of one packed cell (see `pack`) to `into`."""
    end = len(value)
    if width is not None:
        if end % width:
            raise StorageCorrupt(f"packed cell of {end} bytes is not whole {width}-byte entries")
        into.update(value[at : at + width] for at in range(0, end, width))
        return
    at = 0
    while at < end:
        if at + _LENGTH.size > end:
            raise StorageCorrupt("packed cell ends inside a length")
        (size,) = _LENGTH.unpack_from(value, at)
        at += _LENGTH.size
        if at + size > end:
            raise StorageCorrupt("packed cell ends inside an entry")
        into.add(value[at : at + size])
        at += size


def needs_repack(cells: int, cell_bytes: int) -> bool:
    """True when a row holds far more packed cells than their bytes need (many small ones)."""
    return cells > cell_bytes // CELL_BYTES + 8


LINKS = "n"
"""The UT table's family of links: linked UT -> b""."""
LATEST = rf.CellsColumnLimitFilter(1)  # single-family tables: no (per-cell regex) family filter
StoredMessage = tuple[str, int, bool]  # a message row: (UT, sent_at, recorded in its UT)


def links_only(limit: int) -> rf.RowFilter:
    """Links only, without a regex: the emulator would compile a family regex for every cell."""
    return rf.RowFilterChain(
        [
            rf.ColumnRangeFilter(LINKS),
            rf.StripValueTransformerFilter(True),
            rf.CellsRowLimitFilter(limit),
        ]
    )


def text(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise StorageCorrupt(f"bad UT bytes {data!r}") from exc


def row_cells(row: Any) -> dict[bytes, bytes]:
    return {} if row is None else {c.qualifier: c.value for c in row.cells}


def message_row(row: Any) -> StoredMessage | None:
    stored = row_cells(row)
    if b"u" not in stored or len(stored.get(b"s", b"")) != _SENT.size:
        return None
    return text(stored[b"u"]), _SENT.unpack(stored[b"s"])[0], b"r" in stored
