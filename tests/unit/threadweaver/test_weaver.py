"""The threadweaver algorithm on the seed's scenarios, over the embedded SQLite engine.

The algorithm itself is engine-agnostic; it runs here over the embedded engine (a real
SQLite file, nothing faked) so each test reads like the seed's timeline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.runtime.errors import NotFound
from server.threadweaver.model import Message
from server.threadweaver.service import ThreadWeaverService
from storage.ports import ThreadKey
from storage.sqlite.threads import SqliteThreadStore


@pytest.fixture
async def weaver(tmp_path: Path) -> AsyncIterator[ThreadWeaverService]:
    store = await SqliteThreadStore.open(tmp_path / "tw.sqlite3", synchronous="NORMAL")
    yield ThreadWeaverService(store)
    await store.close()


def msg(gid: str, thread: str, rfc: str, at: int = 0) -> Message:
    return Message(ThreadKey(gid, thread), rfc, at)


async def members(weaver: ThreadWeaverService, gid: str, thread: str) -> set[tuple[str, str]]:
    view = await weaver.unified_thread(ThreadKey(gid, thread), team_gids=None, max_threads=100)
    return {(t.gid, t.thread_id) for t in view.threads}


class TestSeedScenarios:
    async def test_forward_chain_a_to_e_is_one_unified_thread(
        self, weaver: ThreadWeaverService
    ) -> None:
        """A sends to B, who forwards to C, ... to E: one unified thread of five threads."""
        timeline = [
            [msg("A", "111", "1"), msg("B", "222", "1")],
            [msg("B", "222", "2"), msg("C", "333", "2")],
            [msg("C", "333", "3"), msg("D", "444", "3")],
            [msg("D", "444", "4"), msg("E", "555", "4")],
        ]
        for step in timeline:
            for m in step:
                (result,) = await weaver.weave([m])
                assert result.unified_thread_id == "A/111"
                assert not result.merged
        expected = {("A", "111"), ("B", "222"), ("C", "333"), ("D", "444"), ("E", "555")}
        assert await members(weaver, "A", "111") == expected
        assert await members(weaver, "E", "555") == expected

    async def test_bob_joining_unifies_alice_and_charlie(self, weaver: ThreadWeaverService) -> None:
        """Alice (1,2,3) and Charlie (5,6,7) stay apart until Bob's thread holds 3 and 5."""
        await weaver.weave([msg("alice", "a", r) for r in ("1", "2", "3")])
        await weaver.weave([msg("charlie", "c", r) for r in ("5", "6", "7")])
        assert await members(weaver, "alice", "a") == {("alice", "a")}
        results = await weaver.weave([msg("bob", "b", "3"), msg("bob", "b", "5")])
        assert [r.merged for r in results] == [False, True]
        everyone = {("alice", "a"), ("bob", "b"), ("charlie", "c")}
        for gid, thread in everyone:
            assert await members(weaver, gid, thread) == everyone
        resolved = await weaver.resolve([ThreadKey(g, t) for g, t in sorted(everyone)])
        assert len(set(resolved)) == 1

    async def test_weaving_twice_changes_nothing(self, weaver: ThreadWeaverService) -> None:
        """Retrying a message returns the same result and adds no message to the stats."""
        first = await weaver.weave([msg("g", "t", "<x@y>", 10)])
        again = await weaver.weave([msg("g", "t", "<x@y>", 10)])
        assert first == again
        view = await weaver.unified_thread(ThreadKey("g", "t"), team_gids=None, max_threads=10)
        assert view.message_count == 1


class TestReads:
    async def test_stats_follow_every_participant_not_only_the_boxer(
        self, weaver: ThreadWeaverService
    ) -> None:
        """Stats count distinct Message-IDs woven by anyone and keep the latest send time."""
        await weaver.weave([msg("charlie", "box", "1", 100), msg("alice", "t", "1", 100)])
        # Charlie (who boxed it) drops off; Alice and Bob keep talking.
        await weaver.weave([msg("alice", "t", "2", 200), msg("bob", "u", "2", 200)])
        await weaver.weave([msg("bob", "u", "3", 300)])
        view = await weaver.unified_thread(
            ThreadKey("charlie", "box"), team_gids=None, max_threads=10
        )
        assert (view.message_count, view.last_message_at_ms) == (3, 300)

    async def test_team_filter_keeps_only_team_threads(self, weaver: ThreadWeaverService) -> None:
        """A team sees only its members' threads of the unified thread."""
        await weaver.weave([msg(g, f"t-{g}", "m") for g in ("a", "b", "outsider")])
        view = await weaver.unified_thread(
            ThreadKey("a", "t-a"), team_gids=frozenset({"a", "b"}), max_threads=10
        )
        assert [(t.gid, t.thread_id) for t in view.threads] == [("a", "t-a"), ("b", "t-b")]

    async def test_more_threads_than_the_guard_is_reported_oversized(
        self, weaver: ThreadWeaverService
    ) -> None:
        """A Message-ID reused by a spammer across many mailboxes trips the spam guard."""
        await weaver.weave([msg(f"user{i}", "t", "<fixed@spam>") for i in range(30)])
        view = await weaver.unified_thread(ThreadKey("user0", "t"), team_gids=None, max_threads=20)
        assert view.oversized
        assert view.threads == []
        assert view.thread_count == 21

    async def test_message_without_message_id_unifies_nothing(
        self, weaver: ThreadWeaverService
    ) -> None:
        """Messages with no Message-ID stay in their own thread and are each counted once."""
        await weaver.weave([msg("a", "t", "", 1), msg("a", "t", "", 2), msg("b", "u", "", 1)])
        await weaver.weave([msg("a", "t", "", 1)])  # a retry
        view = await weaver.unified_thread(ThreadKey("a", "t"), team_gids=None, max_threads=10)
        assert [(t.gid, t.thread_id) for t in view.threads] == [("a", "t")]
        assert view.message_count == 2

    async def test_unknown_thread_is_not_found(self, weaver: ThreadWeaverService) -> None:
        """Reading a thread that was never woven raises NotFound."""
        with pytest.raises(NotFound):
            await weaver.unified_thread(ThreadKey("nobody", "x"), team_gids=None, max_threads=10)
        assert await weaver.resolve([ThreadKey("nobody", "x")]) == [None]
