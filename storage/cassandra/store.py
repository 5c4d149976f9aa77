"""What every Cassandra store shares: opening on a session, prepared CQL, paged reads.

Each store (the ThreadStore, the InboxStore) either opens a session of its own, closed with
it, or runs on one shared with the others (`on_session`); it writes its CQL with ``{ks}``
for the keyspace and prepares it once per session; a whole-table scan reads one page per
request. Written once here, so the stores hold only their own schema and statements, and a
change to how a store opens or pages is one change. Row decoding that every store needs
(`text`, `integer`) sits here too: a value of the wrong type is `StorageCorrupt`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Self

from cassandra.query import PreparedStatement

from storage.cassandra.session import CassandraSession, Row
from storage.errors import StorageCorrupt
from storage.settings import CassandraSettings

__all__ = ["CassandraStore", "integer", "text"]


class CassandraStore:
    """A store on one Cassandra keyspace: its session, whether it owns it, its statements.

    A subclass defines `on_session` (create or check its schema, then build the store).
    """

    def __init__(self, session: CassandraSession, *, owns_session: bool) -> None:
        self._s = session
        self._owns = owns_session
        self._ks = session.keyspace

    @classmethod
    async def open(cls, settings: CassandraSettings) -> Self:
        """Connects its own session (closed with the store), creating the schema if asked."""
        session = await CassandraSession.open(settings)
        try:
            return await cls.on_session(session, owns_session=True)
        except BaseException:
            await session.close()
            raise

    @classmethod
    async def on_session(cls, session: CassandraSession, *, owns_session: bool = False) -> Self:
        """A store on a session shared with other Cassandra stores (which it won't close)."""
        raise NotImplementedError

    async def _stmt(self, cql: str) -> PreparedStatement:
        return await self._s.prepare(cql.replace("{ks}", self._ks))

    async def _q(self, cql: str, params: Sequence[object], *, all_pages: bool = False) -> list[Row]:
        return await self._s.run(await self._stmt(cql), params, all_pages=all_pages)

    async def _pages(self, cql: str, page: int) -> AsyncIterator[list[Row]]:
        """Every row `cql` selects, in non-empty pages of at most `page`, one request each:
        the driver's paging state carries the position from one request to the next, so
        memory holds one page and no coordinator holds anything between pages. Rows come in
        token order, which is no snapshot: a row written meanwhile may or may not appear."""
        if page < 1:
            raise ValueError(f"scan page must be at least 1, not {page}")
        stmt = await self._stmt(cql)
        state: bytes | None = None
        while True:
            rows, state = await self._s.run_page(stmt, (), fetch_size=page, paging_state=state)
            if rows:
                yield rows
            if state is None:
                return

    async def close(self) -> None:
        if self._owns:
            await self._s.close()


def text(row: Row, column: str) -> str:
    value = row.get(column)
    if not isinstance(value, str):
        raise StorageCorrupt(f"cassandra: column {column} holds {value!r}")
    return value


def integer(row: Row, column: str) -> int:
    value = row.get(column)
    if not isinstance(value, int) or isinstance(value, bool):
        raise StorageCorrupt(f"cassandra: column {column} holds {value!r}")
    return value
