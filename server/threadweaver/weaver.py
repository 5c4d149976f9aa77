"""Streak's threadweaver: write-time O(1) unification of email threads across mailboxes.

For each message (thread t, Message-ID r), exactly the seed's algorithm:

    existing = UT(t)
    default  = existing or "$gid:$threadId"
    ut_r     = set UT(r) = default   only if absent  -> the winner
    if existing is None:
        ut_t = set UT(t) = ut_r      only if absent  -> the winner
    else:
        ut_t = existing
    if ut_t != ut_r: record merge {ut_t, ut_r}

Both conditional writes are atomic per key in every engine, so any interleaving of
concurrent writers keeps the invariant "UT(t) and UT(r) are equal or merged" for every
message, hence the merge graph's components are exactly the connected components of the
thread <-> Message-ID graph. A batch runs the same steps phase by phase (all thread lookups,
then all Message-ID writes, ...) so 1,000 messages cost a handful of store round trips.

Reading a unified thread is the seed's: thread -> UT, the merge closure, UT -> threads.
"""

from __future__ import annotations

from collections.abc import Sequence

from server.runtime.errors import FailedPrecondition, NotFound
from server.threadweaver.closure import closures
from server.threadweaver.model import Message, UnifiedThread, WeaveResult, default_ut, rfc_key
from storage.ports import MessageMapping, ThreadKey, ThreadStore

__all__ = ["ThreadWeaver"]


class ThreadWeaver:
    """The threadweaver algorithm over any `ThreadStore`."""

    def __init__(self, store: ThreadStore, *, max_closure: int = 10_000) -> None:
        self._store = store
        self._max_closure = max_closure

    async def weave(self, messages: Sequence[Message]) -> list[WeaveResult]:
        """Weaves messages (any number of threads and Message-IDs); one result per message."""
        if not messages:
            return []
        store = self._store
        existing = await store.get_thread_uts([m.thread for m in messages])
        message_uts = await store.put_message_uts_if_absent(
            [
                MessageMapping(
                    rfc_key=rfc_key(m),
                    ut=existing.get(m.thread) or default_ut(m.thread),
                    sent_at_ms=m.sent_at_ms,
                )
                for m in messages
            ]
        )
        # New threads: map each (once) to its first message's UT, learning the winner.
        first_ut: dict[ThreadKey, str] = {}
        for m, ut_r in zip(messages, message_uts, strict=True):
            if m.thread not in existing:
                first_ut.setdefault(m.thread, ut_r)
        thread_uts = dict(existing)
        if first_ut:
            winners = await store.put_thread_uts_if_absent(list(first_ut.items()))
            thread_uts.update(zip(first_ut, winners, strict=True))
        merged_flags: list[bool] = []
        pairs: dict[tuple[str, str], None] = {}
        for m, ut_r in zip(messages, message_uts, strict=True):
            ut_t = thread_uts[m.thread]
            merged_flags.append(ut_t != ut_r)
            if ut_t != ut_r:
                pairs[(min(ut_t, ut_r), max(ut_t, ut_r))] = None
        if pairs:
            await store.add_merges(list(pairs))
        try:
            components = await closures(store, set(thread_uts.values()), max_size=self._max_closure)
        except FailedPrecondition:
            # An abused Message-ID merged too much to walk; the write itself succeeded, so
            # answer with each thread's own UT rather than fail an acknowledged write.
            components = {ut: frozenset([ut]) for ut in thread_uts.values()}
        canonical = _canonical_ids(components)
        return [
            WeaveResult(unified_thread_id=canonical[thread_uts[m.thread]], merged=flag)
            for m, flag in zip(messages, merged_flags, strict=True)
        ]

    async def unified_thread(
        self, thread: ThreadKey, *, team_gids: frozenset[str] | None, max_threads: int
    ) -> UnifiedThread:
        """The unified thread containing `thread`, filtered to `team_gids` when given.

        More than `max_threads` member threads (after the filter) means abused Message-IDs
        (the seed's spam guard): the thread is reported oversized and its members withheld.
        """
        found = await self._store.get_thread_uts([thread])
        ut = found.get(thread)
        if ut is None:
            raise NotFound(f"thread {thread.thread_id!r} of {thread.gid!r} was never woven")
        closure = sorted((await closures(self._store, [ut], max_size=self._max_closure))[ut])
        members = await self._store.get_threads_of(closure, team_gids, max_threads + 1)
        stats = await self._store.get_stats(closure)
        oversized = len(members) > max_threads
        return UnifiedThread(
            unified_thread_ids=closure,
            threads=[] if oversized else members,
            thread_count=len(members),
            oversized=oversized,
            message_count=stats.message_count,
            last_message_at_ms=stats.last_message_at_ms,
        )

    async def resolve(self, threads: Sequence[ThreadKey]) -> list[str | None]:
        """The canonical unified thread id of each thread (None when never woven)."""
        found = await self._store.get_thread_uts(threads)
        components = await closures(self._store, set(found.values()), max_size=self._max_closure)
        canonical = _canonical_ids(components)
        return [canonical[found[t]] if t in found else None for t in threads]


def _canonical_ids(components: dict[str, frozenset[str]]) -> dict[str, str]:
    """Each UT's canonical id (its component's smallest): one min() per component, not per UT.

    Members of one component share one frozenset object, whose hash Python caches.
    """
    smallest: dict[frozenset[str], str] = {}
    out: dict[str, str] = {}
    for ut, component in components.items():
        found = smallest.get(component)
        if found is None:
            found = smallest[component] = min(component)
        out[ut] = found
    return out
