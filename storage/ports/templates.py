"""TemplateInduction's port: Crusher's templates table, one row per cluster key.

The store keeps emails, recipients (hashed) and templates and counts them; k, the row cap
and re-formation are the domain's.

`TemplateStore` is what serving needs; `TemplatePortability` the scans and the restore only
``loom dump`` and ``loom load`` use; every adapter is both, a `PortableTemplateStore`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "ClusterCounts",
    "ClusterWrite",
    "PortableTemplateStore",
    "StoredEmail",
    "StoredTemplates",
    "StoredUser",
    "TemplatePortability",
    "TemplateStore",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterWrite:
    """Store email `email_id` (opaque `payload`) sent to `user` in cluster row `key`."""

    key: bytes
    email_id: str
    user: bytes
    """A keyed hash of the recipient: the store never sees a recipient id."""
    payload: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterCounts:
    """Algorithm 2's fetch after a store: s, n and t of one row (live cells only)."""

    emails: int
    """s: emails in the row."""
    users: int
    """n: distinct recipients in the row."""
    template_at_ms: int | None
    """t: when the row's templates were (last) formed; None when it has none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEmail:
    """One live email cell of row `key`, with when it expires."""

    key: bytes
    email_id: str
    payload: bytes
    expires_at_ms: int
    """When the cell expires (ms since the epoch): its write time plus the store's email TTL.
    A dump carries this, not the write time, so a load on a store with another TTL keeps
    the email's remaining life."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredUser:
    """One live user cell (a recipient hash) of row `key`, with when it expires."""

    key: bytes
    user: bytes
    expires_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredTemplates:
    """Row `key`'s templates as put_templates stored them."""

    key: bytes
    data: bytes
    sender: str
    formed_at_ms: int


