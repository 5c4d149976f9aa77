"""The ThreadStore contract, run unchanged against every engine."""

from __future__ import annotations

import asyncio
import hashlib
from typing import cast

from server.threadweaver.model import MAX_UT_BYTES, default_ut
from storage.ports import MessageMapping, ThreadKey, ThreadStore, UnifiedStats, UtRows


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

    async def test_a_batch_mixing_mapped_and_new_threads_keeps_request_order(
        self, thread_store: ThreadStore
    ) -> None:
        """Mapped threads keep their UT, new ones take theirs, answers in request order;
        a lookup of known and unknown threads returns only the known."""
        old = [ThreadKey(f"g{i % 3}", f"old-{i}") for i in range(300)]
        new = [ThreadKey(f"g{i % 3}", f"new-{i}") for i in range(300)]
        await thread_store.put_thread_uts_if_absent([(t, "before") for t in old])
        batch = [(t, f"ut-{t.thread_id}") for pair in zip(new, old, strict=True) for t in pair]
        winners = await thread_store.put_thread_uts_if_absent(batch)
        assert winners == ["before" if t.thread_id.startswith("old") else ut for t, ut in batch]
        unknown = [ThreadKey("g0", f"never-{i}") for i in range(5)]
        found = await thread_store.get_thread_uts([*old[:3], *unknown, new[0]])
        assert found == {old[0]: "before", old[1]: "before", old[2]: "before", new[0]: "ut-new-0"}

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
        first = await thread_store.put_message_uts_if_absent(
            [MessageMapping(rfc_key=key("m1"), ut="a", sent_at_ms=5)]
        )
        second = await thread_store.put_message_uts_if_absent(
            [MessageMapping(rfc_key=key("m1"), ut="b", sent_at_ms=9)]
        )
        assert (first, second) == (["a"], ["a"])

    async def test_concurrent_racers_on_one_message_see_exactly_one_winner(
        self, thread_store: ThreadStore
    ) -> None:
        """Racing writers of one Message-ID all learn the same single winner."""
        results = await asyncio.gather(
            *(
                thread_store.put_message_uts_if_absent(
                    [MessageMapping(rfc_key=key("hot"), ut=f"u{i}", sent_at_ms=i)]
                )
                for i in range(50)
            )
        )
        assert len({r[0] for r in results}) == 1

    async def test_same_message_twice_in_one_batch_gets_one_winner(
        self, thread_store: ThreadStore
    ) -> None:
        """Copies of one Message-ID in one call (one per mailbox) all get the same winner."""
        winners = await thread_store.put_message_uts_if_absent(
            [
                MessageMapping(rfc_key=key("m1"), ut="a", sent_at_ms=1),
                MessageMapping(rfc_key=key("m2"), ut="b", sent_at_ms=2),
                MessageMapping(rfc_key=key("m1"), ut="c", sent_at_ms=3),
            ]
        )
        assert winners[0] == winners[2]
        assert winners[0] in {"a", "c"}
        assert winners[1] == "b"

    async def test_a_batch_mixing_mapped_and_new_messages_keeps_request_order(
        self, thread_store: ThreadStore
    ) -> None:
        """Mapped Message-IDs keep their UT, new ones take theirs, in request order."""
        await thread_store.put_message_uts_if_absent(
            [MessageMapping(rfc_key=key(f"old{i}"), ut="before", sent_at_ms=i) for i in range(600)]
        )
        batch = [
            MessageMapping(rfc_key=key(f"{kind}{i}"), ut=f"{kind}-ut{i}", sent_at_ms=i)
            for i in range(600)
            for kind in ("new", "old")
        ]
        winners = await thread_store.put_message_uts_if_absent(batch)
        assert winners == [m.ut if m.ut.startswith("new") else "before" for m in batch]

    async def test_a_thousand_mappings_in_one_call(self, thread_store: ThreadStore) -> None:
        """A full WeaveMessages batch is one call and keeps request order."""
        items = [
            MessageMapping(rfc_key=key(f"m{i}"), ut=f"ut{i % 7}", sent_at_ms=i) for i in range(1000)
        ]
        assert await thread_store.put_message_uts_if_absent(items) == [m.ut for m in items]


