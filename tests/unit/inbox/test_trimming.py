"""Probabilistic trim scheduling with a seeded RNG, and the choice of rows to trim."""

from __future__ import annotations

import random
from typing import cast

from server.inbox.trimming import Trimmer, sample_indexes, trim_victims
from storage.ports import InboxEntry, InboxStore

# Scheduling never touches the store (only the workers do, and they are not started).
UNUSED_STORE = cast("InboxStore", object())


def trimmer(p: float, *, queue: int = 100_000, seed: int = 7) -> Trimmer:
    return Trimmer(
        UNUSED_STORE,
        max_entries=5000,
        probability=p,
        queue_size=queue,
        workers=1,
        scan_limit=20_000,
        rng=random.Random(seed),
    )


class TestSampleIndexes:
    def test_rate_matches_probability(self) -> None:
        """Over 200,000 draws the chosen fraction is p within a few standard deviations."""
        rng = random.Random(1)
        for p in (0.01, 0.02, 0.05, 0.5):
            chosen = sample_indexes(200_000, p, rng)
            sd = (200_000 * p * (1 - p)) ** 0.5
            assert abs(len(chosen) - 200_000 * p) < 5 * sd

    def test_indexes_are_distinct_sorted_and_in_range(self) -> None:
        """Geometric skipping yields increasing indexes inside range(n)."""
        chosen = sample_indexes(10_000, 0.1, random.Random(3))
        assert chosen == sorted(set(chosen))
        assert all(0 <= i < 10_000 for i in chosen)

    def test_edges(self) -> None:
        """p = 0 picks nothing, p = 1 picks everything, n = 0 picks nothing."""
        rng = random.Random(0)
        assert sample_indexes(100, 0.0, rng) == []
        assert sample_indexes(100, 1.0, rng) == list(range(100))
        assert sample_indexes(0, 0.5, rng) == []

    def test_seeded_rng_is_reproducible(self) -> None:
        """The same seed schedules the same trims (tests can rely on it)."""
        assert sample_indexes(5000, 0.02, random.Random(9)) == sample_indexes(
            5000, 0.02, random.Random(9)
        )


class TestScheduling:
    def test_one_inbox_delivered_to_n_times_is_scheduled_about_np_times(self) -> None:
        """50,000 deliveries at p = 0.02 ask for ~1,000 trims (queue drained in between)."""
        t = trimmer(0.02)
        asked = 0
        for _ in range(50_000):
            if t.on_delivered(["hot"]):
                asked += 1
                t._pending.clear()  # stands in for a worker finishing the trim
        assert 850 < asked < 1150

    def test_pending_trims_are_deduplicated_per_inbox(self) -> None:
        """A second request for an inbox already queued is ignored."""
        t = trimmer(1.0)
        assert t.on_delivered(["a", "b", "a"]) == 2
        assert t.pending == 2
        assert t.request("a") is False

    def test_full_queue_drops_requests_instead_of_growing(self) -> None:
        """The trim queue is bounded: overflow is counted and dropped."""
        t = trimmer(1.0, queue=3)
        assert t.on_delivered([f"i{n}" for n in range(10)]) == 3
        assert t.dropped == 7
        assert t.pending == 3

    def test_a_large_fanout_schedules_a_small_fraction(self) -> None:
        """A 300,000-inbox announcement queues ~p of its inboxes, not all of them."""
        t = trimmer(0.02)
        scheduled = t.on_delivered([f"u{i}" for i in range(300_000)])
        assert 5400 < scheduled < 6600


class TestVictims:
    def test_oldest_rows_beyond_the_cap_are_chosen(self) -> None:
        """The cap keeps the newest activity; the rest is trimmed."""
        entries = [
            InboxEntry(thread_id=f"t{m}", last_message_id=m, is_read=m % 2 == 0)
            for m in range(1, 11)
        ]
        random.Random(4).shuffle(entries)
        victims = trim_victims(entries, 7)
        assert sorted(v.last_message_id for v in victims) == [1, 2, 3]

    def test_nothing_to_trim_at_or_below_the_cap(self) -> None:
        """An inbox at the cap is left alone."""
        entries = [
            InboxEntry(thread_id=f"t{m}", last_message_id=m, is_read=False) for m in range(5)
        ]
        assert trim_victims(entries, 5) == []
