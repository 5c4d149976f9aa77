"""How the Bigtable ThreadStore spells its cells: thread qualifiers, message records, filters.

enc(gid, thread_id) = UTF-8(gid) with every NUL byte written as 00 02, then the terminator
00 01, then UTF-8(thread_id). It is unambiguous (an escaped gid never holds 00 01) and
order-preserving, so a UT row's thread qualifiers come back in (gid, thread_id) order, and
one gid's threads are the qualifiers starting with enc(gid) + 00 01: a small team reads one
column range per gid, a large one a server-side qualifier regex (the seed's "filter the
cells in the row").

Message records: a UT's messages are stored as packed records (16-byte MD5 key + 8-byte
big-endian sent_at) in a few cells, each qualified by the MD5 of its own value, rather
than one cell per message. The emulator's cost (and the Python client's) is per cell
scanned, so a 2,000-message unified thread reads ~10 cells instead of 2,000. A record may
appear in two cells (a writer that crashed after writing it, then a retry that grouped
differently); readers count distinct keys, so duplicates never count twice.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator

from google.cloud.bigtable.data import row_filters as rf

from storage.bigtable.client import escape_family, regex_literal
from storage.errors import StorageCorrupt
from storage.ports import ThreadKey

__all__ = [
    "RECORDS_PER_CELL",
    "decode_thread",
    "encode_thread",
    "pack_records",
    "team_filter",
    "team_selectors",
    "unpack_records",
]

RECORDS_PER_CELL = 256
"""Records per message cell (6 KB): a cell stays small whatever one call adds."""
_RANGE_TEAM = 32  # teams up to this many gids read one column range per gid
_REGEX_BUDGET = 8_000  # bytes of one team-filter regex; larger teams are split into groups
_SEP = b"\x00\x01"
_RECORD = struct.Struct(">16sq")

Selector = tuple[bytes | None, bytes | None]
"""(qualifier prefix, qualifier regex) of one paged read of a UT's threads."""


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


def pack_records(records: Iterable[tuple[bytes, int]]) -> Iterator[tuple[bytes, bytes]]:
    """(qualifier, value) cells holding `records` ((MD5 key, sent_at)), content-addressed.

    Sorted first, so a retry that writes the same records writes the same cells.
    """
    ordered = sorted(set(records))
    for start in range(0, len(ordered), RECORDS_PER_CELL):
        value = b"".join(_RECORD.pack(k, s) for k, s in ordered[start : start + RECORDS_PER_CELL])
        yield hashlib.md5(value, usedforsecurity=False).digest(), value


def unpack_records(value: bytes, into: dict[bytes, int]) -> None:
    """Adds the records of one cell to `into` (key -> sent_at)."""
    if len(value) % _RECORD.size:
        raise StorageCorrupt(f"message cell of {len(value)} bytes is not whole records")
    for key, sent in _RECORD.iter_unpack(value):
        into[key] = sent


def team_selectors(gids: frozenset[str] | None) -> list[Selector]:
    """How to page through the team's threads of a UT row: (qualifier prefix, regex).

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


def team_filter(family: str, gids: frozenset[str] | None) -> rf.RowFilter:
    """One filter selecting the team's thread cells of `family` (values stripped)."""
    chain: list[rf.RowFilter] = [rf.FamilyNameRegexFilter(escape_family(family))]
    selectors = team_selectors(gids)
    if selectors != [(None, None)]:
        branches: list[rf.RowFilter] = []
        for prefix, regex in selectors:
            if prefix is not None:
                branches.append(
                    rf.ColumnRangeFilter(
                        family,
                        start_qualifier=prefix,
                        end_qualifier=_prefix_end(prefix),
                        inclusive_start=True,
                        inclusive_end=False,
                    )
                )
            else:
                assert regex is not None
                branches.append(rf.ColumnQualifierRegexFilter(regex))
        chain.append(branches[0] if len(branches) == 1 else rf.RowFilterUnion(branches))
    chain.append(rf.StripValueTransformerFilter(True))
    return rf.RowFilterChain(chain)


def _prefix_end(prefix: bytes) -> bytes:
    """The smallest qualifier above every qualifier starting with `prefix`.

    A thread prefix always ends with the 00 01 separator, so it never is all FF bytes.
    """
    return prefix[:-1] + bytes((prefix[-1] + 1,))
