"""IterationSource on any SQL database SQLAlchemy's async Core reaches: SQLite (aiosqlite),
PostgreSQL (asyncpg), MariaDB/MySQL (aiomysql).

Every read is a keyset range over the ORDER BY columns — ``(parent, id...)`` for children,
the id columns for a bounded read — compared as a row value ``(a, b) > (?, ?)``, never as
an OR-chain, so the engine seeks its ``(parent, id)`` index instead of scanning. A read for
many small parents is one statement (``parent IN (...)``): Box's users have a handful of files
each, and one round trip per user would cap the pipeline at the round-trip rate.

Statements are built once per (level, shape) from identifiers quoted by the dialect; the
configured ``where`` is the operator's SQL, used verbatim. Every call to the database runs
inside the one translator of its dialect (`storage.sql.errors.source_errors`): a statement
the database refuses as written is `StorageRejected`, anything else `StorageUnavailable`.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from typing import Any

from sqlalchemy import bindparam, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql.elements import TextClause

from storage.errors import StorageRejected
from storage.ports import Key, Positions, SchemaFacts, SourceLevel
from storage.sql.errors import source_errors
from storage.sql.schema import DEFAULT_SCHEMA

__all__ = [
    "LevelStatements",
    "Plan",
    "Read",
    "Shape",
    "SqlIterationSource",
    "create_engine_for",
    "next_read",
    "not_integers",
    "plan_reads",
    "run_plan",
]


def create_engine_for(url: str) -> AsyncEngine:
    """An async engine with short connect timeouts (a dead source must fail fast)."""
    connect_args: dict[str, Any] = {}
    if url.startswith("postgresql"):
        connect_args = {"timeout": 3, "command_timeout": 60}
    elif url.startswith("mysql"):
        connect_args = {"connect_timeout": 3}
    elif url.startswith("sqlite"):
        connect_args = {"timeout": 5}
    return (
        create_async_engine(
            url, connect_args=connect_args, pool_pre_ping=True, pool_size=8, max_overflow=8
        )
        if not url.startswith("sqlite")
        else create_async_engine(url, connect_args=connect_args)
    )


Shape = tuple[str, bool, bool, bool]
"""A statement's shape: (kind, after?, upto?, probe?). kind: "bounded" (an id range),
"one" (a single parent) or "many" (a parent list)."""


class LevelStatements:
    """The SQL of one level's reads, one text per shape, with named parameters.

    A children read is cut in up to three statements so each is a plain index seek: the
    parent the marker is in (``parent = ? AND id > ?``), the parents wholly inside the range
    (``parent IN (...)``), and the parent the end bound is in (``parent = ? AND id <= ?``).
    Engines do not seek on a row value that spans an ``IN`` list (SQLite filters it, turning
    a deep marker in a large parent into a rescan from the parent's first row).

    `in_list` is how the parent list is written, after ``parent``: SQLAlchemy expands
    ``IN :parents`` itself; a driver without expanding parameters passes one value.
    """

    def __init__(self, level: SourceLevel, quote: Any, in_list: str = "IN :parents") -> None:
        self.level = level
        self.ids = [quote(c) for c in level.id_columns]
        self.parent = quote(level.parent_column) if level.parent_column else ""
        self.table = quote(level.table)
        self._in_list = in_list

    def width(self, shape: Shape) -> int:
        """Integers per position the shape returns (the parent's id first, for children)."""
        return len(self.order(shape))

    def empty(self, *, children: bool) -> Positions:
        """No positions yet, of the width a bounded or a children read returns."""
        return Positions(self.width(("one" if children else "bounded", *_PLAIN)))

    def order(self, shape: Shape) -> list[str]:
        """The columns each row returns, in ORDER BY order."""
        return self.ids if shape[0] == "bounded" else [self.parent, *self.ids]

    @staticmethod
    def _cmp(cols: Sequence[str], op: str, prefix: str) -> str:
        params = [f":{prefix}{i}" for i in range(len(cols))]
        if len(cols) == 1:
            return f"{cols[0]} {op} {params[0]}"
        return f"({', '.join(cols)}) {op} ({', '.join(params)})"

    def sql(self, shape: Shape) -> str:
        """The statement of `shape`."""
        kind, after, upto, probe = shape
        conds = []
        if kind == "bounded":
            conds.append(self._cmp(self.ids, ">=", "f"))
            conds.append(self._cmp(self.ids, "<=", "l"))
        elif kind == "one":
            conds.append(f"{self.parent} = :parent")
        else:
            conds.append(f"{self.parent} {self._in_list}")
        if after:
            conds.append(self._cmp(self.ids, ">", "a"))
        if upto:
            conds.append(self._cmp(self.ids, "<=", "b"))
        if self.level.where:
            conds.append(f"({self.level.where})")
        order = ", ".join(self.order(shape))
        sql = (
            f"SELECT {order} FROM {self.table} WHERE {' AND '.join(conds)} "
            f"ORDER BY {order} LIMIT :limit"
        )
        if probe:
            sql += " OFFSET :offset"
        return sql


def not_integers(level: SourceLevel) -> StorageRejected:
    """A key column holding NULL or a value that is not an integer: refused for good (the
    Iterator walks integer keys; the same rows would fail the same way every time)."""
    return StorageRejected(
        f"source read: a key column of level {level.name!r} holds NULL or a value that is not "
        "an integer (the Iterator walks integer keys)"
    )


def _bind(prefix: str, key: Key) -> dict[str, int]:
    return {f"{prefix}{i}": v for i, v in enumerate(key)}


_PLAIN = (False, False, False)

Read = tuple[Shape, dict[str, Any]]
"""One statement of a read: its shape and parameters."""
Plan = Generator[Read, int, None]
"""The statements of one read (`plan_reads`): send back how many rows each returned."""


def plan_reads(  # noqa: PLR0917 - the port's read() arguments, passed through
    statements: LevelStatements,
    parents: Sequence[int] | None,
    first: Key,
    last: Key,
    after: Key,
    upto: Key,
    limit: int,
    offset: int | None,
) -> Plan:
    """The statements of one read, in order (pure): send back how many rows each returned.

    A bounded read is one statement. A children read seeks the parent holding the marker
    alone, then the parents wholly inside the range in one list, then the parent holding
    the end bound alone, until `limit` rows are read.
    """
    if parents is None:
        params: dict[str, Any] = {"limit": limit, **_bind("f", first), **_bind("l", last)}
        params.update(_bind("a", after))
        params.update(_bind("b", upto))
        if offset is not None:
            params["offset"] = offset
        yield ("bounded", bool(after), bool(upto), offset is not None), params
        return
    # Parents before the marker or past the end bound need no seek at all. A bound of the
    # parent alone, (p,), sorts before every row of p: after=(p,) starts at p's first row,
    # upto=(p,) ends before it.
    lo = bisect.bisect_left(parents, after[0]) if after else 0
    if not upto:
        hi = len(parents)
    elif len(upto) == 1:
        hi = bisect.bisect_left(parents, upto[0])
    else:
        hi = bisect.bisect_right(parents, upto[0])
    window = list(parents[lo:hi])
    if offset is not None and len(window) > 1:
        raise ValueError("a split probe reads one parent")
    got = 0
    while window and got < limit:
        parent = window[0]
        head_after = after[1:] if after and after[0] == parent else ()
        tail_upto = upto[1:] if len(upto) > 1 and upto[0] == parent else ()
        if head_after or tail_upto or len(window) == 1:
            params = {"limit": limit - got, "parent": parent}
            params.update(_bind("a", head_after))
            params.update(_bind("b", tail_upto))
            if offset is not None:
                params["offset"] = offset
            shape: Shape = ("one", bool(head_after), bool(tail_upto), offset is not None)
            window = window[1:]
        else:
            end = len(window) - 1 if upto and window[-1] == upto[0] else len(window)
            params = {"limit": limit - got, "parents": window[:end]}
            shape = ("many", *_PLAIN)
            window = window[end:]
        got += yield shape, params


def next_read(plan: Plan, got: int) -> Read | None:
    """The plan's next statement, told how many rows the last one returned."""
    try:
        return plan.send(got)
    except StopIteration:
        return None


async def run_plan(
    plan: Plan, rows: Positions, run: Callable[[Shape, dict[str, Any]], Awaitable[Positions]]
) -> Positions:
    """Runs each statement of `plan` with `run`, appending its rows to `rows`."""
    read = next(plan, None)
    while read is not None:
        got = await run(*read)
        rows.extend(got)
        read = next_read(plan, len(got))
    return rows


class SqlIterationSource:
    """`storage.ports.IterationSource` over one SQLAlchemy async engine."""

    def __init__(self, engine: AsyncEngine, levels: Sequence[SourceLevel]) -> None:
        self._engine = engine
        self._errors = source_errors(self.dialect)
        self.levels = tuple(levels)
        self._quote = engine.dialect.identifier_preparer.quote
        self.statements = [self._statements(level) for level in self.levels]
        self._texts: dict[tuple[int, Shape], TextClause] = {}

    def _statements(self, level: SourceLevel) -> LevelStatements:
        """How this source writes `level`'s reads (SQLAlchemy expands ``IN :parents``)."""
        return LevelStatements(level, self._quote)

    @classmethod
    def open(cls, url: str, levels: Sequence[SourceLevel]) -> SqlIterationSource:
        """A source on `url` (connections are made on first use)."""
        return cls(create_engine_for(url), levels)

    @property
    def dialect(self) -> str:
        """sqlite, postgresql or mysql."""
        return str(self._engine.dialect.name)

    async def create_default_schema(self) -> None:
        """Creates the default hierarchy's tables and indexes when missing."""
        with self._errors("create schema"):
            async with self._engine.begin() as conn:
                for statement in DEFAULT_SCHEMA:
                    await conn.execute(text(statement))

    async def schema(self) -> SchemaFacts:
        wanted = {level.table.lower() for level in self.levels}
        dialect = self.dialect

        def inspect_all(conn: Connection) -> SchemaFacts:
            insp = inspect(conn)
            tables = frozenset(str(t) for t in insp.get_table_names())
            columns: dict[str, frozenset[str]] = {}
            indexes: dict[str, tuple[tuple[str, ...], ...]] = {}
            for table in tables:
                if table.lower() not in wanted:
                    continue
                columns[table] = frozenset(str(c["name"]) for c in insp.get_columns(table))
                found = [
                    tuple(str(c) for c in ix["column_names"] if c) for ix in insp.get_indexes(table)
                ]
                pk = insp.get_pk_constraint(table).get("constrained_columns") or []
                if pk:
                    found.append(tuple(str(c) for c in pk))
                indexes[table] = tuple(found)
            # How the engine resolves the names the reads send (quoted by the dialect):
            # PostgreSQL matches a quoted name exactly; MySQL matches columns in any case and
            # tables so only with lower_case_table_names set; SQLite ignores case.
            fold_tables = dialect != "postgresql"
            if dialect == "mysql":
                casing = conn.execute(text("SELECT @@lower_case_table_names")).scalar()
                fold_tables = int(casing or 0) != 0
            return SchemaFacts(
                tables=tables,
                columns=columns,
                indexes=indexes,
                tables_fold_case=fold_tables,
                columns_fold_case=dialect != "postgresql",
            )

        with self._errors("schema"):
            async with self._engine.connect() as conn:
                return await conn.run_sync(inspect_all)

    async def check_read(self, level: int) -> None:
        # Every shape of statement the level's reads use (a bounded id range; for a child
        # level one parent and a parent list too), bounds on both sides, LIMIT 0: the
        # database parses and plans each with the level's `where` and returns nothing.
        statements = self.statements[level]
        zero = (0,) * len(statements.ids)
        bounds = {**_bind("a", zero), **_bind("b", zero)}
        await self._run(
            level,
            ("bounded", True, True, False),
            {"limit": 0, **_bind("f", zero), **_bind("l", zero), **bounds},
        )
        if statements.parent:
            await self._run(level, ("one", True, True, False), {"limit": 0, "parent": 0, **bounds})
            await self._run(level, ("many", False, False, False), {"limit": 0, "parents": [0]})

    async def exists(self, level: int, first: Key, last: Key) -> bool:
        rows = await self.read(
            level, parents=None, first=first, last=last, after=(), upto=(), limit=1
        )
        return bool(rows)

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
        return await self._select(level, parents, first, last, after, upto, limit, None)

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
        rows = await self._select(level, parents, first, last, after, upto, 1, offset)
        return rows[0] if len(rows) else None

    async def _select(  # noqa: PLR0917 - the port's read() arguments, passed through
        self,
        level: int,
        parents: Sequence[int] | None,
        first: Key,
        last: Key,
        after: Key,
        upto: Key,
        limit: int,
        offset: int | None,
    ) -> Positions:
        statements = self.statements[level]
        rows = statements.empty(children=parents is not None)
        plan = plan_reads(statements, parents, first, last, after, upto, limit, offset)
        with contextlib.closing(plan):
            return await self._execute(level, plan, rows)

    async def _execute(self, level: int, plan: Plan, rows: Positions) -> Positions:
        """Runs every statement of a read's `plan`, appending their rows to `rows`: here
        one `_run` each; an engine with a cheaper way to run several overrides it."""
        return await run_plan(plan, rows, functools.partial(self._run, level))

    async def _run(self, level: int, shape: Shape, params: dict[str, Any]) -> Positions:
        """One statement of `level` in `shape`: its rows, packed."""
        stmt = self._texts.get((level, shape))
        if stmt is None:
            stmt = text(self.statements[level].sql(shape))
            if shape[0] == "many":
                stmt = stmt.bindparams(bindparam("parents", expanding=True))
            self._texts[level, shape] = stmt
        with self._errors("read"):
            async with self._engine.connect() as conn:
                rows = (await conn.execute(stmt, params)).all()
        return self._pack(level, shape, rows)

    def _pack(self, level: int, shape: Shape, rows: Iterable[Sequence[int]]) -> Positions:
        """A driver's rows of `level` in `shape`, packed; a key that is not an integer is
        refused for good."""
        try:
            return Positions.of(self.statements[level].width(shape), rows)
        except (TypeError, OverflowError, ValueError):
            raise not_integers(self.levels[level]) from None

    async def ping(self) -> None:
        with self._errors("ping"):
            async with self._engine.connect() as conn:
                await conn.execute(text("SELECT 1"))

    async def close(self) -> None:
        await self._engine.dispose()
