"""TemplateInduction's port: Crusher's templates table, one row per cluster key.

The store keeps emails, recipients (hashed) and templates and counts them; k, the row cap
and re-formation are the domain's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ClusterCounts", "ClusterWrite", "TemplateStore"]


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

    async def close(self) -> None:
        """Releases connections and threads."""
        ...
