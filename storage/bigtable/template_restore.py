"""The Bigtable TemplateStore's restore (what ``loom load`` calls), apart from the store so
neither module grows past the size the house allows.

A cell expiring at e is written with timestamp e - TTL, an expired one not at all; the same
column at another time is another version, and the newest one is read and kept. A restored
template is written by CheckAndMutateRow only when the row has no template cell formed at or
after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud.bigtable.data import RowMutationEntry, SetCell
from google.cloud.bigtable.data import row_filters as rf

from storage.bigtable.client import bounded_gather, errors
from storage.clock import now_ms
from storage.ports import StoredEmail, StoredTemplates, StoredUser
from storage.slices import slices

__all__ = ["restore_cells"]

_FAM_T, _FAM_E, _FAM_U = "template", "email", "user"
_MUTATIONS = 10_000
"""Mutations per MutateRows request of a restore (the API allows 100,000)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""Cell times built from integer milliseconds exactly (no float on the way)."""


async def restore_cells(
    table: Any,
    ttl: int,
    emails: Sequence[StoredEmail],
    users: Sequence[StoredUser],
    templates: Sequence[StoredTemplates],
) -> None:
    """`BigtableTemplateStore.restore` (see the port): `ttl` is the store's email TTL in ms."""
    now = now_ms()
    # A cell expiring at e is a cell written at e - TTL; an expired one is not written.
    # The same column at another time is another version: the newest one is read and kept.
    by_row: dict[bytes, list[SetCell]] = {}
    for e in emails:
        if e.expires_at_ms > now:
            by_row.setdefault(e.key, []).append(
                SetCell(
                    _FAM_E,
                    e.email_id.encode(),
                    e.payload,
                    timestamp_micros=(e.expires_at_ms - ttl) * 1000,
                )
            )
    for u in users:
        if u.expires_at_ms > now:
            by_row.setdefault(u.key, []).append(
                SetCell(_FAM_U, u.user, b"", timestamp_micros=(u.expires_at_ms - ttl) * 1000)
            )
    batches: list[list[RowMutationEntry]] = [[]]
    size = 0
    for key, mutations in by_row.items():
        for part in slices(mutations, _MUTATIONS):
            if size + len(part) > _MUTATIONS and batches[-1]:
                batches.append([])
                size = 0
            batches[-1].append(RowMutationEntry(key, list(part)))
            size += len(part)

    async def send(batch: list[RowMutationEntry]) -> None:
        with errors("restore cells"):
            await table.bulk_mutate_rows(batch)

    async def put(t: StoredTemplates) -> None:
        stamp = t.formed_at_ms * 1000
        as_new = rf.RowFilterChain(  # a template formed at or after this one
            [
                rf.FamilyNameRegexFilter(_FAM_T),
                rf.ColumnQualifierRegexFilter(b"t"),
                rf.TimestampRangeFilter(start=_EPOCH + timedelta(milliseconds=t.formed_at_ms)),
                rf.StripValueTransformerFilter(True),
            ]
        )
        with errors("restore templates"):
            await table.check_and_mutate_row(
                t.key,
                as_new,
                false_case_mutations=[
                    SetCell(_FAM_T, b"t", bytes(t.data), timestamp_micros=stamp),
                    SetCell(_FAM_T, b"s", t.sender.encode(), timestamp_micros=stamp),
                ],
            )

    await bounded_gather(send, [batch for batch in batches if batch])
    await bounded_gather(put, list(templates))
