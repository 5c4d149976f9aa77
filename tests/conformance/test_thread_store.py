"""The ThreadStore contract, run unchanged against every engine."""

from __future__ import annotations

import asyncio
import hashlib

from storage.ports import MessageMapping, ThreadKey, ThreadStore, UnifiedStats


def key(text: str) -> bytes:
    return hashlib.md5(text.encode()).digest()


class TestThreadMappings:
    async def test_unknown_threads_have_no_ut(self, thread_store: ThreadStore) -> None:
        """A thread never written maps to nothing."""
        assert await thread_store.get_thread_uts([ThreadKey("g", "t")]) == {}

    async def test_first_writer_wins_and_later_writers_learn_it(
        self, thread_store: ThreadStore
    ) -> None:
        """thread -> UT is written only if absent; a second write returns the first UT."""
        t = ThreadKey("gid-1", "thread-1")
        assert await thread_store.put_thread_uts_if_absent([(t, "ut-a")]) == ["ut-a"]
        assert await thread_store.put_thread_uts_if_absent([(t, "ut-b")]) == ["ut-a"]
        assert await thread_store.get_thread_uts([t]) == {t: "ut-a"}

    async def test_same_thread_twice_in_one_batch_gets_one_winner(
        self, thread_store: ThreadStore
    ) -> None:
        """Items naming the same thread in one call all get the same winner."""
        t, u = ThreadKey("g", "x"), ThreadKey("g", "y")
        winners = await thread_store.put_thread_uts_if_absent([(t, "a"), (u, "b"), (t, "c")])
        assert winners[0] == winners[2]
        assert winners[0] in {"a", "c"}
        assert winners[1] == "b"

    async def test_ids_with_separators_and_unicode_round_trip(
        self, thread_store: ThreadStore
    ) -> None:
        """Ids may hold ':', '#', '/', unicode and reach 512 bytes without colliding."""
        odd = [
            ThreadKey("a:b", "c"),
            ThreadKey("a", "b:c"),
            ThreadKey("ü#/\\", "ß" * 256),
            ThreadKey("x" * 512, "y" * 512),
        ]
        await thread_store.put_thread_uts_if_absent([(t, f"ut{i}") for i, t in enumerate(odd)])
        assert await thread_store.get_thread_uts(odd) == {t: f"ut{i}" for i, t in enumerate(odd)}

    async def test_concurrent_racers_on_one_thread_see_exactly_one_winner(
        self, thread_store: ThreadStore
    ) -> None:
        """Many tasks racing to map one thread: one value wins and every racer sees it."""
        t = ThreadKey("race", "thread")
        results = await asyncio.gather(
            *(thread_store.put_thread_uts_if_absent([(t, f"ut-{i}")]) for i in range(50))
        )
        winners = {r[0] for r in results}
        assert len(winners) == 1
        assert winners.pop() in {f"ut-{i}" for i in range(50)}


class TestMessageMappings:
    async def test_first_mapping_wins(self, thread_store: ThreadStore) -> None:
        """Message-ID -> UT is written only if absent."""
        first = await thread_store.put_message_uts_if_absent([MessageMapping(key("m1"), "a", 5)])
        second = await thread_store.put_message_uts_if_absent([MessageMapping(key("m1"), "b", 9)])
        assert (first, second) == (["a"], ["a"])

    async def test_concurrent_racers_on_one_message_see_exactly_one_winner(
        self, thread_store: ThreadStore
    ) -> None:
        """Racing writers of one Message-ID all learn the same single winner."""
        results = await asyncio.gather(
            *(
                thread_store.put_message_uts_if_absent([MessageMapping(key("hot"), f"u{i}", i)])
                for i in range(50)
            )
        )
        assert len({r[0] for r in results}) == 1

    async def test_a_thousand_mappings_in_one_call(self, thread_store: ThreadStore) -> None:
        """A full WeaveMessages batch is one call and keeps request order."""
        items = [MessageMapping(key(f"m{i}"), f"ut{i % 7}", i) for i in range(1000)]
        assert await thread_store.put_message_uts_if_absent(items) == [m.ut for m in items]


class TestMergesAndReverseLookups:
    async def test_merges_are_unordered_and_idempotent(self, thread_store: ThreadStore) -> None:
        """A merge (a, b) makes each the other's neighbour; repeating it changes nothing."""
        await thread_store.add_merges([("a", "b"), ("b", "a"), ("a", "c")])
        await thread_store.add_merges([("a", "b")])
        found = await thread_store.get_merge_neighbours(["a", "b", "c", "zzz"])
        assert found["a"] == {"b", "c"}
        assert found["b"] == {"a"}
        assert found["c"] == {"a"}
        assert not found.get("zzz")

    async def test_threads_of_uts_sorted_limited_and_team_filtered(
        self, thread_store: ThreadStore
    ) -> None:
        """UT -> threads returns (gid, thread_id) order, honours the limit and the team."""
        threads = [ThreadKey(f"g{i % 3}", f"t{i:02d}") for i in range(12)]
        await thread_store.put_thread_uts_if_absent(
            [(t, "ut-x" if i % 2 else "ut-y") for i, t in enumerate(threads)]
        )
        everyone = await thread_store.get_threads_of(["ut-x", "ut-y"], None, 100)
        assert everyone == sorted(threads)
        assert await thread_store.get_threads_of(["ut-x", "ut-y"], None, 5) == sorted(threads)[:5]
        team = await thread_store.get_threads_of(["ut-x"], frozenset({"g1"}), 100)
        assert team == sorted(t for i, t in enumerate(threads) if i % 2 and t.gid == "g1")
        assert await thread_store.get_threads_of(["ut-x"], frozenset(), 100) == []
        assert await thread_store.get_threads_of(["nobody"], None, 100) == []

    async def test_stats_count_distinct_messages_and_latest_send(
        self, thread_store: ThreadStore
    ) -> None:
        """Stats count each Message-ID once and keep the winner's sent_at."""
        await thread_store.put_message_uts_if_absent(
            [
                MessageMapping(key("s1"), "ut-1", 100),
                MessageMapping(key("s2"), "ut-1", 300),
                MessageMapping(key("s3"), "ut-2", 200),
                MessageMapping(key("s1"), "ut-2", 999),  # loses: s1 already maps to ut-1
            ]
        )
        assert await thread_store.get_stats(["ut-1"]) == UnifiedStats(2, 300)
        assert await thread_store.get_stats(["ut-1", "ut-2"]) == UnifiedStats(3, 300)
        assert await thread_store.get_stats(["ut-9"]) == UnifiedStats(0, None)
