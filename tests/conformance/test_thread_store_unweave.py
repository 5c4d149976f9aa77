"""Deletion from the union-find, on every ThreadStore engine: the port's new methods, and a
property test of the domain's rebuild against a union-find oracle.

The property test weaves, then weaves more while it unweaves other threads concurrently
(several tasks on one store, and a second connection), and checks every read against a
union-find over the messages of the threads that remain.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections.abc import Sequence
from typing import Any, cast

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from server.runtime.errors import NotFound
from server.threadweaver.model import Message, rfc_key
from server.threadweaver.service import ThreadWeaverService
from server.threadweaver.unweave import OperationView
from storage.ports import MessageMapping, ThreadKey, ThreadMessage, ThreadStore


def key(text: str) -> bytes:
    return hashlib.md5(text.encode()).digest()


class TestEdgesAndRehoming:
    async def test_edges_are_read_back_per_thread_and_listed_per_mailbox(
        self, thread_store: ThreadStore
    ) -> None:
        """Edges are idempotent, read back per thread; a mailbox lists its threads once."""
        a, b, c = ThreadKey("g1", "a"), ThreadKey("g1", "b"), ThreadKey("g2", "c")
        edges = [
            ThreadMessage(thread=a, rfc_key=key("m1"), sent_at_ms=10),
            ThreadMessage(thread=a, rfc_key=key("m2"), sent_at_ms=20),
        ]
        edges += [
            ThreadMessage(thread=b, rfc_key=key("m2"), sent_at_ms=20),
            ThreadMessage(thread=c, rfc_key=key("m3"), sent_at_ms=30),
        ]
        await thread_store.put_thread_messages(edges)
        await thread_store.put_thread_messages(edges[:2])
        found = await thread_store.get_thread_messages([a, b, ThreadKey("g1", "none")])
        assert found == {a: {key("m1"): 10, key("m2"): 20}, b: {key("m2"): 20}}
        assert sorted(await thread_store.get_mailbox_threads("g1")) == [a, b]
        assert await thread_store.get_mailbox_threads("nobody") == []
        await thread_store.remove_thread_messages([a, ThreadKey("g9", "x")])
        assert await thread_store.get_thread_messages([a, b]) == {b: {key("m2"): 20}}
        assert await thread_store.get_mailbox_threads("g1") == [b]

    async def test_a_thread_mapped_without_edges_is_listed_under_its_mailbox(
        self, thread_store: ThreadStore
    ) -> None:
        """A thread mapped with no edges (a loaded dump's) is still found by its owner."""
        t = ThreadKey("loaded", "t1")
        await thread_store.put_thread_uts_if_absent([(t, "ut")])
        assert await thread_store.get_mailbox_threads("loaded") == [t]
        assert await thread_store.get_thread_messages([t]) == {}
        await thread_store.rehome([(t, None)], [], [])
        await thread_store.remove_thread_messages([t])
        assert await thread_store.get_mailbox_threads("loaded") == []

    async def test_rehome_moves_and_removes_mappings_with_their_reverse_rows(
        self, thread_store: ThreadStore
    ) -> None:
        """Rewritten mappings move members and stats to the new UT; removed ones vanish."""
        a, b = ThreadKey("g", "a"), ThreadKey("g", "b")
        await thread_store.put_thread_uts_if_absent([(a, "old"), (b, "old")])
        await thread_store.put_message_uts_if_absent(
            [
                MessageMapping(rfc_key=key("m1"), ut="old", sent_at_ms=5),
                MessageMapping(rfc_key=key("m2"), ut="old", sent_at_ms=9),
            ]
        )
        never = ThreadKey("g", "never")
        await thread_store.rehome(
            [(a, "new"), (b, None), (never, "new")],
            [
                MessageMapping(rfc_key=key("m1"), ut="new", sent_at_ms=5),
                MessageMapping(rfc_key=key("m-never"), ut="new", sent_at_ms=1),
            ],
            [key("m2")],
        )
        assert await thread_store.get_thread_uts([a, b, never]) == {a: "new"}
        assert await thread_store.get_message_uts([key("m1"), key("m2"), key("m-never")]) == {
            key("m1"): MessageMapping(rfc_key=key("m1"), ut="new", sent_at_ms=5)
        }
        new = await thread_store.read_uts(["new"], None, 10)
        old = await thread_store.read_uts(["old"], None, 10)
        assert (new.threads, new.stats.message_count, new.stats.last_message_at_ms) == (
            [a],
            1,
            5,
        )
        assert (old.threads, old.stats.message_count) == ([], 0)
        assert await thread_store.get_ut_messages(["new", "old", "none"]) == [
            MessageMapping(rfc_key=key("m1"), ut="new", sent_at_ms=5)
        ]
        # Idempotent, and a removed thread can be woven again from scratch.
        await thread_store.rehome([(b, None)], [], [key("m2")])
        assert await thread_store.put_thread_uts_if_absent([(b, "again")]) == ["again"]

    async def test_retired_marks_are_set_read_and_forgotten(
        self, thread_store: ThreadStore
    ) -> None:
        """Retired marks: idempotent, read back for the asked UTs only, then forgotten."""
        assert await thread_store.get_retired(["x", "y"]) == frozenset()
        await thread_store.retire_uts(["x", "z"])
        await thread_store.retire_uts(["x"])
        assert await thread_store.get_retired(["x", "y", "z"]) == frozenset({"x", "z"})
        await thread_store.forget_retired(["x"])
        assert await thread_store.get_retired(["x", "z"]) == frozenset({"z"})
        await thread_store.scrub()


def _message(gid: int, thread: int, msg: int, tag: str) -> Message:
    return Message(ThreadKey(f"{tag}g{gid}", f"t{thread}"), f"<{tag}m{msg}@x>", 1000 + msg)


class _Oracle:
    """Union-find over threads and the messages they hold."""

    def __init__(self, messages: list[Message]) -> None:
        self.parent: dict[object, object] = {}
        for m in messages:
            self._union(m.thread, m.rfc_message_id)

    def _find(self, x: object) -> object:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            x = self.parent[x]
        return x

    def _union(self, a: object, b: object) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self.parent[ra] = rb

    def groups(self, threads: list[ThreadKey]) -> set[frozenset[ThreadKey]]:
        out: dict[object, set[ThreadKey]] = {}
        for t in threads:
            out.setdefault(self._find(t), set()).add(t)
        return {frozenset(g) for g in out.values()}


corpus = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 7)), min_size=2, max_size=24
)


