"""TemplateStore on Cloud Bigtable: the paper's `templates` table (Figure 4), exactly.

One table, one row per cluster key, three families:

    template   t -> encoded templates, s -> sender     MaxVersions(1); cell time = formed_at
    email      <email id> -> payload                   MaxAge(email_ttl_s) + MaxVersions(1)
    user       <recipient hash> -> b""                 MaxAge(email_ttl_s) + MaxVersions(1)

The TTL is Bigtable's own max-age GC on `email` and `user` (the emulator runs GC only after
a ModifyColumnFamilies call, which `ensure_tables` always makes). GC is lazy, so reads also
filter cells older than the TTL by timestamp: what a read sees expires exactly on time.

`add_emails` is one MutateRows for the batch, then one ReadRows over the rows the caller
asks to count, values stripped and each family cut at the caller's cap (Algorithm 2's
"fetch s, t, n": the counts are cell counts; t is the template cell's timestamp). The
clustering server asks only for rows its cached state cannot decide, so a hot row's
hundreds of cells are not streamed through the client on every batch. Email payloads are read page by page (`read_row_cells`) so a
full row stays under the emulator's 4 MiB response limit.

The expiry is the cell's timestamp plus the TTL (the max-age GC and the reads' timestamp
filter both count from it): the scans report a cell's timestamp + TTL as its expires_at_ms,
and `restore` writes a cell with timestamp expires_at_ms - TTL, so a loaded cell keeps its
remaining life whatever the TTL of the store it was dumped from (a timestamp may then lie in
the future, which Bigtable accepts). A cell the row already has is another version of the
same column: the newest one (the later expiry) is the one reads see and MaxVersions(1)
keeps. A restored template is written by CheckAndMutateRow only when the row has no
template cell formed at or after it.

The scans are short ReadRows streams, each of at most a page of rows and closed before its
page is yielded (a read may not outlive `request_timeout_s`, and a dump's consumer may be
slow); each resumes after the last row taken, or inside a row after its last qualifier when
the row had more cells than one response carries. They are not a point-in-time snapshot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from google.cloud.bigtable.data import (
    DeleteAllFromFamily,
    DeleteRangeFromColumn,
    ReadRowsQuery,
    RowRange,
    SetCell,
)
from google.cloud.bigtable.data import row_filters as rf

from storage.bigtable import versions
from storage.bigtable.client import (
    BigtableHandle,
    bounded_gather,
    bulk_set_cells,
    errors,
    escape_family,
    gc_rule,
    read_row_cells,
)
from storage.bigtable.template_restore import restore_cells
from storage.clock import now_ms
from storage.ports import ClusterCounts, ClusterWrite, StoredEmail, StoredTemplates, StoredUser
from storage.settings import BigtableSettings
from storage.slices import slices

__all__ = ["TABLES", "BigtableTemplateStore"]

_TABLE = "templates"
TABLES = (_TABLE,)
"""The store's tables (`storage.upgrades` reads their version record)."""
_FAM_T, _FAM_E, _FAM_U = "template", "email", "user"
_READ_KEYS = 500
_SCAN_PAGE = 200
_ROW_CELLS = 1000
"""Cells of one row a scan takes per response at most, before it has seen how big they are."""
_RESPONSE_BUDGET = 3_000_000
"""Bytes of one row a scan takes per response: well under the emulator's 4 MiB limit."""
_MUTATIONS = 10_000
"""Mutations per MutateRows request of a restore (the API allows 100,000)."""


_Cell = tuple[bytes, bytes, bytes, int]
"""A scanned cell: row key, qualifier, value, timestamp in microseconds."""


@dataclass(frozen=True, slots=True)
class _Round:
    """What one scan round read."""

    cells: list[_Cell]
    rows: int
    """Rows the stream delivered."""
    finished: bytes | None
    """The last row read to its end (None: none was)."""
    inside: tuple[bytes, bytes] | None
    """(row, last qualifier) of a row cut at the per-row cell limit: it may have more."""
    cut: bool
    """Whether the round stopped before its stream ended."""


def _tables(email_ttl_s: float) -> dict[str, dict[str, Any]]:
    expiring = gc_rule(max_versions=1, max_age_s=email_ttl_s)
    return {_TABLE: {_FAM_T: gc_rule(max_versions=1), _FAM_E: expiring, _FAM_U: expiring}}


