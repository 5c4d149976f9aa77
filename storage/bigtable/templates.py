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
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from google.cloud.bigtable.data import ReadRowsQuery, RowRange, SetCell
from google.cloud.bigtable.data import row_filters as rf

from storage.bigtable.client import (
    BigtableHandle,
    bounded_gather,
    bulk_set_cells,
    errors,
    escape_family,
    gc_rule,
    read_row_cells,
)
from storage.clock import now_ms
from storage.ports import ClusterCounts, ClusterWrite
from storage.settings import BigtableSettings
from storage.slices import slices

__all__ = ["BigtableTemplateStore"]

_TABLE = "templates"
_FAM_T, _FAM_E, _FAM_U = "template", "email", "user"
_READ_KEYS = 500
_SCAN_PAGE = 200


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
        return cls(await BigtableHandle.open(settings, _tables(email_ttl_s)), email_ttl_s)

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

    async def close(self) -> None:
        await self._handle.close()