class TestLinks:
    async def test_links_are_unordered_idempotent_and_complete(
        self, thread_store: ThreadStore
    ) -> None:
        """A link (a, b) makes each the other's; repeating it or (x, x) changes nothing."""
        await thread_store.add_links([("a", "b"), ("b", "a"), ("a", "c"), ("d", "d")])
        await thread_store.add_links([("a", "b")])
        found = await thread_store.get_links(["a", "b", "c", "d", "zzz"])
        assert found["a"] == {"b", "c"}
        assert found["b"] == {"a"}
        assert found["c"] == {"a"}
        assert not found.get("d")
        assert not found.get("zzz")

    async def test_removed_links_are_gone_for_every_client(
        self, thread_store: ThreadStore, thread_store_twin: ThreadStore
    ) -> None:
        """Removing (b, a) unlinks both ways; removing an absent link is no error."""
        await thread_store.add_links([("a", "b"), ("a", "c"), ("b", "c")])
        await thread_store.remove_links([("c", "b"), ("x", "y")])
        await thread_store.remove_links([("b", "c")])
        found = await thread_store_twin.get_links(["a", "b", "c"])
        assert found == {"a": {"b", "c"}, "b": {"a"}, "c": {"a"}}
        rows = await thread_store_twin.read_uts(["b", "c"], None, 0)
        assert (rows.links["b"], rows.links["c"]) == (frozenset({"a"}), frozenset({"a"}))

    async def test_ids_with_separators_and_unicode_link_without_colliding(
        self, thread_store: ThreadStore
    ) -> None:
        """UT ids hold any character but NUL: the "gid:thread" form stored before, and the
        escaped "gid/thread" form of up to 3,073 bytes made now."""
        odd = [
            "a:b:c",
            "a:b",
            "ü#/\\:ß",
            "x" * 512 + ":" + "y" * 512,
            "%3A" * 512 + "/" + "%25" * 512,
        ]
        await thread_store.add_links([(odd[0], u) for u in odd[1:]])
        found = await thread_store.get_links(odd)
        assert found[odd[0]] == set(odd[1:])
        assert all(found[u] == {odd[0]} for u in odd[1:])

    async def test_a_component_of_the_longest_ids_reads_whole(
        self, thread_store: ThreadStore
    ) -> None:
        """1,400 members with ~3 KB ids (the longest ids weaving makes) linked to one UT:
        4.3 MB of ids, more than one 4 MiB response holds: all written, all read back."""
        members = [default_ut(ThreadKey(":" * 508 + f"{i:04d}", "%" * 512)) for i in range(1400)]
        hub = default_ut(ThreadKey(":" * 512, "/" * 512))
        assert len(hub.encode()) == MAX_UT_BYTES
        assert min(len(m.encode()) for m in members) > 3000
        await thread_store.add_links([(hub, m) for m in members])
        assert (await thread_store.get_links([hub]))[hub] == set(members)
        rows = await thread_store.read_uts([hub, *members[:3]], None, 0)
        assert rows.links[hub] == set(members)
        assert all(rows.links[m] == {hub} for m in members[:3])

    async def test_concurrent_writers_of_one_ut_lose_no_link(
        self, thread_store: ThreadStore
    ) -> None:
        """Fifty tasks linking one UT at once: every link is there afterwards."""
        await asyncio.gather(
            *(thread_store.add_links([("hub", f"spoke-{i:02d}")]) for i in range(50))
        )
        found = await thread_store.get_links(["hub"])
        assert found["hub"] == {f"spoke-{i:02d}" for i in range(50)}

    async def test_a_thousand_links_of_one_ut_come_back_whole(
        self, thread_store: ThreadStore
    ) -> None:
        """The smallest UT of a big component is linked to every member: read them all."""
        members = [f"member-{i:04d}" for i in range(1000)]
        await thread_store.add_links([("hub", m) for m in members])
        rows = await thread_store.read_uts(["hub"], None, 0)
        assert rows.links["hub"] == set(members)
        assert (await thread_store.get_links(["hub"]))["hub"] == set(members)


