"""ThreadWeaver's port: Streak's thread -> UT and Message-ID -> UT relations, plus links.

Both relations are written only if absent, atomically, whoever writes: that conditional write
is the whole of threadweaver's correctness, so every engine must provide it natively
(SQLite's INSERT OR IGNORE, Bigtable's checkAndMutate, Cassandra's LWT).

`ThreadStore` is what serving needs; `ThreadPortability` the scans only ``loom dump`` reads;
every adapter is both, a `PortableThreadStore`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "MessageMapping",
    "PortableThreadStore",
    "ThreadKey",
    "ThreadMessage",
    "ThreadPortability",
    "ThreadStore",
    "UnifiedStats",
    "UtRows",
]


@dataclass(frozen=True, slots=True, order=True)
class ThreadKey:
    """A mailbox thread: thread ids are unique only within one owner's mailbox."""

    gid: str
    thread_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageMapping:
    """Map the Message-ID keyed by `rfc_key` (its 16-byte MD5) to `ut`, if absent.

    `sent_at_ms` is stored with the mapping that wins, so the unified thread's statistics
    (distinct messages, latest message) can be read without a scan of anybody's mailbox.
    """

    rfc_key: bytes
    ut: str
    sent_at_ms: int


@dataclass(frozen=True, slots=True, order=True, kw_only=True)
class ThreadMessage:
    """An edge of the thread <-> Message-ID graph: `thread` holds the message `rfc_key`.

    The edges are what a deletion recomputes unified threads from (`ThreadStore.rehome`):
    the mappings alone cannot tell which thread held which message.
    """

    thread: ThreadKey
    rfc_key: bytes
    sent_at_ms: int


@dataclass(frozen=True, slots=True)
class UnifiedStats:
    """Statistics over every Message-ID mapped to a set of unified threads."""

    message_count: int
    last_message_at_ms: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class UtRows:
    """What one level of a unified-thread read learns about a set of UTs, in one round trip."""

    links: dict[str, frozenset[str]]
    """Every UT this answer covers -> all the UTs linked to it (empty when none).

    It covers each asked UT; an engine that can walk links itself in the same round trip
    (SQLite) may cover every UT it reached too, and the caller then reads those no more.
    """
    threads: list[ThreadKey]
    """Member threads of the covered UTs (owners in the team when one is given), any order.

    At most the asked limit; fewer only when that is all of them.
    """
    stats: UnifiedStats
    """Over the Message-IDs mapped to the covered UTs."""


