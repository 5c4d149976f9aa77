"""Every storage interface of Loom, on one page.

Domain code depends on these Protocols only; each engine package (`storage/sqlite`,
`storage/bigtable`, `storage/cassandra`, `storage/dynamodb`, ...) implements them, and one
conformance suite per port (`tests/conformance/`) runs unchanged against every adapter.
Adapters hold no business rules: they store, fetch and compare-and-set, and translate their
driver's errors into `storage.errors` exactly once.

Batch-shaped methods are deliberate: a WeaveMessages call of 1,000 messages must cost a
handful of round trips to the engine, not thousands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "MessageMapping",
    "ThreadKey",
    "ThreadStore",
    "UnifiedStats",
]


# --- ThreadWeaver ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class ThreadKey:
    """A mailbox thread: thread ids are unique only within one owner's mailbox."""

    gid: str
    thread_id: str


@dataclass(frozen=True, slots=True)
class MessageMapping:
    """Map the Message-ID keyed by `rfc_key` (its 16-byte MD5) to `ut`, if absent.

    `sent_at_ms` is stored with the mapping that wins, so the unified thread's statistics
    (distinct messages, latest message) can be read without a scan of anybody's mailbox.
    """

    rfc_key: bytes
    ut: str
    sent_at_ms: int


@dataclass(frozen=True, slots=True)
class UnifiedStats:
    """Statistics over every Message-ID mapped to a set of unified threads."""

    message_count: int
    last_message_at_ms: int | None


@runtime_checkable
class ThreadStore(Protocol):
    """Storage of Streak's threadweaver relations.

    thread -> UT and Message-ID -> UT are written only if absent, atomically under
    concurrent writers (exactly one writer wins a key; every writer learns the winner).
    Merges are unordered pairs. The reverse relations (UT -> threads, UT -> merges,
    UT -> messages) are kept by the adapter in whatever shape its engine reads fast.
    """

    async def get_thread_uts(self, threads: Sequence[ThreadKey]) -> dict[ThreadKey, str]:
        """The UT of each thread that has one (threads without one are left out)."""
        ...

    async def put_thread_uts_if_absent(self, items: Sequence[tuple[ThreadKey, str]]) -> list[str]:
        """For each (thread, ut): map thread -> ut unless mapped; return each key's winner.

        Items naming the same thread all get the same winner.
        """
        ...

    async def put_message_uts_if_absent(self, items: Sequence[MessageMapping]) -> list[str]:
        """For each mapping: set Message-ID -> ut unless set; return each key's winner."""
        ...

    async def add_merges(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Records that each pair of UTs is one conversation (idempotent, unordered)."""
        ...

    async def get_merge_neighbours(self, uts: Sequence[str]) -> dict[str, set[str]]:
        """The UTs merged directly with each given UT (UTs with no merge may be left out)."""
        ...

    async def get_threads_of(
        self, uts: Sequence[str], gids: frozenset[str] | None, limit: int
    ) -> list[ThreadKey]:
        """Threads mapped to any of `uts` (only owners in `gids` when given).

        At most `limit` threads, sorted by (gid, thread_id).
        """
        ...

    async def get_stats(self, uts: Sequence[str]) -> UnifiedStats:
        """Distinct Message-IDs mapped to any of `uts`, and the latest sent_at among them."""
        ...

    async def close(self) -> None:
        """Releases connections and threads."""
        ...
