"""Iterator's source port: the relational database it walks, read by keyset only.

A position (`Key`) is a tuple of integers in the read's ORDER BY order, so markers, split
points and ranges are plain values the domain can compare and store. A read returns its
positions packed (`Positions`): a chunk of thousands of rows travels from the database to
the ledger and the stream as one array of integers, never as a Python tuple per row.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Protocol, overload

__all__ = ["IterationSource", "Key", "Positions", "SchemaFacts", "SourceLevel"]


Key = tuple[int, ...]
"""A row's key or position: integers in the source's ORDER BY order."""


class Positions(Sequence[Key]):
    """Positions of equal `width`, in order, packed flat as int64s (``array("q")``).

    A sequence of `Key` tuples to whoever indexes it, but the work a step does per row —
    counting a parent's rows, listing the parents found, storing the chunk — runs over the
    packed array in C. At a million rows a second a tuple per row is most of the cost.
    """

    __slots__ = ("flat", "width")

    def __init__(self, width: int, flat: array[int] | None = None) -> None:
        if width < 1:
            raise ValueError(f"a position has at least one integer, not {width}")
        self.width = width
        self.flat: array[int] = array("q") if flat is None else flat
        if len(self.flat) % width:
            raise ValueError(f"{len(self.flat)} integers are not positions of width {width}")

    @classmethod
    def of(cls, width: int, keys: Iterable[Sequence[int]]) -> Positions:
        """Packs `keys` (each of `width` integers)."""
        return cls(width, array("q", chain.from_iterable(keys)))

    @classmethod
    def from_bytes(cls, width: int, data: bytes) -> Positions:
        """The positions `tobytes` wrote."""
        flat = array("q")
        flat.frombytes(data)
        return cls(width, flat)

    def tobytes(self) -> bytes:
        """Native-endian int64s, `width` per position (the chunk ledger's form)."""
        return self.flat.tobytes()

    def column(self, index: int) -> array[int]:
        """The `index`-th integer of every position."""
        return self.flat[index :: self.width]

    def last_run(self) -> int:
        """How many positions, counted back from the last, share its first integer (the
        rows of the last parent a children read reached): positions are in order, so they
        are the tail from the first that holds it."""
        if not self.flat:
            return 0
        first = self.column(0)
        return len(first) - bisect.bisect_left(first, first[-1])

    def extend(self, other: Positions) -> None:
        """Appends `other`'s positions (of the same width)."""
        if other.width != self.width:
            raise ValueError(f"width {other.width} appended to width {self.width}")
        self.flat.extend(other.flat)

    def __len__(self) -> int:
        return len(self.flat) // self.width

    @overload
    def __getitem__(self, index: int) -> Key: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Key]: ...
    def __getitem__(self, index: int | slice) -> Key | Sequence[Key]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("position index out of range")
        start = index * self.width
        return tuple(self.flat[start : start + self.width])

    def __iter__(self) -> Iterator[Key]:
        flat, width = self.flat, self.width
        for start in range(0, len(flat), width):
            yield tuple(flat[start : start + width])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Positions):
            return self.width == other.width and self.flat == other.flat
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable (extend), like a list

    def __repr__(self) -> str:
        return f"Positions(width={self.width}, {list(self)!r})"


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceLevel:
    """One level of the iterated hierarchy as the source adapter needs it."""

    name: str
    table: str
    id_columns: tuple[str, ...]
    """One column for an integer id; several for a composite key (compared as a row value)."""
    parent_column: str
    """Column holding the parent's integer id; empty for the top level."""
    where: str
    """Extra SQL condition on the table's rows ("valid" rows), or empty."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaFacts:
    """What the live source database says about the configured tables, every name spelled
    as its catalog spells it (the check compares names the way the reads will quote them)."""

    tables: frozenset[str]
    """Every table of the source's default schema."""
    columns: Mapping[str, frozenset[str]]
    """Table -> its columns, for each table whose name equals a configured one in any case."""
    indexes: Mapping[str, tuple[tuple[str, ...], ...]]
    """Table -> the column lists of its indexes and primary key (in order), same tables."""
    tables_fold_case: bool
    """Whether a read naming a table in another case finds it (SQLite; MySQL with
    ``lower_case_table_names`` set). False: only the exact name does (PostgreSQL, where
    the reads quote mixed-case names; MySQL on Linux by default)."""
    columns_fold_case: bool
    """The same for columns (SQLite and MySQL: yes; PostgreSQL: no)."""


class IterationSource(Protocol):
    """The iterated relational database, read by keyset only (never a scan, never OFFSET
    except for split probes).

    Two shapes of read, both ordered and bounded by exclusive positions:

    - **bounded** (`parents` None): rows of a level whose id key lies in [first, last];
      a position is the id key.
    - **children** (`parents` given, sorted): rows of a level whose parent is one of
      `parents`; a position is ``(parent, *id key)``, compared as a row value. A bound may
      also be the parent alone, ``(p,)``, which sorts before every row of p (as Python
      tuples compare): ``after=(p,)`` starts at p's first row, ``upto=(p,)`` ends before it.

    Only rows satisfying the level's `where` count. Faults become `storage.errors`: a
    statement the database refuses as written (an undefined table or column, a syntax
    error) is StorageRejected, anything else StorageUnavailable.
    """

    @property
    def levels(self) -> Sequence[SourceLevel]:
        """The configured levels, top first (reads name a level by its index)."""
        ...

    async def schema(self) -> SchemaFacts:
        """Columns and indexes of the levels' tables, from the live catalog."""
        ...

    async def check_read(self, level: int) -> None:
        """Runs each statement shape of `level`'s reads once, with its `where`, returning no
        rows: StorageRejected (the database's message) when the database refuses it."""
        ...

    async def exists(self, level: int, first: Key, last: Key) -> bool:
        """Whether any row of `level` has an id key in [first, last]."""
        ...

    async def read(
        self,
        level: int,
        *,
        parents: Sequence[int] | None,
        first: Key,
        last: Key,
        after: Key,
        upto: Key,
        limit: int,
    ) -> Positions:
        """Up to `limit` positions > `after` and <= `upto` (empty = unbounded), in order
        (width: the id columns, plus the parent for a children read)."""
        ...

    async def probe(
        self,
        level: int,
        *,
        parents: Sequence[int] | None,
        first: Key,
        last: Key,
        after: Key,
        upto: Key,
        offset: int,
    ) -> Key | None:
        """The position `offset` rows past the first one after `after` within the same
        bounds (the seed's ``LIMIT 1 OFFSET n`` split probe), or None when fewer remain.
        A children probe names one parent."""
        ...

    async def ping(self) -> None:
        """Raises StorageUnavailable unless the database answers."""
        ...

    async def close(self) -> None:
        """Releases connections."""
        ...
