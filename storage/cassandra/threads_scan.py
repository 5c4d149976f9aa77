"""The Cassandra ThreadStore's scans (`storage.ports.ThreadPortability`), apart from serving.

Scans (`loom dump`) read the forward tables (`thread_ut`, `rfc_ut`) and `ut_merges` (each
link from its smaller UT's partition) in token order, `page` rows per request: each request
starts after the last token read, so no paging state is held between pages. Where a request
stopped, the rest of its last partition is read by clustering key, and the partitions that
share its token (a Murmur3 collision, rare but real at a billion keys) are read by key, so
no row is skipped or read twice.

Kept out of `storage.cassandra.threads` because they share nothing with serving but the
tables: the token walk below is a third of the adapter, and the serving module reads as the
seed's algorithm without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TypeVar

from storage.cassandra.session import Row
from storage.cassandra.store import CassandraStore, integer, text
from storage.errors import StorageCorrupt
from storage.ports import MessageMapping, ThreadKey

__all__ = ["ThreadScans"]

T = TypeVar("T")


class ThreadScans(CassandraStore):
    """Every mapping and link of the thread tables, page by page, in token order."""

    async def scan_thread_uts(self, page: int) -> AsyncIterator[list[tuple[ThreadKey, str]]]:
        def mapping(r: Row) -> tuple[ThreadKey, str]:
            return ThreadKey(text(r, "gid"), text(r, "thread_id")), text(r, "ut")

        rows = self._scan_rows("thread_ut", ("gid", "thread_id"), None, ("ut",), page)
        async with contextlib.aclosing(_in_pages(rows, mapping, page)) as pages:
            async for items in pages:
                yield items

    async def scan_message_uts(self, page: int) -> AsyncIterator[list[MessageMapping]]:
        def mapping(r: Row) -> MessageMapping:
            key = r.get("rfc_key")
            if not isinstance(key, bytes):
                raise StorageCorrupt(f"cassandra: rfc_ut.rfc_key is {key!r}")
            return MessageMapping(rfc_key=key, ut=text(r, "ut"), sent_at_ms=integer(r, "sent_at"))

        rows = self._scan_rows("rfc_ut", ("rfc_key",), None, ("ut", "sent_at"), page)
        async with contextlib.aclosing(_in_pages(rows, mapping, page)) as pages:
            async for items in pages:
                yield items

    async def scan_links(self, page: int) -> AsyncIterator[list[tuple[str, str]]]:
        def mapping(r: Row) -> tuple[str, str] | None:
            ut, neighbour = text(r, "ut"), text(r, "neighbour")
            return (ut, neighbour) if ut < neighbour else None  # the reverse row: skipped

        rows = self._scan_rows("ut_merges", ("ut",), "neighbour", (), page)
        async with contextlib.aclosing(_in_pages(rows, mapping, page)) as pages:
            async for items in pages:
                yield items

    async def _scan_rows(
        self,
        table: str,
        key: tuple[str, ...],
        clustering: str | None,
        columns: tuple[str, ...],
        page: int,
    ) -> AsyncGenerator[list[Row], None]:
        """Every row of `table` exactly once, in lists of at most `page` rows, each read by
        one request (a partition key `key`, at most one `clustering` column)."""
        if page < 1:
            raise ValueError(f"page must be at least 1, not {page}")
        keys = ", ".join(key)
        token = f"token({keys})"
        wanted = ", ".join((*key, *((clustering,) if clustering else ()), *columns))
        select = f"SELECT {token} AS tok, {wanted} FROM {{ks}}.{table}"
        after: int | None = None
        while True:
            if after is None:
                rows = await self._q(f"{select} LIMIT ?", (page,), all_pages=True)
            else:
                rows = await self._q(
                    f"{select} WHERE {token} > ? LIMIT ?", (after, page), all_pages=True
                )
            if rows:
                yield rows
            if len(rows) < page:
                return
            last = rows[-1]
            after = int(last["tok"])
            # The request stopped at token `after`: maybe inside its last partition, maybe
            # before other partitions with that token. Read both before going past it.
            done = {tuple(r[k] for k in key) for r in rows if r["tok"] == after}
            if clustering is not None:
                partition = self._partition_rows(
                    select,
                    key,
                    tuple(last[k] for k in key),
                    clustering=clustering,
                    after=last[clustering],
                    page=page,
                )
                async with contextlib.aclosing(partition) as more:
                    async for part in more:
                        yield part
            sharing = await self._q(
                f"SELECT DISTINCT {keys} FROM {{ks}}.{table} WHERE {token} >= ? AND {token} <= ?",
                (after, after),
                all_pages=True,
            )
            for other in sharing:
                values = tuple(other[k] for k in key)
                if values in done:
                    continue
                partition = self._partition_rows(
                    select, key, values, clustering=clustering, after=None, page=page
                )
                async with contextlib.aclosing(partition) as more:
                    async for part in more:
                        yield part

    async def _partition_rows(
        self,
        select: str,
        key: tuple[str, ...],
        values: tuple[object, ...],
        *,
        clustering: str | None,
        after: object,
        page: int,
    ) -> AsyncGenerator[list[Row], None]:
        """The rows of one partition after clustering value `after` (all when None), in
        lists of at most `page` rows, one request each."""
        where = " AND ".join(f"{k} = ?" for k in key)
        while True:
            if clustering is None:
                rows = await self._q(f"{select} WHERE {where}", values)
                if rows:
                    yield rows
                return
            if after is None:
                cql, params = f"{select} WHERE {where} LIMIT ?", (*values, page)
            else:
                cql = f"{select} WHERE {where} AND {clustering} > ? LIMIT ?"
                params = (*values, after, page)
            rows = await self._q(cql, params, all_pages=True)
            if rows:
                yield rows
            if len(rows) < page:
                return
            after = rows[-1][clustering]


async def _in_pages(
    rows: AsyncGenerator[list[Row], None], item: Callable[[Row], T | None], page: int
) -> AsyncGenerator[list[T], None]:
    """`item` of each row of `rows` (lists of at most `page` rows; rows it maps to None left
    out), regrouped into pages of `page` items, the last one shorter, none empty."""
    held: list[T] = []
    async with contextlib.aclosing(rows):
        async for chunk in rows:
            held += [x for x in map(item, chunk) if x is not None]
            if len(held) >= page:
                yield held[:page]
                held = held[page:]
    if held:
        yield held
