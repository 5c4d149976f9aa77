"""The change log of the Cassandra InboxStore (`storage.ports.inbox_changes`).

    inbox_change      ((inbox_id), at_us, uniq) -> kind, thread_ids, message_id, all_threads
    inbox_change_feed ((bucket, shard), at_us, uniq) -> inbox_ids    the tail of every inbox

Cassandra has no transaction to put a change and its log row in, so each write path appends
right after its write succeeded (`CassandraInboxChanges._log_changes`), at a position made of
the appending server's wall clock in microseconds (``at_us``) and a random 63-bit tie-breaker
(``uniq``). Appends from concurrent servers are not ordered by anything but their clocks, so a
reader could read past a position before a row behind it lands. The settle window closes that:

- a row is readable only once ``at_us <= now - SETTLE_US`` (the reader's clock), and
  `change_head` is that "settled now", so everything not readable yet is after it;
- an append (every write of it) must finish within ``SETTLE_US / 2`` of taking its position,
  measured on the monotonic clock; one that took longer is written again at a fresh position.
  A reader that moved past the late row still meets its copy: a change may be read twice, it
  is never missed. The other half of the window is the clock skew between servers it allows.

Each append writes one row per changed inbox (grouped by replica set, one ``UPDATE … WHERE
inbox_id IN ?`` per 50 inboxes, as deliveries write the inbox itself) and one feed row naming
every inbox it changed, in one of `SHARDS` partitions of its second: `changed_inboxes` reads
the feed a few seconds at a time, so one poll per server process wakes every watcher.

Rows expire on their own (``default_time_to_live``: `RETENTION_S` for the log, `FEED_TTL_S`
for the feed, which only wakes pollers and names inboxes, so it is kept briefly), under
TimeWindowCompaction: whole SSTables expire, and a read after a recent position skips the
older windows by their clustering bounds. `trim_changes` therefore deletes nothing.
`forget_changes` is one partition tombstone.

A position is ``cq:<at_us, 20 digits>:<uniq, 19 digits>``: they sort as strings as they do as
numbers, in both tables.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any, get_args

from cassandra.query import PreparedStatement

from storage.cassandra.session import CassandraSession, Row, gather
from storage.cassandra.store import integer, text
from storage.errors import StorageCorrupt
from storage.ports import ChangeKind, InboxChange, LoggedChange
from storage.slices import slices

__all__ = [
    "CHANGE_TABLES",
    "FEED_TTL_S",
    "RETENTION_S",
    "SETTLE_US",
    "SHARDS",
    "CassandraInboxChanges",
]

SETTLE_US = 1_000_000
"""How old (by the reader's clock) a row must be to be readable: twice the longest an append
may take, the other half being the clock skew allowed between servers."""
_LATE_S = SETTLE_US / 2 / 1_000_000
_ATTEMPTS = 3
"""Writes of one append at most: a late one is written again at most twice."""
RETENTION_S = 7 * 24 * 3600
"""How long a change stays in its inbox's log (a watcher resuming later starts anew)."""
FEED_TTL_S = 3600
"""How long the feed keeps a row: a poller further behind than this has nothing older to
read, so it skips ahead to what is kept."""
SHARDS = 4
"""Feed partitions per second: an append picks one at random, a tail reads them all."""
_BUCKET_US = 1_000_000
_BUCKETS_PER_CALL = 5
"""Seconds of feed one `changed_inboxes` call reads at most (``SHARDS`` queries each): a
tail far behind catches up over successive calls."""
_MAX_READ = 10_000
_MAX_UNIQ = (1 << 63) - 1
_IN_KEYS = 50
_TWCS = (
    "compaction = {'class': 'TimeWindowCompactionStrategy', "
    "'compaction_window_unit': '%s', 'compaction_window_size': 1} AND gc_grace_seconds = 10800"
)
CHANGE_TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_change (inbox_id text, at_us bigint, uniq bigint, "
    "kind text, thread_ids frozen<list<text>>, message_id bigint, all_threads boolean, "
    "PRIMARY KEY ((inbox_id), at_us, uniq)) "
    f"WITH default_time_to_live = {RETENTION_S} AND " + _TWCS % "DAYS",
    "CREATE TABLE IF NOT EXISTS {ks}.inbox_change_feed (bucket bigint, shard int, "
    "at_us bigint, uniq bigint, inbox_ids frozen<list<text>>, "
    "PRIMARY KEY ((bucket, shard), at_us, uniq)) "
    f"WITH default_time_to_live = {FEED_TTL_S} AND " + _TWCS % "MINUTES",
)
_POSITION = re.compile(r"cq:(\d{20}):(\d{19})")
_KINDS: dict[str, ChangeKind] = {k: k for k in get_args(ChangeKind)}

Key = tuple[int, int]
"""A position as (at_us, uniq)."""


def _now_us() -> int:
    return time.time_ns() // 1_000


class _Clock:
    """The positions' microseconds: the wall clock, never repeating or going back within one
    process (a clock stepped back only delays readability; it never reorders an inbox)."""

    last = 0

    @classmethod
    def take(cls) -> int:
        cls.last = max(_now_us(), cls.last + 1)
        return cls.last


def _settled() -> Key:
    """The newest readable position, by this server's clock."""
    return _now_us() - SETTLE_US, _MAX_UNIQ


def _position(key: Key) -> str:
    return f"cq:{key[0]:020d}:{key[1]:019d}"


def _key(position: str) -> Key:
    found = _POSITION.fullmatch(position)
    if found is None:
        raise ValueError(f"not a change position of this engine: {position!r}")
    return int(found.group(1)), int(found.group(2))


def _changed(inbox_id: str, r: Row) -> LoggedChange:
    kind = _KINDS.get(text(r, "kind"))
    if kind is None:
        raise StorageCorrupt(f"cassandra: inbox_change.kind holds {r.get('kind')!r}")
    at = integer(r, "at_us")
    return LoggedChange(
        position=_position((at, integer(r, "uniq"))),
        changed_at_ms=at // 1_000,
        change=InboxChange(
            inbox_id=inbox_id,
            kind=kind,
            thread_ids=tuple(r.get("thread_ids") or ()),
            message_id=int(r.get("message_id") or 0),
            all_threads=bool(r.get("all_threads")),
        ),
    )


class CassandraInboxChanges:
    """The change log of `storage.cassandra.inbox.CassandraInboxStore` (a mixin): the
    Protocol's reads, and `_log_changes`, which every write path calls after its write."""

    _s: CassandraSession

    async def _stmt(self, cql: str) -> PreparedStatement:
        raise NotImplementedError

    async def _q(self, cql: str, params: Sequence[object], *, all_pages: bool = False) -> list[Row]:
        raise NotImplementedError

    async def _log_changes(self, changes: Iterable[InboxChange]) -> None:
        """Appends `changes` (in order within each inbox) after the write that made them.

        Changes with equal content share one row per inbox at one position, written with an
        ``IN`` list per replica-set group; the feed gets one row naming every inbox. When the
        whole append took longer than half the settle window it is written again, at a fresh
        position (module docstring)."""
        groups: dict[tuple[str, tuple[str, ...], int, bool], list[str]] = {}
        for c in changes:
            content = (c.kind, c.thread_ids, c.message_id, c.all_threads)
            groups.setdefault(content, []).append(c.inbox_id)
        if not groups:
            return
        inboxes = list(dict.fromkeys(i for ids in groups.values() for i in ids))
        row = await self._stmt(
            "UPDATE {ks}.inbox_change SET kind = ?, thread_ids = ?, message_id = ?, "
            "all_threads = ? WHERE inbox_id IN ? AND at_us = ? AND uniq = ?"
        )
        feed = await self._stmt(
            "INSERT INTO {ks}.inbox_change_feed (bucket, shard, at_us, uniq, inbox_ids) "
            "VALUES (?, ?, ?, ?, ?)"
        )
        replica_groups = {content: self._s.replica_groups(ids) for content, ids in groups.items()}
        for _ in range(_ATTEMPTS):
            started = time.monotonic()
            at = _Clock.take()
            uniq = random.getrandbits(62)  # + the group's index: in order within the append
            writes: list[tuple[PreparedStatement, tuple[Any, ...], str | None]] = [
                (feed, (at // _BUCKET_US, random.randrange(SHARDS), at, uniq, inboxes), None)
            ]
            for n, ((kind, threads, message_id, every), parts) in enumerate(replica_groups.items()):
                for part in parts:
                    for chunk in slices(part, _IN_KEYS):
                        params = (kind, list(threads), message_id, every, chunk, at, uniq + n)
                        writes.append((row, params, chunk[0]))
            await gather(self._s.run(s, p, routing_key=k) for s, p, k in writes)
            if time.monotonic() - started <= _LATE_S:
                return

    async def _log_delivered(self, thread_id: str, message_id: int, inboxes: Sequence[str]) -> None:
        await self._log_changes(
            InboxChange(
                inbox_id=i, kind="delivered", thread_ids=(thread_id,), message_id=message_id
            )
            for i in inboxes
        )

    async def _log_mark(
        self, inbox_id: str, thread_ids: Sequence[str] | None, *, read: bool
    ) -> None:
        kind: ChangeKind = "marked_read" if read else "marked_unread"
        threads = () if thread_ids is None else tuple(dict.fromkeys(thread_ids))
        every = thread_ids is None
        await self._log_changes(
            [InboxChange(inbox_id=inbox_id, kind=kind, thread_ids=threads, all_threads=every)]
        )

    # --- the Protocol's reads -------------------------------------------------------------

    async def read_changes(
        self, inbox_id: str, after: str | None, limit: int
    ) -> list[LoggedChange]:
        if not 1 <= limit <= _MAX_READ:
            raise ValueError(f"limit must be 1..{_MAX_READ}, not {limit}")
        low = (-1, 0) if after is None else _key(after)
        high = _settled()
        if low >= high:
            return []
        # Two multi-column slices: CQL refuses a single-column bound beside a tuple one.
        rows = await self._q(
            "SELECT at_us, uniq, kind, thread_ids, message_id, all_threads "
            "FROM {ks}.inbox_change WHERE inbox_id = ? AND (at_us, uniq) > (?, ?) "
            "AND (at_us, uniq) <= (?, ?) LIMIT ?",
            (inbox_id, *low, *high, limit),
            all_pages=True,
        )
        return [_changed(inbox_id, r) for r in rows]

    async def change_head(self) -> str:
        return _position(_settled())

    async def changed_inboxes(self, after: str | None, limit: int) -> tuple[list[str], str]:
        if after is None:
            return [], await self.change_head()
        low, high = _key(after), _settled()
        # Nothing older than the feed's TTL is kept: skip to what is.
        low = max(low, (high[0] - FEED_TTL_S * 1_000_000, _MAX_UNIQ))
        if low >= high:
            return [], after
        # The first second holding rows after `low` (none of its own second when it ends it).
        first = (low[0] + int(low[1] == _MAX_UNIQ)) // _BUCKET_US
        if high[0] // _BUCKET_US >= first + _BUCKETS_PER_CALL:
            high = ((first + _BUCKETS_PER_CALL) * _BUCKET_US - 1, _MAX_UNIQ)
        per_query = max(1, min(limit, 1_000))
        stmt = await self._stmt(
            "SELECT at_us, uniq, inbox_ids FROM {ks}.inbox_change_feed "
            "WHERE bucket = ? AND shard = ? AND (at_us, uniq) > (?, ?) "
            "AND (at_us, uniq) <= (?, ?) LIMIT ?"
        )
        parts = await gather(
            self._s.run(stmt, (bucket, shard, *low, *high, per_query))
            for bucket in range(first, high[0] // _BUCKET_US + 1)
            for shard in range(SHARDS)
        )
        # A partition that filled its LIMIT is complete only up to its last row.
        for part in parts:
            if len(part) >= per_query:
                high = min(high, (integer(part[-1], "at_us"), integer(part[-1], "uniq")))
        rows = sorted(
            ((integer(r, "at_us"), integer(r, "uniq")), list(r.get("inbox_ids") or ()))
            for part in parts
            for r in part
        )
        names: list[str] = []
        reached = high  # every row up to it read, unless `limit` stops the walk earlier
        for key, ids in rows:
            if key > high:
                break
            names += ids
            if len(names) >= limit:
                reached = key
                break
        return list(dict.fromkeys(names)), _position(max(reached, low))

    async def forget_changes(self, inbox_id: str) -> None:
        await self._q("DELETE FROM {ks}.inbox_change WHERE inbox_id = ?", (inbox_id,))

    async def trim_changes(self, before_ms: int) -> int:
        del before_ms  # rows expire after RETENTION_S by themselves (default_time_to_live)
        return 0

    def position_valid(self, position: str) -> bool:
        return _POSITION.fullmatch(position) is not None