class TestReadLevels:
    async def test_threads_of_uts_team_filtered_and_limited(
        self, thread_store: ThreadStore
    ) -> None:
        """UT -> threads honours the team; the limit returns exactly that many when more exist."""
        threads = [ThreadKey(f"g{i % 3}", f"t{i:02d}") for i in range(12)]
        await thread_store.put_thread_uts_if_absent(
            [(t, "ut-x" if i % 2 else "ut-y") for i, t in enumerate(threads)]
        )
        everyone = await thread_store.read_uts(["ut-x", "ut-y"], None, 100)
        assert sorted(everyone.threads) == sorted(threads)
        five = await thread_store.read_uts(["ut-x", "ut-y"], None, 5)
        assert len(five.threads) == 5
        assert set(five.threads) <= set(threads)
        team = await thread_store.read_uts(["ut-x"], frozenset({"g1"}), 100)
        assert sorted(team.threads) == sorted(
            t for i, t in enumerate(threads) if i % 2 and t.gid == "g1"
        )
        assert (await thread_store.read_uts(["ut-x"], frozenset(), 100)).threads == []
        assert (await thread_store.read_uts(["ut-x"], None, 0)).threads == []
        nobody = await thread_store.read_uts(["nobody"], None, 100)
        assert nobody == UtRows(
            links={"nobody": frozenset()}, threads=[], stats=UnifiedStats(0, None)
        )

    async def test_a_big_team_filters_exactly(self, thread_store: ThreadStore) -> None:
        """A team of 300 gids (beyond one range per gid) keeps only its members' threads."""
        threads = [ThreadKey(f"user-{i:03d}", "t") for i in range(400)]
        await thread_store.put_thread_uts_if_absent([(t, "ut-big") for t in threads])
        team = frozenset(f"user-{i:03d}" for i in range(0, 600, 2))
        rows = await thread_store.read_uts(["ut-big"], team, 10_000)
        assert sorted(rows.threads) == sorted(t for t in threads if t.gid in team)

    async def test_a_wide_unified_thread_reads_whole(self, thread_store: ThreadStore) -> None:
        """2,600 threads of ~1 KB ids (more than one 4 MiB response) in a UT of the longest
        id read whole, and limited."""
        wide = default_ut(ThreadKey(":" * 512, "%" * 512))
        threads = [ThreadKey(f"{i:04d}" + "g" * 500, "t" * 500) for i in range(2600)]
        for start in range(0, len(threads), 1000):
            chunk = threads[start : start + 1000]
            await thread_store.put_thread_uts_if_absent([(t, wide) for t in chunk])
        await thread_store.put_message_uts_if_absent(
            [MessageMapping(rfc_key=key(f"w{i}"), ut=wide, sent_at_ms=i) for i in range(1000)]
        )
        rows = await thread_store.read_uts([wide], None, 10_001)
        assert sorted(rows.threads) == threads
        assert rows.stats == UnifiedStats(1000, 999)
        team = frozenset(t.gid for t in threads[::100])
        assert sorted((await thread_store.read_uts([wide], team, 10_001)).threads) == [
            t for t in threads if t.gid in team
        ]
        assert len((await thread_store.read_uts([wide], None, 7)).threads) == 7

    async def test_one_message_per_call_still_reads_exactly(
        self, thread_store: ThreadStore
    ) -> None:
        """320 calls of one new thread and one new message each: every one counts once."""
        for i in range(320):
            await thread_store.put_thread_uts_if_absent([(ThreadKey("g", f"t{i:03d}"), "ut-slow")])
            await thread_store.put_message_uts_if_absent(
                [MessageMapping(rfc_key=key(f"slow{i}"), ut="ut-slow", sent_at_ms=i)]
            )
        for _ in range(2):  # the first read may tidy what it found; both must be exact
            rows = await thread_store.read_uts(["ut-slow"], None, 10_001)
            assert len(rows.threads) == len(set(rows.threads)) == 320
            assert rows.stats == UnifiedStats(320, 319)

    async def test_stats_count_distinct_messages_and_latest_send(
        self, thread_store: ThreadStore
    ) -> None:
        """Stats count each Message-ID once, keep the winner's sent_at, sum over UTs."""
        await thread_store.put_message_uts_if_absent(
            [
                MessageMapping(rfc_key=key("s1"), ut="ut-1", sent_at_ms=100),
                MessageMapping(rfc_key=key("s2"), ut="ut-1", sent_at_ms=300),
                MessageMapping(rfc_key=key("s3"), ut="ut-2", sent_at_ms=200),
                MessageMapping(
                    rfc_key=key("s1"), ut="ut-2", sent_at_ms=999
                ),  # loses: s1 already maps to ut-1
            ]
        )
        await thread_store.put_message_uts_if_absent(
            [MessageMapping(rfc_key=key("s2"), ut="ut-2", sent_at_ms=7)]
        )
        one = await thread_store.read_uts(["ut-1"], None, 0)
        assert one.stats == UnifiedStats(2, 300)
        both = await thread_store.read_uts(["ut-1", "ut-2"], None, 0)
        assert both.stats == UnifiedStats(3, 300)
        assert (await thread_store.read_uts(["ut-9"], None, 0)).stats == UnifiedStats(0, None)

    async def test_racing_writers_of_one_message_count_it_once(
        self, thread_store: ThreadStore
    ) -> None:
        """Fifty racers on one Message-ID: the winner's UT counts it once, nobody else does."""
        results = await asyncio.gather(
            *(
                thread_store.put_message_uts_if_absent(
                    [MessageMapping(rfc_key=key("race"), ut=f"u{i}", sent_at_ms=i)]
                )
                for i in range(50)
            )
        )
        (winner,) = {r[0] for r in results}
        rows = await thread_store.read_uts([f"u{i}" for i in range(50)], None, 0)
        assert rows.stats.message_count == 1
        assert (await thread_store.read_uts([winner], None, 0)).stats.message_count == 1