class TemplateStore(Protocol):
    """Crusher's templates table: one row per cluster key, three column families.

    - ``email``     email id -> opaque payload        expires `email_ttl_s` after its write
    - ``user``      recipient hash -> (empty)          expires likewise; its size is n
    - ``template``  the row's encoded templates, their formation time and sender

    Emails and users expire (Bigtable: max-age GC on both families; SQLite: the adapter
    hides and deletes expired cells), templates do not: a template outlives the emails it
    was formed from and is re-formed from fresh ones. Writing the same email id or user
    twice into a row changes nothing but its expiry. The store holds no business rule:
    k, the row cap and re-formation are the domain's.
    """

    async def add_emails(
        self,
        writes: Sequence[ClusterWrite],
        counted: Collection[bytes] | None = None,
        cap: int | None = None,
    ) -> dict[bytes, ClusterCounts]:
        """Stores every write (email and user cells), then returns s, n, t of the rows in
        `counted` (default: every row written; rows need not have been written).

        With `cap` (>= 1), s and n are each min(true count, cap): the caller only asks
        whether a threshold is reached, so an engine never reads more than `cap` cells of a
        family.
        One call carries a micro-batch of emails and should cost a few round trips (none
        for counting when `counted` is empty).
        """
        ...

    async def get_emails(self, key: bytes, limit: int) -> list[bytes]:
        """Payloads of up to `limit` live emails of row `key` (any order)."""
        ...

    async def put_templates(self, key: bytes, data: bytes, sender: str, formed_at_ms: int) -> None:
        """Replaces row `key`'s templates with `data` (formed at `formed_at_ms`)."""
        ...

    async def get_templates(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The encoded templates of each row that has any (rows without are left out)."""
        ...

    async def list_templates(
        self, after: bytes | None, limit: int, sender: str | None
    ) -> list[tuple[bytes, bytes]]:
        """Up to `limit` (key, templates) rows with templates, in key order after `after`.

        With `sender`, only rows whose templates belong to that sender.
        """
        ...

    async def get_email_cells(self, key: bytes, limit: int) -> list[tuple[str, bytes]]:
        """(email id, payload) of up to `limit` live emails of row `key` (any order): what
        an erasure reads to find a recipient's emails (their payloads name the recipient's
        hash; the store never looks inside)."""
        ...

    async def erase_cells(
        self, key: bytes, email_ids: Collection[str], users: Collection[bytes]
    ) -> None:
        """Deletes these email cells and user cells of row `key`, every version of each;
        ids the row does not hold are nothing. Idempotent."""
        ...

    async def delete_templates(self, key: bytes) -> None:
        """Removes row `key`'s templates (the row is unformed again); nothing when it has
        none. Idempotent."""
        ...

    async def scrub(self) -> None:
        """Makes the bytes of cells deleted so far unrecoverable from the engine's own files
        (SQLite: the WAL copied into the zeroed file and truncated); nothing where the
        engine alone reclaims them (Bigtable's compactions). An erasure calls it once its
        last delete has committed."""
        ...

    async def close(self) -> None:
        """Releases connections and threads."""
        ...


class TemplatePortability(Protocol):
    """The TemplateStore's scans and restore: what ``loom dump`` and ``loom load`` use,
    nothing serves.

    Kept apart from `TemplateStore` so only the data-portability code
    (`server.templates.portable`) and a recipient's erasure (`server.templates.erasure`,
    which must find the recipient's user cells in every row) see them. A scan is no coroutine method:
    `server.runtime.guard` does not put it behind the engine's breaker.
    """

    def scan_emails(self, page: int) -> AsyncIterator[list[StoredEmail]]:
        """Every live email cell exactly once, in pages of 1..`page` (any order).

        What ``loom dump`` streams: each cell with its payload and when it expires (its
        write time plus the store's email TTL, to the millisecond). Expired cells are never
        yielded, whether or not the engine has deleted them yet. An empty store yields
        nothing (never an empty page); `page` < 1 is a ValueError.

        Memory is bounded by `page`: the engine is read one page at a time (SQLite by keyset
        on the primary key, one short read per page; Bigtable by short ReadRows streams,
        each resumed after the last row or cell taken and closed before its page is
        yielded), never the whole table at once. On a distributed engine the scan is not a
        point-in-time snapshot: a cell written or rewritten while the scan runs may appear
        with its old or its new expiry, or not at all, and a cell that expires during the
        scan may or may not appear, while every cell left untouched (and live) throughout
        appears exactly once. Quiesce writers first for an exact copy.
        """
        ...

    def scan_users(self, page: int) -> AsyncIterator[list[StoredUser]]:
        """Every live user cell exactly once, in pages of 1..`page` (any order).

        Same bounds and caveats as `scan_emails`.
        """
        ...

    def scan_templates(self, page: int) -> AsyncIterator[list[StoredTemplates]]:
        """Every row's templates exactly once, in pages of 1..`page` (any order); rows
        without templates are left out.

        Same bounds and caveats as `scan_emails` (templates do not expire).
        """
        ...

    async def restore(
        self,
        emails: Sequence[StoredEmail],
        users: Sequence[StoredUser],
        templates: Sequence[StoredTemplates],
    ) -> None:
        """Writes cells as they were: each email and user cell expiring at its expires_at_ms
        (one already expired is skipped, never resurrected; a cell the store already has
        keeps the later of the two expiries), and each row's templates unless the row
        already has templates formed at or after formed_at_ms (the newer formation wins).
        Idempotent: twice is once.

        What ``loom load`` calls, a scanned page at a time. The expiry is kept whatever
        this store's TTL: a cell is written as if stored `email_ttl_s` before its
        expires_at_ms, so it may look stored in the future on a store whose TTL is shorter
        than the cell's remaining life. Where both the store and the restore have a cell,
        the one expiring later is kept, payload included. Nothing is counted or returned
        (the domain re-counts a row on its next batch).
        """
        ...


class PortableTemplateStore(TemplateStore, TemplatePortability, Protocol):
    """A TemplateStore with its scans and restore: what every adapter is, and what
    `storage.factory` opens."""
