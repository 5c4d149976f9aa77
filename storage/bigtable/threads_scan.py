"""The Bigtable ThreadStore's scans (`storage.ports.ThreadPortability`), apart from serving.

Scans (`loom dump`) page by keyset on the row key, each page one short request starting
after the last row (or cell) of the page before: mappings from the forward tables (one row
each, whether or not its `r` flag is set yet), links from the `n` cells of UT rows, streamed
and cut after a page's worth of cells (a wide row is finished cell range by cell range),
each undirected link kept once, from the row of its smaller UT. UT rows without links are
skipped by the engine, but still scanned by it.

Kept out of `storage.bigtable.threads` because they share nothing with serving but the
tables and the cell spellings (`thread_cells.py`): the keyset walks below are a fifth of the
adapter, and the serving module reads as the seed's design without them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, TypeVar

from google.cloud.bigtable.data import ReadRowsQuery, RowRange
from google.cloud.bigtable.data import row_filters as rf

from storage.bigtable.client import errors
from storage.bigtable.thread_cells import (
    LATEST,
    LINKS,
    LONGEST_UT,
    cells_per_response,
    decode_thread,
    links_only,
    message_row,
    row_cells,
    text,
)
from storage.ports import MessageMapping, ThreadKey

__all__ = ["ThreadScans"]

_LINK_ROW_CELLS = cells_per_response([b"\0" * LONGEST_UT], LONGEST_UT)  # per row per response
T = TypeVar("T")


class ThreadScans:
    """Every mapping of the forward tables and every link of the UT table, page by page.

    Mixed into `BigtableThreadStore`, which opens the three tables.
    """

    _thread_ut: Any
    _message_ut: Any
    _ut: Any

    async def scan_thread_uts(self, page: int) -> AsyncIterator[list[tuple[ThreadKey, str]]]:
        def mapping(row: Any) -> tuple[ThreadKey, str] | None:
            cells = row_cells(row)
            return (decode_thread(row.row_key), text(cells[b"u"])) if b"u" in cells else None

        async with contextlib.aclosing(self._scan_rows(self._thread_ut, mapping, page)) as scan:
            async for items in scan:
                yield items

    async def scan_message_uts(self, page: int) -> AsyncIterator[list[MessageMapping]]:
        def mapping(row: Any) -> MessageMapping | None:
            stored = message_row(row)
            if stored is None:  # no mapping: as absent, as a put reads it
                return None
            return MessageMapping(rfc_key=row.row_key, ut=stored[0], sent_at_ms=stored[1])

        async with contextlib.aclosing(self._scan_rows(self._message_ut, mapping, page)) as scan:
            async for items in scan:
                yield items

    async def _scan_rows(
        self, table: Any, mapping: Callable[[Any], T | None], page: int
    ) -> AsyncGenerator[list[T], None]:
        """`mapping` of every row of a forward table (rows it maps to None left out), in
        pages of `page`: one ReadRows of up to `page` rows per page, after the last key."""
        _check_page(page)
        held: list[T] = []
        after: bytes | None = None
        while True:
            ranges = [] if after is None else [RowRange(start_key=after, start_is_inclusive=False)]
            with errors("scan rows"):
                rows = await table.read_rows(
                    ReadRowsQuery(row_ranges=ranges, limit=page, row_filter=LATEST)
                )
            held += [item for item in map(mapping, rows) if item is not None]
            if len(held) >= page:
                yield held[:page]
                held = held[page:]
            if len(rows) < page:
                if held:
                    yield held
                return
            after = rows[-1].row_key

    async def scan_links(self, page: int) -> AsyncIterator[list[tuple[str, str]]]:
        held: list[tuple[str, str]] = []
        async with contextlib.aclosing(self._link_cells(page)) as scan:
            async for cells in scan:
                # Each link is two cells, one in each UT's row: keep the smaller UT's.
                held += [(text(row), text(q)) for row, q in cells if row < q]
                if len(held) >= page:
                    yield held[:page]
                    held = held[page:]
        if held:
            yield held

    async def _link_cells(self, page: int) -> AsyncGenerator[list[tuple[bytes, bytes]], None]:
        """Every link cell of the UT table as (row key, qualifier), in key then qualifier
        order, in lists of at most `page`: each one short request that resumes after the
        last cell of the list before (none held open while the caller works)."""
        _check_page(page)
        per_row = max(1, min(page, _LINK_ROW_CELLS))
        row: bytes | None = None  # the last row a list reached
        after: bytes | None = None  # its last qualifier read, when it may hold more links
        while True:
            if row is not None and after is not None:  # finish the row, a range at a time
                chain = rf.RowFilterChain(
                    [
                        rf.ColumnRangeFilter(LINKS, start_qualifier=after, inclusive_start=False),
                        rf.StripValueTransformerFilter(True),
                        rf.CellsRowLimitFilter(per_row),
                    ]
                )
                with errors("scan links"):
                    found = await self._ut.read_row(row, row_filter=chain)
                rest = [] if found is None else [c.qualifier for c in found.cells]
                if rest:
                    yield [(row, q) for q in rest]
                after = rest[-1] if len(rest) >= per_row else None
                continue
            # Rows after `row`, streamed until a list's worth of cells; a row cut short (by
            # the list's end or the per-row limit that keeps a response small) is resumed.
            taken: list[tuple[bytes, bytes]] = []
            ended = True
            ranges = [] if row is None else [RowRange(start_key=row, start_is_inclusive=False)]
            query = ReadRowsQuery(row_ranges=ranges, row_filter=links_only(per_row))
            with errors("scan links"):
                stream = await self._ut.read_rows_stream(query)
                async with contextlib.aclosing(stream):
                    async for found in stream:
                        cells = [c.qualifier for c in found.cells]
                        room = page - len(taken)
                        taken += [(found.row_key, q) for q in cells[:room]]
                        row = found.row_key
                        if len(cells) > room or len(cells) >= per_row:
                            after = taken[-1][1]
                        if len(taken) >= page or after is not None:
                            ended = False
                            break
            if taken:
                yield taken
            if ended:
                return


def _check_page(page: int) -> None:
    if page < 1:
        raise ValueError(f"page must be at least 1, not {page}")
