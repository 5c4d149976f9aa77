"""Streak's threadweaver: write-time O(1) unification of email threads across mailboxes.

For each message (thread t, Message-ID r), exactly the seed's algorithm:

    existing = UT(t)
    default  = existing or default_ut(t)   (the seed's "$gid:$threadId", made injective)
    ut_r     = set UT(r) = default   only if absent  -> the winner
    if existing is None:
        ut_t = set UT(t) = ut_r      only if absent  -> the winner
    else:
        ut_t = existing
    if ut_t != ut_r: record merge {ut_t, ut_r}

Both conditional writes are atomic per key in every engine, so any interleaving of
concurrent writers keeps the invariant "UT(t) and UT(r) are equal or linked" for every
message, hence the link graph's components are exactly the connected components of the
thread <-> Message-ID graph. A batch runs the same steps phase by phase (all thread lookups,
then all Message-ID writes, ...) so 1,000 messages cost a handful of store round trips.

Merges are recorded as links, and a merge that joins two components keeps the joined
component star-complete (`union.py`), so a read is thread -> UT -> the smallest UT -> every
member: four round trips, whatever the chain of merges (`closure.py`). A pair whose UTs are
already linked through a common UT (the usual case: the merge was recorded before) costs
no write at all.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from server.runtime.deadlines import concurrently
from server.runtime.errors import EngineRejected, NotFound, Unavailable
from server.runtime.logs import get_logger
from server.threadweaver.closure import read_component, walk
from server.threadweaver.graph import components, hint, missing_star_links
from server.threadweaver.model import Message, UnifiedThread, WeaveResult, default_ut, rfc_key
from server.threadweaver.rebuild import rebuild
from server.threadweaver.union import unite
from server.threadweaver.unweave import OperationView, Unweaving
from storage.ports import MessageMapping, ThreadKey, ThreadMessage, ThreadStore

__all__ = ["ThreadWeaverService"]

_log = get_logger("threadweaver")


class ThreadWeaverService:
    """The threadweaver algorithm over any `ThreadStore`."""

    def __init__(
        self,
        store: ThreadStore,
        *,
        max_closure: int = 10_000,
        max_threads: int = 10_000,
        retire_grace_s: float = 60.0,
    ) -> None:
        self._store = store
        self._max_closure = max_closure
        self._unweaving = Unweaving(store, max_threads=max_threads, grace_s=retire_grace_s)

    async def weave(self, messages: Sequence[Message]) -> list[WeaveResult]:
        """Weaves messages (any number of threads and Message-IDs); one result per message."""
        if not messages:
            return []
        store = self._store
        keys = [rfc_key(m) for m in messages]
        # The edges go first (beside the lookup): a deletion's rebuild works from them, and a
        # thread is never mapped before its edges are stored.
        existing, _ = await concurrently(
            store.get_thread_uts([m.thread for m in messages]),
            store.put_thread_messages(
                [
                    ThreadMessage(thread=m.thread, rfc_key=k, sent_at_ms=m.sent_at_ms)
                    for m, k in zip(messages, keys, strict=True)
                ]
            ),
        )
        message_uts = await store.put_message_uts_if_absent(
            [
                MessageMapping(
                    rfc_key=k,
                    ut=existing.get(m.thread) or default_ut(m.thread),
                    sent_at_ms=m.sent_at_ms,
                )
                for m, k in zip(messages, keys, strict=True)
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
        touched = set(thread_uts.values()) | set(message_uts)
        (canonical, linked), retired = await concurrently(
            self._join(touched, pairs), store.get_retired(sorted(touched))
        )
        if linked and not retired:
            # A deletion marks ids retired, then reads their links; so a weave must read the
            # marks after its own link writes. The read beside the join may have come first.
            retired = await store.get_retired(sorted(touched))
        per_thread = {t: canonical[ut] for t, ut in thread_uts.items()}
        if retired:
            # A deletion is rebuilding this conversation and may have read it before these
            # writes: rebuild it again with them (docs/ARCHITECTURE.md, "Unweaving").
            threads = sorted({m.thread for m in messages})
            done = await rebuild(store, seed_uts=touched, seed_threads=threads)
            self._unweaving.forget_later(done)
            now = await self.resolve(threads)
            per_thread.update((t, ut) for t, ut in zip(threads, now, strict=True) if ut)
        return [
            WeaveResult(unified_thread_id=per_thread[m.thread], merged=flag)
            for m, flag in zip(messages, merged_flags, strict=True)
        ]

    async def unweave_threads(self, threads: Sequence[ThreadKey]) -> OperationView:
        """Removes `threads` from the union-find (unknown ones are ignored); idempotent.

        Returns with every read exact (`server.threadweaver.unweave`), and the operation that
        reports when nothing of them is left."""
        return await self._unweaving.threads(threads, kind="unweave_threads")

    async def unweave_mailbox(self, gid: str) -> OperationView:
        """Removes every thread of mailbox `gid`: the subject erasure's entry point."""
        return await self._unweaving.mailbox(gid)

    def operation(self, operation_id: str) -> OperationView:
        """A removal's operation (NotFound when this server never started it)."""
        return self._unweaving.operation(operation_id)

    async def wait_operation(self, operation_id: str) -> OperationView:
        """Returns once the operation has finished (DONE or FAILED)."""
        return await self._unweaving.wait(operation_id)

    async def join(self, pairs: Collection[tuple[str, str]]) -> None:
        """Records that each pair of UTs is one conversation, as a weave that merged them
        would (components stay star-complete): a dump loaded into a store that already maps
        a key elsewhere unions the two conversations."""
        if pairs:
            await self._join({ut for pair in pairs for ut in pair}, pairs)

    async def _join(
        self, touched: set[str], pairs: Collection[tuple[str, str]]
    ) -> tuple[dict[str, str], bool]:
        """Records the merges not yet linked; each touched UT's canonical id (as now known),
        and whether any link was written.

        One read of the touched UTs' links answers both questions: a pair whose UTs share a
        linked UT is already one conversation (nothing to write), and in a star-complete
        component a UT's smallest link is the canonical id.
        """
        found = await self._store.get_links(sorted(touched))
        links = {ut: found.get(ut, frozenset()) for ut in touched}
        separate = [(a, b) for a, b in pairs if not ((links[a] | {a}) & (links[b] | {b}))]
        hints = {ut: hint(ut, links) for ut in touched}
        if not separate:
            return hints, False
        settled = await unite(self._store, separate, links, max_size=self._max_closure)
        return {ut: settled.get(ut) or settled.get(h) or h for ut, h in hints.items()}, True

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
        component = await read_component(
            self._store,
            ut,
            gids=team_gids,
            thread_limit=max_threads + 1,
            max_size=self._max_closure,
        )
        await self._repair(component.links)
        members = component.threads
        oversized = len(members) > max_threads
        return UnifiedThread(
            unified_thread_ids=sorted(component.links),
            threads=[] if oversized else members,
            thread_count=len(members),
            oversized=oversized,
            message_count=component.message_count,
            last_message_at_ms=component.last_message_at_ms,
        )

    async def resolve(self, threads: Sequence[ThreadKey]) -> list[str | None]:
        """The canonical unified thread id of each thread (None when never woven)."""
        found = await self._store.get_thread_uts(threads)
        links = await walk(self._store, set(found.values()), max_size=self._max_closure)
        await self._repair(links)
        groups = components(links)
        return [min(groups[found[t]]) if t in found else None for t in threads]

    async def _repair(self, links: Mapping[str, frozenset[str]]) -> None:
        """Completes any star a writer left unfinished (it crashed or gave up), best effort.

        The read that found it is exact either way; this only spares the next reads the
        extra levels. A failure here is logged, never returned: the answer is still right.
        """
        missing = [
            edge
            for group in set(components(links).values())
            for edge in missing_star_links(group, links)
        ]
        if not missing:
            return
        try:
            await self._store.add_links(missing)
        except (Unavailable, EngineRejected) as exc:
            _log.warning("threadweaver.repair_failed", links=len(missing), error=str(exc))
        else:
            _log.info("threadweaver.repaired", links=len(missing))