class BigtableTemplateStore:
    """`storage.ports.TemplateStore` on Cloud Bigtable (or its emulator)."""

    def __init__(self, handle: BigtableHandle, email_ttl_s: float) -> None:
        self._handle = handle
        self._table = handle.table(_TABLE)
        self._ttl_ms = int(email_ttl_s * 1000)

    @classmethod
    async def open(cls, settings: BigtableSettings, *, email_ttl_s: float) -> BigtableTemplateStore:
        """Connects (creating the table and applying GC rules when `create_tables`)."""
        tables = _tables(email_ttl_s)
        migrate = partial(versions.upgrade, settings, tables, versions.TEMPLATES)
        return cls(await BigtableHandle.open(settings, tables, migrate), email_ttl_s)

    def _live(self, family: str) -> rf.RowFilter:
        start = datetime.fromtimestamp((now_ms() - self._ttl_ms) / 1000, tz=UTC)
        return rf.RowFilterChain(
            [rf.FamilyNameRegexFilter(escape_family(family)), rf.TimestampRangeFilter(start=start)]
        )

    async def add_emails(
        self,
        writes: Sequence[ClusterWrite],
        counted: Collection[bytes] | None = None,
        cap: int | None = None,
    ) -> dict[bytes, ClusterCounts]:
        stamp = now_ms() * 1000
        cells = [(w.key, _FAM_E, w.email_id.encode(), w.payload) for w in writes]
        cells += [(w.key, _FAM_U, w.user, b"") for w in writes]
        await bulk_set_cells(self._table, cells, timestamp_micros=stamp)
        keys = list(dict.fromkeys(w.key for w in writes) if counted is None else counted)
        if not keys:
            return {}

        def family(name: str) -> rf.RowFilter:
            chain = [self._live(name), rf.CellsColumnLimitFilter(1)]
            if cap is not None:  # the row's first `cap` cells of the family, no more
                chain.append(rf.CellsRowLimitFilter(max(1, cap)))
            return rf.RowFilterChain(chain)

        counting = rf.RowFilterChain(
            [
                rf.RowFilterUnion(
                    [
                        family(_FAM_E),
                        family(_FAM_U),
                        rf.RowFilterChain(
                            [rf.FamilyNameRegexFilter(_FAM_T), rf.CellsColumnLimitFilter(1)]
                        ),
                    ]
                ),
                rf.StripValueTransformerFilter(True),
            ]
        )

        async def read(part: Sequence[bytes]) -> list[Any]:
            with errors("count cluster rows"):
                query = ReadRowsQuery(row_keys=list(part), row_filter=counting)
                return list(await self._table.read_rows(query))

        out = {key: ClusterCounts(emails=0, users=0, template_at_ms=None) for key in keys}
        for rows in await bounded_gather(read, list(slices(keys, _READ_KEYS))):
            for row in rows:
                emails = users = 0
                formed: int | None = None
                for cell in row.cells:
                    if cell.family == _FAM_E:
                        emails += 1
                    elif cell.family == _FAM_U:
                        users += 1
                    elif cell.family == _FAM_T and cell.qualifier == b"t":
                        formed = cell.timestamp_micros // 1000
                out[row.row_key] = ClusterCounts(emails=emails, users=users, template_at_ms=formed)
        return out

    async def get_emails(self, key: bytes, limit: int) -> list[bytes]:
        start = (now_ms() - self._ttl_ms) * 1000
        cells = read_row_cells(self._table, key, _FAM_E, limit=limit, min_timestamp_micros=start)
        return [value async for _, value in cells]

    async def put_templates(self, key: bytes, data: bytes, sender: str, formed_at_ms: int) -> None:
        stamp = formed_at_ms * 1000
        with errors("put templates"):
            await self._table.mutate_row(
                key,
                [
                    SetCell(_FAM_T, b"t", bytes(data), timestamp_micros=stamp),
                    SetCell(_FAM_T, b"s", sender.encode(), timestamp_micros=stamp),
                ],
            )

    async def get_templates(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        wanted = list(dict.fromkeys(keys))
        only = rf.RowFilterChain(
            [
                rf.FamilyNameRegexFilter(_FAM_T),
                rf.ColumnQualifierRegexFilter(b"t"),
                rf.CellsColumnLimitFilter(1),
            ]
        )

        async def read(part: Sequence[bytes]) -> list[Any]:
            with errors("get templates"):
                return list(
                    await self._table.read_rows(ReadRowsQuery(row_keys=list(part), row_filter=only))
                )

        found: dict[bytes, bytes] = {}
        for rows in await bounded_gather(read, list(slices(wanted, _READ_KEYS))):
            for row in rows:
                for cell in row.cells:
                    found[row.row_key] = cell.value
        return found

    async def list_templates(
        self, after: bytes | None, limit: int, sender: str | None
    ) -> list[tuple[bytes, bytes]]:
        only = rf.RowFilterChain([rf.FamilyNameRegexFilter(_FAM_T), rf.CellsColumnLimitFilter(1)])
        out: list[tuple[bytes, bytes]] = []
        cursor = after
        while len(out) < limit:
            row_range = (
                RowRange(start_key=cursor, start_is_inclusive=False) if cursor else RowRange()
            )
            query = ReadRowsQuery(row_ranges=[row_range], row_filter=only, limit=_SCAN_PAGE)
            with errors("list templates"):
                rows = list(await self._table.read_rows(query))
            for row in rows:
                cells = {c.qualifier: c.value for c in row.cells}
                cursor = row.row_key
                if b"t" not in cells:
                    continue
                if sender is not None and cells.get(b"s", b"").decode(errors="replace") != sender:
                    continue
                out.append((row.row_key, cells[b"t"]))
                if len(out) == limit:
                    break
            if len(rows) < _SCAN_PAGE:
                break
        return out

    async def scan_emails(self, page: int) -> AsyncIterator[list[StoredEmail]]:
        ttl = self._ttl_ms
        async for cells in self._scan_cells(_FAM_E, page, strip=False):
            yield [
                StoredEmail(
                    key=key,
                    email_id=qualifier.decode(),
                    payload=value,
                    expires_at_ms=stamp // 1000 + ttl,
                )
                for key, qualifier, value, stamp in cells
            ]

    async def scan_users(self, page: int) -> AsyncIterator[list[StoredUser]]:
        ttl = self._ttl_ms
        async for cells in self._scan_cells(_FAM_U, page, strip=True):
            yield [
                StoredUser(key=key, user=qualifier, expires_at_ms=stamp // 1000 + ttl)
                for key, qualifier, _, stamp in cells
            ]

    async def _scan_cells(
        self, family: str, page: int, *, strip: bool
    ) -> AsyncIterator[list[_Cell]]:
        """The live cells of an expiring `family` (newest version of each column), in pages.

        Each round is one short ReadRows stream (`_round`), closed before anything is
        yielded: a range query of at most `page` rows after the last row finished or, when
        the previous response of a row was cut at the per-row cell limit, that row alone
        after its last qualifier. A round stops once `page` cells are held, so at most
        `page` plus one response of a row (itself at most `page` cells) are held at once.
        """
        if page < 1:
            raise ValueError(f"scan page must be at least 1, not {page}")
        held: list[_Cell] = []
        after: bytes | None = None  # every row up to this one is finished
        inside: tuple[bytes, bytes] | None = None  # this row is finished up to this qualifier
        widest = 0
        while True:
            per_row = max(1, min(page, _ROW_CELLS, _RESPONSE_BUDGET // (widest + 64)))
            ranged = inside is None
            if inside is None:
                rows = RowRange(start_key=after, start_is_inclusive=False) if after else RowRange()
                only = self._scan_filter(family, per_row, strip=strip, after_qualifier=None)
                query = ReadRowsQuery(row_ranges=[rows], row_filter=only, limit=page)
            else:
                after, qualifier = inside  # the row is finished once a round reads its end
                only = self._scan_filter(family, per_row, strip=strip, after_qualifier=qualifier)
                query = ReadRowsQuery(row_keys=[after], row_filter=only)
            got = await self._round(family, query, per_row, page - len(held))
            held += got.cells
            widest = max([widest, *(len(k) + len(q) + len(v) for k, q, v, _ in got.cells)])
            after = got.finished or after
            inside = got.inside
            while len(held) >= page:
                yield held[:page]
                del held[:page]
            if ranged and not got.cut and got.rows < page:  # the table's end
                if held:
                    yield held
                return

    async def _round(self, family: str, query: ReadRowsQuery, per_row: int, room: int) -> _Round:
        """One scan round: reads `query`'s stream until its end, a row cut at `per_row`
        cells, or `room` cells, then closes it."""
        cells: list[_Cell] = []
        rows = 0
        finished: bytes | None = None
        with errors(f"scan {family}"):
            stream = await self._table.read_rows_stream(query)
            try:
                async for row in stream:
                    rows += 1
                    mine = [
                        (row.row_key, c.qualifier, c.value, c.timestamp_micros) for c in row.cells
                    ]
                    cells += mine
                    if len(mine) >= per_row:  # the row may have more: resume inside it
                        inside = (row.row_key, mine[-1][1])
                        return _Round(cells, rows, finished, inside, cut=True)
                    finished = row.row_key
                    if len(cells) >= room:
                        return _Round(cells, rows, finished, None, cut=True)
            finally:
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()
        return _Round(cells, rows, finished, None, cut=False)

    def _scan_filter(
        self, family: str, per_row: int, *, strip: bool, after_qualifier: bytes | None
    ) -> rf.RowFilter:
        """A scan's filter: `family`'s live newest cells (after `after_qualifier` when
        resuming a row), at most `per_row` of a row."""
        chain: list[rf.RowFilter] = [rf.FamilyNameRegexFilter(escape_family(family))]
        if after_qualifier is not None:
            chain.append(
                rf.ColumnRangeFilter(family, start_qualifier=after_qualifier, inclusive_start=False)
            )
        chain += [self._live(family), rf.CellsColumnLimitFilter(1)]
        if strip:
            chain.append(rf.StripValueTransformerFilter(True))
        chain.append(rf.CellsRowLimitFilter(per_row))
        return rf.RowFilterChain(chain)

    async def scan_templates(self, page: int) -> AsyncIterator[list[StoredTemplates]]:
        if page < 1:
            raise ValueError(f"scan page must be at least 1, not {page}")
        only = rf.RowFilterChain([rf.FamilyNameRegexFilter(_FAM_T), rf.CellsColumnLimitFilter(1)])
        after: bytes | None = None
        while True:
            rows_range = (
                RowRange(start_key=after, start_is_inclusive=False) if after else RowRange()
            )
            query = ReadRowsQuery(row_ranges=[rows_range], row_filter=only, limit=page)
            with errors("scan templates"):
                rows = list(await self._table.read_rows(query))
            found: list[StoredTemplates] = []
            for row in rows:
                cells = {c.qualifier: c for c in row.cells}
                if b"t" in cells:
                    found.append(
                        StoredTemplates(
                            key=row.row_key,
                            data=cells[b"t"].value,
                            sender=cells[b"s"].value.decode() if b"s" in cells else "",
                            formed_at_ms=cells[b"t"].timestamp_micros // 1000,
                        )
                    )
            if found:
                yield found
            if len(rows) < page:
                return
            after = rows[-1].row_key

    async def get_email_cells(self, key: bytes, limit: int) -> list[tuple[str, bytes]]:
        start = (now_ms() - self._ttl_ms) * 1000
        cells = read_row_cells(self._table, key, _FAM_E, limit=limit, min_timestamp_micros=start)
        return [(qualifier.decode(), value) async for qualifier, value in cells]

    async def erase_cells(
        self, key: bytes, email_ids: Collection[str], users: Collection[bytes]
    ) -> None:
        # Column deletes of one row: every version of each cell goes, and reads (which name
        # families, never these columns' old versions) never scan what is left until the
        # next compaction drops it.
        mutations = [DeleteRangeFromColumn(_FAM_E, e.encode()) for e in email_ids]
        mutations += [DeleteRangeFromColumn(_FAM_U, bytes(u)) for u in users]
        for part in slices(mutations, _MUTATIONS):
            with errors("erase cells"):
                await self._table.mutate_row(key, list(part))

    async def delete_templates(self, key: bytes) -> None:
        with errors("delete templates"):
            await self._table.mutate_row(key, [DeleteAllFromFamily(_FAM_T)])

    async def scrub(self) -> None:
        # Bigtable drops deleted cells from its files at its own compactions (within about
        # a week, per Google's documentation); no client call hastens it.
        return

    async def restore(
        self,
        emails: Sequence[StoredEmail],
        users: Sequence[StoredUser],
        templates: Sequence[StoredTemplates],
    ) -> None:
        await restore_cells(self._table, self._ttl_ms, emails, users, templates)

    async def close(self) -> None:
        await self._handle.close()
