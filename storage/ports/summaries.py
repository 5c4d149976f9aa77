"""Summary's port: Remind's encoded summaries, written by compare-and-set on a version.

The store never looks inside a summary, so the encoding (exact ids, then a sketch) stays the
domain's and one conditional write is all an engine has to offer.

`SummaryStore` is what serving needs; `SummaryPortability` the scan only ``loom dump``
reads; every adapter is both, a `PortableSummaryStore`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

__all__ = ["PortableSummaryStore", "StoredSummary", "SummaryPortability", "SummaryStore"]


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """One message's encoded summary and its optimistic-concurrency version (1 on create)."""

    data: bytes
    version: int


class SummaryStore(Protocol):
    """Opaque encoded summaries keyed by message id, written by compare-and-set on a version.

    The store never looks inside `data` (the domain owns the encoding); it only guarantees
    that of two writers who read the same version, exactly one `put_if_version` succeeds, so
    the loser re-reads and re-applies its events (Remind's summaries in DynamoDB, with a
    version attribute and a conditional PutItem).
    """

    async def get(self, message_id: str) -> StoredSummary | None:
        """The stored summary, or None when nothing was ever written for `message_id`."""
        ...

    async def put_if_version(
        self, message_id: str, data: bytes, expected_version: int | None
    ) -> bool:
        """Write `data` with version ``expected_version + 1`` (1 when creating).

        `expected_version` None means the row must not exist yet. Returns True when written,
        False when the stored version differs (someone else wrote first): never raises for
        a lost race, only for engine faults.
        """
        ...

    async def page_after(
        self, after: str | None, limit: int
    ) -> tuple[list[tuple[str, StoredSummary]], str | None]:
        """Up to `limit` stored summaries (message id order on SQLite, any order elsewhere)
        after the cursor `after` (None: from the start), and the cursor to continue from
        (None once the store is exhausted).

        What an erasure walks, one page per call, so it can report progress and never holds
        more than a page. A cursor is opaque: pass back what the previous call returned. A
        page may be shorter than `limit` (even empty) while the cursor is not None. Like
        `SummaryPortability.scan`, not a snapshot: a summary created meanwhile may be missed
        (it was written after the walk began), every summary left untouched is seen once.
        `limit` < 1 is a ValueError.
        """
        ...

    async def scrub(self) -> None:
        """Makes the bytes of rows overwritten or deleted so far unrecoverable from the
        engine's own files (SQLite: the WAL copied into the zeroed file and truncated);
        nothing on an engine that keeps no old bytes a reader can reach (DynamoDB). An
        erasure calls it once its last write has committed."""
        ...

    async def close(self) -> None:
        """Releases connections and threads."""
        ...


class SummaryPortability(Protocol):
    """The SummaryStore's whole-store scan: what ``loom dump`` streams, nothing serves.

    Kept apart from `SummaryStore` so only the data-portability code
    (`server.summary.portable`) sees it. A scan is no coroutine method:
    `server.runtime.guard` does not put it behind the engine's breaker.
    """

    def scan(self, page: int) -> AsyncIterator[list[tuple[str, StoredSummary]]]:
        """Every stored summary exactly once as (message_id, summary), data byte for byte, in pages.

        Pages hold 1..`page` summaries in any order; an empty store yields nothing (never
        an empty page); `page` < 1 is a ValueError. What ``loom dump`` streams: the version
        comes along so a load can restore it as it was.

        Memory is bounded by `page` (summaries are up to ~31 KB each, so a page of 100 is a
        few MB at most): the engine is read one page at a time (SQLite by keyset on the
        primary key, one short read per page; DynamoDB by Scan with a Limit, resumed from
        LastEvaluatedKey), never the whole table at once. On a distributed engine the scan
        is not a point-in-time snapshot: a summary written while the scan runs may appear
        in its old or its new version (a created one may not appear at all), while every
        summary left untouched throughout appears exactly once. Quiesce writers first for an
        exact copy.
        """
        ...


class PortableSummaryStore(SummaryStore, SummaryPortability, Protocol):
    """A SummaryStore with its scan: what every adapter is, and what `storage.factory` opens."""