class TestTwoClients:
    """Two connections to one namespace, as two `loom serve` processes would have."""

    async def test_what_one_client_wrote_the_other_reads_at_once(
        self, thread_store: ThreadStore, thread_store_twin: ThreadStore
    ) -> None:
        """Mappings, links, threads and stats are visible to the other client on return."""
        t = ThreadKey("g", "t")
        assert await thread_store.put_thread_uts_if_absent([(t, "ut-a")]) == ["ut-a"]
        assert await thread_store_twin.put_thread_uts_if_absent([(t, "ut-b")]) == ["ut-a"]
        await thread_store.put_message_uts_if_absent(
            [MessageMapping(rfc_key=key("m"), ut="ut-a", sent_at_ms=42)]
        )
        await thread_store.add_links([("ut-a", "ut-z")])
        assert await thread_store_twin.get_thread_uts([t]) == {t: "ut-a"}
        assert (await thread_store_twin.get_links(["ut-z"]))["ut-z"] == {"ut-a"}
        rows = await thread_store_twin.read_uts(["ut-a"], None, 10)
        assert rows.links["ut-a"] == {"ut-z"}
        assert (rows.threads, rows.stats) == ([t], UnifiedStats(1, 42))

    async def test_racers_on_two_clients_see_one_winner(
        self, thread_store: ThreadStore, thread_store_twin: ThreadStore
    ) -> None:
        """Conditional writes stay exclusive across clients; concurrent links all land."""
        t = ThreadKey("race", "two")
        results = await asyncio.gather(
            *(
                (thread_store if i % 2 else thread_store_twin).put_thread_uts_if_absent(
                    [(t, f"ut-{i}")]
                )
                for i in range(40)
            ),
            *(
                (thread_store if i % 2 else thread_store_twin).add_links([("hub", f"s{i:02d}")])
                for i in range(40)
            ),
        )
        winners = [cast("list[str]", r) for r in results[:40]]  # gather's type joins both kinds
        assert len({w[0] for w in winners}) == 1
        assert (await thread_store.get_links(["hub"]))["hub"] == {f"s{i:02d}" for i in range(40)}
