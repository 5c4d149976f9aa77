"""IterationSource on PostgreSQL, read through asyncpg itself rather than SQLAlchemy.

Through SQLAlchemy's async engine every statement took four round trips: the pool's
pre-ping, ``BEGIN``, the read and the ``ROLLBACK`` that returns the connection. A keyset read
needs none of them but the read: asyncpg's pool runs each of a read's statements as one
prepared statement (cached per connection) on one connection, in autocommit. The
statements and the windowing over parents are the SQL source's (the parent list is one
``bigint[]`` parameter, ``= ANY(...)``), as is catalog inspection at start-up.

A connection the server closed (a restart, an outage) is dropped by the pool and opened
again on the next read; while the database is unreachable each read fails at once, as
`StorageUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import Sequence
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from storage.ports import Positions, SourceLevel
from storage.sql.source import (
    LevelStatements,
    Plan,
    Shape,
    SqlIterationSource,
    create_engine_for,
    run_plan,
)

__all__ = ["PostgresIterationSource"]

_POOL = 8
"""Connections at most: the Iterator's workers and the source monitor read concurrently."""
_PARAM = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")
"""A named parameter as SQLAlchemy's ``text()`` finds one (``::`` casts are not)."""


class PostgresIterationSource(SqlIterationSource):
    """`storage.ports.IterationSource` on PostgreSQL: reads through an asyncpg pool."""

    def __init__(self, url: str, levels: Sequence[SourceLevel]) -> None:
        super().__init__(create_engine_for(url), levels)
        self._dsn = make_url(url).set(drivername="postgresql").render_as_string(False)
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()
        self._positional: dict[tuple[int, Shape], tuple[str, tuple[str, ...]]] = {}

    @classmethod
    def open(cls, url: str, levels: Sequence[SourceLevel]) -> PostgresIterationSource:
        """A source on the database of `url` (``postgresql+asyncpg://…``); connections are
        made on first use."""
        return cls(url, levels)

    def _statements(self, level: SourceLevel) -> LevelStatements:
        return LevelStatements(level, self._quote, "= ANY(CAST(:parents AS bigint[]))")

    def _sql(self, level: int, shape: Shape) -> tuple[str, tuple[str, ...]]:
        """The statement with ``$n`` parameters, and the names they stand for, in order."""
        found = self._positional.get((level, shape))
        if found is None:
            names: list[str] = []

            def number(match: re.Match[str]) -> str:
                if match.group(1) not in names:
                    names.append(match.group(1))
                return f"${names.index(match.group(1)) + 1}"

            text = _PARAM.sub(number, self.statements[level].sql(shape))
            found = self._positional[level, shape] = (text, tuple(names))
        return found

    async def _connections(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._opening:
                if self._pool is None:
                    self._pool = await asyncpg.create_pool(
                        self._dsn, min_size=0, max_size=_POOL, timeout=3, command_timeout=60
                    )
        return self._pool

    async def _fetch(
        self, conn: asyncpg.Connection, level: int, shape: Shape, params: dict[str, Any]
    ) -> Positions:
        text, names = self._sql(level, shape)
        return self._pack(level, shape, await conn.fetch(text, *(params[n] for n in names)))

    async def _execute(self, level: int, plan: Plan, rows: Positions) -> Positions:
        with self._errors("read"):
            pool = await self._connections()
            async with pool.acquire() as conn:  # every statement of one read, one connection
                return await run_plan(plan, rows, functools.partial(self._fetch, conn, level))

    async def _run(self, level: int, shape: Shape, params: dict[str, Any]) -> Positions:
        with self._errors("read"):
            pool = await self._connections()
            async with pool.acquire() as conn:
                return await self._fetch(conn, level, shape, params)

    async def ping(self) -> None:
        with self._errors("ping"):
            pool = await self._connections()
            await pool.fetchval("SELECT 1")

    async def close(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), timeout=5)
            self._pool = None
        await super().close()
