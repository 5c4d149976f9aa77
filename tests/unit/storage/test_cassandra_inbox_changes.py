"""The Cassandra change log's tail (`changed_inboxes`) on a feed held in memory: the cases the
conformance suite cannot set up on a live cluster at will — a shard that fills its LIMIT, a
tail seconds or hours behind — each continued over successive calls with nothing skipped."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from storage.cassandra import inbox_changes as ic

NOW_US = 1_800_000_000_000_000


class _Feed:
    """The feed table: rows (at_us, uniq, inbox_ids) in (bucket, shard) partitions."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], list[tuple[int, int, list[str]]]] = {}
        self.queries = 0

    def add(self, at: int, uniq: int, ids: list[str], shard: int | None = None) -> None:
        part = (at // 1_000_000, random.randrange(ic.SHARDS) if shard is None else shard)
        self.rows.setdefault(part, []).append((at, uniq, ids))

    async def run(self, stmt: Any, params: Sequence[Any], **_: Any) -> list[dict[str, Any]]:
        bucket, shard, lo_at, lo_u, hi_at, hi_u, limit = params
        self.queries += 1
        hits = sorted(
            r for r in self.rows.get((bucket, shard), []) if (lo_at, lo_u) < r[:2] <= (hi_at, hi_u)
        )
        return [{"at_us": a, "uniq": u, "inbox_ids": ids} for a, u, ids in hits[:limit]]


class _Tail(ic.CassandraInboxChanges):
    def __init__(self, feed: _Feed) -> None:
        self._s = feed  # type: ignore[assignment]

    async def _stmt(self, cql: str) -> Any:
        return cql


@pytest.fixture
def feed(monkeypatch: pytest.MonkeyPatch) -> _Feed:
    monkeypatch.setattr(ic, "_now_us", lambda: NOW_US)
    return _Feed()


async def _drain(tail: _Tail, after: str, limit: int, calls: int = 1_000) -> list[str]:
    seen: list[str] = []
    for _ in range(calls):
        names, nxt = await tail.changed_inboxes(after, limit)
        assert len(names) == len(set(names))
        assert nxt >= after
        seen += names
        if nxt == after:
            return seen
        after = nxt
    raise AssertionError("the tail never caught up")


async def test_a_full_shard_is_read_up_to_its_last_row_and_continued(feed: _Feed) -> None:
    start = NOW_US - 3_000_000
    for n in range(50):
        feed.add(start + 10 * n, n, [f"i{n}"], shard=n % 2)
    tail = _Tail(feed)
    seen = await _drain(tail, ic._position((start - 1, 0)), limit=3)
    assert seen == [f"i{n}" for n in range(50)]


async def test_a_tail_far_behind_catches_up_in_bounded_calls(feed: _Feed) -> None:
    start = NOW_US - 40_000_000
    for n in range(39):
        feed.add(start + n * 1_000_000 + 7, n, [f"i{n}", "shared"])
    tail = _Tail(feed)
    names, nxt = await tail.changed_inboxes(ic._position((start - 1, 0)), 10_000)
    assert feed.queries <= ic.SHARDS * 5
    assert names[0] == "i0"
    assert "i10" not in names
    rest = await _drain(tail, nxt, 10_000)
    assert [n for n in names + rest if n != "shared"] == [f"i{n}" for n in range(39)]


async def test_nothing_older_than_the_feed_keeps_is_read(feed: _Feed) -> None:
    feed.add(NOW_US - 2_000_000, 1, ["recent"])
    tail = _Tail(feed)
    assert await _drain(tail, ic._position((0, 0)), 100) == ["recent"]
    # From where the feed's rows start to expire, each second's partitions read once.
    assert feed.queries <= (ic.FEED_TTL_S + 5) * ic.SHARDS


async def test_rows_not_settled_wait(feed: _Feed) -> None:
    feed.add(NOW_US - ic.SETTLE_US // 2, 1, ["late"])
    tail = _Tail(feed)
    head = await tail.change_head()
    assert await tail.changed_inboxes(head, 100) == ([], head)


def test_positions_sort_as_strings_as_they_do_as_numbers() -> None:
    keys = [(5, 9), (10, 0), (10, 1), (1 << 62, (1 << 63) - 1)]
    positions = [ic._position(k) for k in keys]
    assert sorted(positions) == positions
    assert all(ic._key(p) == k for p, k in zip(positions, keys, strict=True))
    with pytest.raises(ValueError, match="position"):
        ic._key("sq:12")