class ThreadStore(Protocol):
    """Storage of Streak's threadweaver relations, plus the links that keep reads shallow.

    thread -> UT and Message-ID -> UT are written only if absent, atomically under
    concurrent writers (exactly one writer wins a key; every writer learns the winner).
    Links are an undirected graph over UTs: the seed's merges, and the shortcut edges the
    domain adds so that every UT is linked to its component's smallest UT
    (docs/ARCHITECTURE.md, "ThreadWeaver"). The reverse relations (UT -> threads,
    UT -> messages, UT -> links) are kept by the adapter in whatever shape its engine
    reads fast.

    Consistency the domain relies on, whichever process writes: once a write method has
    returned, every later read from any process or connection sees what it wrote; concurrent
    `add_links` calls never lose each other's links, and a link removed is never seen again unless
    added again (a removed link coming back later is harmless: every link joins UTs of one
    conversation). Every read method costs one round trip
    to the engine (concurrent requests at most), whatever the number of UTs asked.
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
        """For each mapping: set Message-ID -> ut unless set; return each key's winner.

        When it returns, each key's winner counts in its UT's statistics (exactly once,
        with the winner's sent_at), whoever won and whatever a crashed writer left undone.
        """
        ...

    async def add_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Links each pair of UTs (idempotent, unordered; a pair (x, x) is ignored)."""
        ...

    async def remove_links(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Unlinks each pair (idempotent, unordered; an absent link is no error).

        The domain removes only links that have a detour through a smaller UT.
        """
        ...

    async def get_links(self, uts: Sequence[str]) -> dict[str, frozenset[str]]:
        """Every UT linked to each given UT (complete; UTs without links may be left out).

        An engine that can walk links itself in the same round trip may also report the
        complete links of UTs it reached from the given ones.
        """
        ...

    async def read_uts(
        self, uts: Sequence[str], gids: frozenset[str] | None, thread_limit: int
    ) -> UtRows:
        """Links, member threads (only owners in `gids` when given) and stats of `uts`.

        One round trip for everything a read needs of one level of the link graph.
        `thread_limit` 0 reads no threads.
        """
        ...

    async def put_thread_messages(self, edges: Sequence[ThreadMessage]) -> None:
        """Records each edge (idempotent: an edge written again changes nothing).

        Written before the thread's mapping, so a mapped thread always has its edges (a thread
        mapped by a release that kept no edges has none: the domain then cannot split it).
        """
        ...

    async def get_thread_messages(
        self, threads: Sequence[ThreadKey]
    ) -> dict[ThreadKey, dict[bytes, int]]:
        """Each thread's edges as {rfc_key: sent_at_ms}; threads without edges are left out."""
        ...

    async def get_message_uts(self, keys: Sequence[bytes]) -> dict[bytes, MessageMapping]:
        """The stored mapping of each Message-ID key that has one (others left out)."""
        ...

    async def get_ut_messages(self, uts: Sequence[str]) -> list[MessageMapping]:
        """Every stored Message-ID mapping whose UT is one of `uts` (by the reverse rows)."""
        ...

    async def rehome(
        self,
        threads: Sequence[tuple[ThreadKey, str | None]],
        messages: Sequence[MessageMapping],
        dropped_messages: Sequence[bytes],
    ) -> None:
        """Unconditionally rewrites stored mappings, with their reverse rows (a rebuild).

        Each (thread, ut) maps a mapped thread -> ut; (thread, None) removes the thread's
        mapping (its edges stay: `remove_thread_messages`). Each message mapping replaces the
        stored one (ut and sent_at); each dropped key loses its mapping. Keys that have no
        mapping are left without one. Reads after it returns see only the new rows (a UT's
        members and statistics included); idempotent.
        """
        ...

    async def remove_thread_messages(self, threads: Sequence[ThreadKey]) -> None:
        """Deletes every edge of each thread (idempotent)."""
        ...

    async def get_mailbox_threads(self, gid: str) -> list[ThreadKey]:
        """Every thread of mailbox `gid` that has edges or a mapping, each once, any order
        (a thread mapped without edges, by a load or by release 1.0.0, included)."""
        ...

    async def retire_uts(self, uts: Sequence[str]) -> None:
        """Marks UTs retired: a rebuild is moving their rows away (idempotent)."""
        ...

    async def get_retired(self, uts: Sequence[str]) -> frozenset[str]:
        """Which of `uts` are marked retired."""
        ...

    async def forget_retired(self, uts: Sequence[str]) -> None:
        """Drops the retired marks of `uts` (once no writer can still be using them)."""
        ...

    async def scrub(self) -> None:
        """Leaves no byte of deleted rows in the engine's files where the engine allows it
        (SQLite: `SqliteDatabase.scrub`); a no-op elsewhere."""
        ...

    async def close(self) -> None:
        """Releases connections and threads."""
        ...


class ThreadPortability(Protocol):
    """The ThreadStore's whole-store scans: what ``loom dump`` streams, nothing serves.

    Kept apart from `ThreadStore` so the serving contract stays what requests need, and only
    the data-portability code (`server.threadweaver.portable`) sees these.

    Every record of the store, in pages, with bounded memory. Each scan is an async
    generator: memory is bounded by `page` (a scan holds about a page and reads the engine
    one short request at a time, a few per page, never a whole relation); an empty store
    yields nothing (never an empty page); `page` < 1 is a ValueError. Pages hold 1..`page`
    items, in whatever order the engine keeps them. On a distributed engine a scan is not a
    point-in-time snapshot: a row written or removed while the scan runs may or may not
    appear (a row present from the scan's start to its end appears exactly once); SQLite
    reads one snapshot per page. Reads fail with `StorageError`s as the serving methods do,
    but a scan is no coroutine method: `server.runtime.guard` does not put it behind the
    engine's breaker or a request's deadline.
    """

    def scan_thread_uts(self, page: int) -> AsyncIterator[list[tuple[ThreadKey, str]]]:
        """Every thread -> UT mapping exactly once, in pages of 1..`page` items (any order).

        The stored winner of each thread, including one whose writer crashed before its
        reverse rows were done (its winner is decided all the same; writing it again with
        `put_thread_uts_if_absent` completes them). Not a point-in-time snapshot on a
        distributed engine; memory bounded by `page` (at least 1).
        """
        ...

    def scan_message_uts(self, page: int) -> AsyncIterator[list[MessageMapping]]:
        """Every Message-ID -> UT mapping exactly once (with its stored sent_at_ms), in pages.

        Pages of 1..`page` items, any order: the stored winner of each Message-ID. Not a
        point-in-time snapshot on a distributed engine; memory bounded by `page` (at least 1).
        """
        ...

    def scan_links(self, page: int) -> AsyncIterator[list[tuple[str, str]]]:
        """Every link exactly once as (a, b) with a < b, in pages.

        Pages of 1..`page` items, any order; each undirected link once (never its reverse).
        A removed link does not appear. An `add_links` or `remove_links` that did not return
        (its writer crashed) may have stored one direction only: such a link may or may not
        appear, as the port promises nothing of a write that did not return. Not a
        point-in-time snapshot on a distributed engine; memory bounded by `page` (at least 1).
        """
        ...


class PortableThreadStore(ThreadStore, ThreadPortability, Protocol):
    """A ThreadStore with its scans: what every adapter is, and what `storage.factory` opens."""