_GRACE_S = 2.0


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    raw=corpus,
    removed_raw=st.sets(st.integers(0, 23), min_size=1, max_size=3),
    rng=st.randoms(use_true_random=False),
)
@example(  # alice -m1- bob -m2- carol: removing bob splits them
    raw=[(0, 0, 0), (1, 0, 0), (1, 0, 1), (2, 0, 1), (0, 0, 5), (2, 0, 6)],
    removed_raw={1},
    rng=random.Random(0),
)
async def test_unweaving_concurrently_with_weaves_matches_union_find(
    thread_store: ThreadStore,
    thread_store_twin: ThreadStore,
    raw: list[tuple[int, int, int]],
    removed_raw: set[int],
    rng: random.Random,
) -> None:
    """Weave, then unweave some threads while weaving into the others, concurrently on two
    connections: every read agrees with a union-find over the remaining messages."""
    tag = f"{uuid.uuid4().hex[:10]}-"  # the store is shared by every example
    messages = [_message(g, t, m, tag) for g, t, m in raw]
    removed = {messages[i % len(messages)].thread for i in removed_raw}
    first, later = messages[: 2 * len(messages) // 3], messages[2 * len(messages) // 3 :]
    later = [m for m in later if m.thread not in removed]
    # The marks outlive every weave in flight, as in serving (where a weave's deadline bounds
    # it); forgetting them sooner lets a weave that read a retired id miss the mark. Here no
    # deadline bounds a weave, and one stalled 0.5 s on a busy machine: 2 s covers it.
    one = ThreadWeaverService(thread_store, retire_grace_s=_GRACE_S)
    two = ThreadWeaverService(thread_store_twin, retire_grace_s=_GRACE_S)
    await one.weave(first)
    order: list[Message | None] = [None, *later]
    rng.shuffle(order)  # before any coroutine exists: Hypothesis may stop the example here
    results = await asyncio.gather(
        *(
            one.unweave_threads(sorted(removed))
            if m is None
            else (one if i % 2 else two).weave([m])
            for i, m in enumerate(order)
        )
    )
    for result in results:
        if isinstance(result, OperationView):
            await one.wait_operation(result.operation_id)
    remaining = [m for m in first if m.thread not in removed] + later
    threads = sorted({m.thread for m in remaining})
    expected = _Oracle(remaining).groups(threads)
    resolved = await one.resolve(threads)
    got: dict[str, set[ThreadKey]] = {}
    for t, ut in zip(threads, resolved, strict=True):
        assert ut is not None, t
        got.setdefault(ut, set()).add(t)
    assert {frozenset(g) for g in got.values()} == expected
    for group in expected:
        some = min(group)
        view = await one.unified_thread(some, team_gids=None, max_threads=10_000)
        assert set(view.threads) == group
        ids = {m.rfc_message_id for m in remaining if m.thread in group}
        assert view.message_count == len(ids)
        assert view.last_message_at_ms == max(m.sent_at_ms for m in remaining if m.thread in group)
    for t in removed - {m.thread for m in remaining}:
        assert await one.resolve([t]) == [None]
        try:
            await one.unified_thread(t, team_gids=None, max_threads=10)
        except NotFound:
            pass
        else:
            raise AssertionError(f"{t} still woven")


class _LinksHeld:
    """A real ThreadStore whose `add_links` waits until released: it holds a weave between
    its merge's link write and the rest of the weave, so a deletion can run in that gap."""

    def __init__(self, store: ThreadStore) -> None:
        self._store = store
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def add_links(self, links: Sequence[tuple[str, str]]) -> None:
        self.reached.set()
        await self.release.wait()
        await self._store.add_links(links)


async def test_a_merge_whose_links_land_after_a_deletion_marked_them_is_rebuilt(
    thread_store: ThreadStore, thread_store_twin: ThreadStore
) -> None:
    """A weave that merges a thread into a conversation writes the merge's link; a deletion
    rebuilding that conversation marks its ids retired, then reads its links. When the link
    lands after that read, the weave must see the mark (read after its write) and rebuild:
    otherwise the thread stays joined to a retired, empty id, apart from its conversation."""
    tag = f"{uuid.uuid4().hex[:10]}-"
    keep, gone, late = (ThreadKey(f"{tag}g{i}", "t") for i in range(3))
    one = ThreadWeaverService(thread_store, retire_grace_s=0.5)
    held = _LinksHeld(thread_store_twin)
    two = ThreadWeaverService(cast(ThreadStore, held), retire_grace_s=0.5)
    first = [(keep, "m1"), (gone, "m1"), (late, "m9")]
    await one.weave([Message(t, f"<{tag}{m}>", i) for i, (t, m) in enumerate(first)])
    weaving = asyncio.create_task(two.weave([Message(late, f"<{tag}m1>", 4)]))
    await asyncio.wait_for(held.reached.wait(), 30)
    op = await one.unweave_threads([gone])
    held.release.set()
    [result] = await weaving
    assert result.merged
    await one.wait_operation(op.operation_id)
    kept, joined = await one.resolve([keep, late])
    assert kept == joined
    assert result.unified_thread_id == kept
    view = await one.unified_thread(keep, team_gids=None, max_threads=10)
    assert set(view.threads) == {keep, late}
    assert view.message_count == 2


async def test_a_unified_thread_past_the_guard_is_rebuilt_in_the_background(
    thread_store: ThreadStore,
) -> None:
    """Past the spam guard the call answers with a running operation: the removed thread is
    gone from every read at once, and once DONE the rest is split and recounted."""
    tag = f"{uuid.uuid4().hex[:10]}-"
    weaver = ThreadWeaverService(thread_store, max_threads=4, retire_grace_s=0)
    chain = [ThreadKey(f"{tag}g{i}", "t") for i in range(9)]
    await weaver.weave(
        [Message(t, f"<{tag}m{i + j}>", 100 + i + j) for i, t in enumerate(chain) for j in (0, 1)]
    )
    middle = chain[4]
    op = await weaver.unweave_threads([middle])
    assert op.state == "running"
    assert await weaver.resolve([middle]) == [None]
    view = await weaver.unified_thread(chain[0], team_gids=None, max_threads=100)
    assert middle not in view.threads
    done = await weaver.wait_operation(op.operation_id)
    assert done.state == "done"
    assert done.done == done.total
    left, right = chain[:4], chain[5:]
    resolved = await weaver.resolve(left + right)
    assert len(set(resolved[:4])) == 1
    assert len(set(resolved[4:])) == 1
    assert resolved[0] != resolved[4]
    first = await weaver.unified_thread(chain[0], team_gids=None, max_threads=100)
    assert first.threads == sorted(left)
    assert first.message_count == 5  # m0..m4: m4 is still held by chain[3]


async def test_a_removal_stopped_after_its_mappings_went_resumes_on_retry(
    thread_store: ThreadStore,
) -> None:
    """A background removal that failed after deleting the mappings (the engine went away)
    leaves the edges: retrying the call rebuilds the conversation from them."""
    tag = f"{uuid.uuid4().hex[:10]}-"
    weaver = ThreadWeaverService(thread_store, retire_grace_s=0)
    a, b, c = (ThreadKey(f"{tag}{n}", "t") for n in ("alice", "bob", "carol"))
    await weaver.weave(
        [Message(a, "<m1>", 1), Message(b, "<m1>", 1), Message(b, "<m2>", 2), Message(c, "<m2>", 2)]
    )
    await thread_store.rehome([(b, None)], [], [])  # what the stopped removal had done
    op = await weaver.unweave_threads([b])
    await weaver.wait_operation(op.operation_id)
    ua, uc = await weaver.resolve([a, c])
    assert ua != uc
    assert await thread_store.get_thread_messages([b]) == {}


async def test_a_weave_that_wrote_into_a_retired_unified_thread_rehomes_its_rows(
    thread_store: ThreadStore,
) -> None:
    """A weave that read a UT id before a rebuild retired it writes its rows there (here
    written as it would, after the rebuild); its check of the retired marks sees the mark
    and rebuilds, so the thread and its message end up in a live unified thread."""
    tag = f"{uuid.uuid4().hex[:10]}-"
    weaver = ThreadWeaverService(thread_store, retire_grace_s=3600)
    a, b, c = (ThreadKey(f"{tag}{n}", "t") for n in ("alice", "bob", "carol"))
    await weaver.weave(
        [Message(a, "<m1>", 1), Message(b, "<m1>", 1), Message(b, "<m2>", 2), Message(c, "<m2>", 2)]
    )
    old = (await thread_store.get_thread_uts([c]))[c]
    await weaver.unweave_threads([b])
    assert await thread_store.get_retired([old]) == frozenset({old})
    # What a slow weave of (dave, <m9>) that had read carol's old UT leaves behind:
    dave = ThreadKey(f"{tag}dave", "t")
    probe = Message(dave, f"<{tag}m9>", 9)
    await thread_store.put_thread_messages(
        [ThreadMessage(thread=dave, rfc_key=rfc_key(probe), sent_at_ms=9)]
    )
    await thread_store.put_message_uts_if_absent(
        [MessageMapping(rfc_key=rfc_key(probe), ut=old, sent_at_ms=9)]
    )
    await thread_store.put_thread_uts_if_absent([(dave, old)])
    (result,) = await weaver.weave([probe])  # its retry, or its own check of the marks
    assert result.unified_thread_id != old
    view = await weaver.unified_thread(dave, team_gids=None, max_threads=10)
    assert view.unified_thread_ids == [result.unified_thread_id]
    assert view.threads == [dave]
    assert view.message_count == 1


async def test_threads_without_edges_are_renamed_not_split(thread_store: ThreadStore) -> None:
    """Threads mapped without edges (1.0.0's, a loaded dump's) cannot be split: removing a
    thread deletes its rows, keeps the rest as one conversation with its stats, and
    renames it, so no unified thread id made of the removed gid is left."""
    tag = f"{uuid.uuid4().hex[:10]}-"
    weaver = ThreadWeaverService(thread_store, retire_grace_s=0)
    bob, alice, carol = (ThreadKey(f"{tag}{n}", "t") for n in ("bob", "alice", "carol"))
    await weaver.weave([Message(bob, "<m1>", 1), Message(bob, "<m2>", 2)])
    await weaver.weave([Message(alice, "<m1>", 1), Message(carol, "<m2>", 2)])
    await weaver.weave([Message(alice, "<m3>", 3)])
    await thread_store.remove_thread_messages([bob, alice, carol])  # as 1.0.0 wove them
    op = await weaver.unweave_threads([bob])
    await weaver.wait_operation(op.operation_id)
    assert await weaver.resolve([bob]) == [None]
    view = await weaver.unified_thread(alice, team_gids=None, max_threads=10)
    assert view.threads == sorted([alice, carol])
    assert view.message_count == 3
    assert all(bob.gid not in ut for ut in view.unified_thread_ids)
    uts = await thread_store.get_thread_uts([alice, carol])
    held = await thread_store.get_ut_messages(sorted(set(uts.values())))
    assert len(held) == 3
