"""Iterator's source port: the relational database it walks, read by keyset only.

A position (`Key`) is a tuple of integers in the read's ORDER BY order, so markers, split
points and ranges are plain values the domain can compare and store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["IterationSource", "Key", "SchemaFacts", "SourceLevel"]


Key = tuple[int, ...]
"""A row's key or position: integers in the source's ORDER BY order."""


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
    ) -> list[Key]:
        """Up to `limit` positions > `after` and <= `upto` (empty = unbounded), in order."""
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
