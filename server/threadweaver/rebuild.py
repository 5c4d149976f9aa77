"""Deletion from the union-find: a unified thread rebuilt from the edges that remain.

The mappings (thread -> UT, Message-ID -> UT, links) only ever grow, so they cannot say
which threads a removed thread was holding together. The edges can: every weave records
(thread, Message-ID) before it maps the thread (`ThreadStore.put_thread_messages`). A
rebuild of the conversations around some threads:

1. *closure*: from the seeds, walks links, reads every UT's member threads, their edges, and
   the UT of each edge's Message-ID, until no new UT appears (one round trip per step, about
   five steps for a star-complete component);
2. *retire*: marks every UT found retired, then reads the closure again (a weave that wrote
   into one of them before the mark is seen by this second read; one that writes after it
   sees the mark, `ThreadWeaverService.weave`, and rebuilds itself);
3. *recompute*: a union-find over the remaining threads and their messages; each component
   gets a fresh UT id (a hash of its members and the retired ids, never a ``gid/thread``
   id and never one used before);
4. *rewrite*: every remaining thread and message of the closure -> its component's UT, the
   removed threads' mappings and edges deleted, messages no remaining thread holds dropped,
   the retired UTs' links deleted;
5. *verify*: if one of the new ids was retired meanwhile (an overlapping rebuild), or a
   Message-ID that lost its mapping meanwhile was taken by a weave into another unified
   thread, go again (with that one in the closure).

Threads mapped without edges (by release 1.0.0, or loaded from a dump) cannot be split: a
closure holding one keeps its unified threads as they were, renamed (`_rename`), with only
the removed threads' own rows deleted (`Rebuilt.split` False).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from server.threadweaver.closure import walk
from server.threadweaver.graph import components
from storage.ports import MessageMapping, ThreadKey, ThreadStore

__all__ = ["ALL_THREADS", "Closure", "Rebuilt", "read_closure", "rebuild"]

ALL_THREADS = 1 << 30
"""`read_uts`' thread limit when every member is needed."""
MAX_ROUNDS = 8
"""Rebuild rounds before giving up on overlapping rebuilds (each round is exact; another
rebuild retiring our new ids mid-way is what forces one more)."""
_NO_LIMIT = 1 << 30
_STEP = 5_000  # mappings per rehome call


@dataclass(slots=True)
class Closure:
    """Everything a rebuild reads about the conversations around its seeds."""

    links: dict[str, frozenset[str]] = field(default_factory=dict)
    threads: set[ThreadKey] = field(default_factory=set)
    edges: dict[ThreadKey, dict[bytes, int]] = field(default_factory=dict)
    messages: dict[bytes, MessageMapping] = field(default_factory=dict)
    thread_uts: dict[ThreadKey, str] = field(default_factory=dict)
    rows_read: int = 0
    round_trips: int = 0


@dataclass(slots=True)
class Rebuilt:
    """What a rebuild did, for the operation's progress and the benchmark."""

    threads: int = 0
    """Remaining threads rewritten."""
    removed: int = 0
    """Removed threads deleted."""
    retired: set[str] = field(default_factory=set)
    """UT ids no row uses any more (their retired marks are dropped after a grace period)."""
    split: bool = True
    """False when a thread without edges (1.0.0's, or a loaded dump's) kept the closure from
    being split: its unified threads were renamed as they were (`_rename`)."""
    rows_read: int = 0
    round_trips: int = 0


async def read_closure(
    store: ThreadStore, seed_uts: Iterable[str], seed_threads: Iterable[ThreadKey]
) -> Closure:
    """Every UT, member thread, edge and message reachable from the seeds (see module doc)."""
    out = Closure()
    frontier = set(seed_uts)
    pending = set(seed_threads)
    while frontier or pending:
        if frontier:
            links = await walk(store, frontier, max_size=_NO_LIMIT)
            out.round_trips += 1
            fresh = sorted(links.keys() - out.links.keys())
            out.links.update(links)
            out.rows_read += sum(len(v) for v in links.values())
            if fresh:
                rows = await store.read_uts(fresh, None, ALL_THREADS)
                out.round_trips += 1
                out.rows_read += len(rows.threads)
                pending |= set(rows.threads) - out.threads
        frontier = set()
        if pending:
            batch = sorted(pending)
            pending = set()
            out.threads.update(batch)
            edges = await store.get_thread_messages(batch)
            uts = await store.get_thread_uts(batch)
            out.round_trips += 2
            out.edges.update(edges)
            out.thread_uts.update(uts)
            keys = {k for held in edges.values() for k in held} - out.messages.keys()
            found = await store.get_message_uts(sorted(keys)) if keys else {}
            out.round_trips += 1 if keys else 0
            out.rows_read += len(batch) + sum(len(v) for v in edges.values()) + len(found)
            out.messages.update(found)
            frontier = ({m.ut for m in found.values()} | set(uts.values())) - out.links.keys()
    return out


def _new_id(members: Collection[ThreadKey], retired: Collection[str]) -> str:
    """A fresh UT id: a hash of the component's threads and the ids it replaces.

    Holds no ``/`` (so never a `default_ut`) and no identifier; the retired ids in the hash
    make it differ from every id this component had before, even with the same members.
    """
    digest = hashlib.sha256()
    for t in sorted(members):
        digest.update(f"{len(t.gid)}:{t.gid}{len(t.thread_id)}:{t.thread_id}".encode())
    digest.update(b"\x00")
    for ut in sorted(retired):
        digest.update(f"{len(ut)}:{ut}".encode())
    return "u~" + digest.hexdigest()[:40]


async def rebuild(
    store: ThreadStore,
    *,
    seed_uts: Iterable[str] = (),
    seed_threads: Iterable[ThreadKey] = (),
    removed: Collection[ThreadKey] = (),
    progress: Callable[[int, int], None] | None = None,
) -> Rebuilt:
    """Removes `removed` and rebuilds every conversation around the seeds (module doc).

    Idempotent: a retry after a crash finds the closure in whatever state the crash left
    (the removed threads' edges go last with their mappings), and a repeat finds them gone.
    """
    async with _REBUILDS:
        return await _rebuild(store, seed_uts, seed_threads, set(removed), progress)


_REBUILDS = asyncio.Lock()
"""Rebuilds in one process run one at a time: two rebuilds that read overlapping closures
before either wrote could each finish clean yet leave the rows split between their ids.
Across processes only the retired-id check guards them (docs/ARCHITECTURE.md)."""


async def _rebuild(
    store: ThreadStore,
    seed_uts: Iterable[str],
    seed_threads: Iterable[ThreadKey],
    gone: set[ThreadKey],
    progress: Callable[[int, int], None] | None,
) -> Rebuilt:
    out = Rebuilt()
    uts = set(seed_uts)
    threads = set(seed_threads) | gone
    for _ in range(MAX_ROUNDS):
        first = await read_closure(store, uts, threads)
        _count(out, first)
        await store.retire_uts(sorted(first.links))
        now = await read_closure(store, first.links, first.threads)
        _count(out, now)
        extra = now.links.keys() - first.links.keys()
        if extra:
            await store.retire_uts(sorted(extra))
        taken: set[str] = set()
        if any(t not in now.edges for t in now.threads - gone):
            new_ids = await _rename(store, now, gone, out)
        else:
            new_ids, taken = await _rewrite(store, now, gone, out, progress)
        if not taken and not await store.get_retired(sorted(new_ids)):
            return out
        uts, threads = set(new_ids) | set(now.links) | taken, now.threads
    return out


def _count(out: Rebuilt, closure: Closure) -> None:
    out.rows_read += closure.rows_read
    out.round_trips += closure.round_trips


async def _rename(store: ThreadStore, c: Closure, gone: set[ThreadKey], out: Rebuilt) -> set[str]:
    """The fallback for threads without edges: nothing is split or recounted, but every
    unified thread of the closure is renamed (so no id made of a removed thread's gid is
    left) and the removed threads' own rows go. Its messages are read by UT."""
    out.split = False
    groups = components(c.links, c.links)
    remaining = sorted(t for t in c.threads - gone if c.thread_uts.get(t) in groups)
    members: dict[frozenset[str], list[ThreadKey]] = {g: [] for g in set(groups.values())}
    for t in remaining:
        members[groups[c.thread_uts[t]]].append(t)
    new = {g: _new_id(ts, g) for g, ts in members.items()}
    held = await store.get_ut_messages(sorted(c.links))
    out.round_trips += 1
    out.rows_read += len(held)
    moved: list[tuple[ThreadKey, str | None]] = [
        (t, new[groups[c.thread_uts[t]]]) for t in remaining
    ]
    for i in range(0, len(moved), _STEP):
        await store.rehome(moved[i : i + _STEP], [], [])
    messages = [
        MessageMapping(rfc_key=m.rfc_key, ut=new[groups[m.ut]], sent_at_ms=m.sent_at_ms)
        for m in held
        if m.ut in groups
    ]
    for i in range(0, len(messages), _STEP):
        await store.rehome([], messages[i : i + _STEP], [])
    await store.rehome([(t, None) for t in sorted(gone)], [], [])
    await store.remove_thread_messages(sorted(gone))
    await store.remove_links([(a, b) for a, linked in c.links.items() for b in linked if a < b])
    out.threads += len(remaining)
    out.removed = len(gone)
    out.retired |= set(c.links)
    return set(new.values())


async def _rewrite(
    store: ThreadStore,
    c: Closure,
    gone: set[ThreadKey],
    out: Rebuilt,
    progress: Callable[[int, int], None] | None,
) -> tuple[set[str], set[str]]:
    """Steps 3 and 4 of the module doc; the new UT ids, and the UTs that took a Message-ID
    of ours meanwhile (its component must then be rebuilt together with ours)."""
    remaining = sorted(c.threads - gone)
    graph: dict[str, set[str]] = {}
    for t in remaining:
        node = _thread_node(t)
        graph.setdefault(node, set()).update(_message_node(k) for k in c.edges.get(t, {}))
    groups = components(graph, graph)
    retired = sorted(c.links)
    ut_of_group: dict[frozenset[str], str] = {}
    by_group: dict[frozenset[str], list[ThreadKey]] = {}
    for t in remaining:
        by_group.setdefault(groups[_thread_node(t)], []).append(t)
    for group, members in by_group.items():
        ut_of_group[group] = _new_id(members, retired)
    kept: dict[bytes, MessageMapping] = {}
    moved: list[tuple[ThreadKey, str | None]] = []
    for t in remaining:
        ut = ut_of_group[groups[_thread_node(t)]]
        moved.append((t, ut))
        for key, sent in c.edges.get(t, {}).items():
            stored = c.messages.get(key)
            kept[key] = MessageMapping(
                rfc_key=key, ut=ut, sent_at_ms=stored.sent_at_ms if stored else sent
            )
    dropped = sorted({k for t in gone for k in c.edges.get(t, {})} - kept.keys())
    done = 0
    total = len(moved) + len(gone)
    for i in range(0, len(moved), _STEP):
        await store.rehome(moved[i : i + _STEP], [], [])
        done += len(moved[i : i + _STEP])
        if progress:
            progress(done, total)
    messages = [kept[k] for k in sorted(kept)]
    for i in range(0, len(messages), _STEP):
        await store.rehome([], messages[i : i + _STEP], [])
    # A Message-ID a remaining thread holds but no mapping had when the closure was read (a
    # rebuild before ours dropped it, while a weave was writing this thread's edge to it):
    # `rehome` rewrites existing mappings only, so it is mapped here, unless a weave mapped
    # it first, whose unified thread then joins ours in one more round.
    unmapped = [m for m in messages if m.rfc_key not in c.messages]
    taken: set[str] = set()
    for i in range(0, len(unmapped), _STEP):
        part = unmapped[i : i + _STEP]
        winners = await store.put_message_uts_if_absent(part)
        taken |= {w for m, w in zip(part, winners, strict=True) if w != m.ut}
    if dropped:
        # A weave through another server may have given a key a new home since the closure
        # was read (its own repair rebuild ran first): drop only keys still mapped to one of
        # the retired ids, or to none. What is left of the race is this one round trip.
        current = await store.get_message_uts(dropped)
        dropped = [k for k in dropped if k not in current or current[k].ut in c.links]
    # The removed threads go last: a retry after a crash still finds their edges.
    await store.rehome([(t, None) for t in sorted(gone)], [], dropped)
    await store.remove_thread_messages(sorted(gone))
    if progress:
        progress(total, total)
    await store.remove_links([(a, b) for a, linked in c.links.items() for b in linked if a < b])
    out.threads += len(remaining)
    out.removed = len(gone)
    out.retired |= set(c.links) - set(ut_of_group.values())
    return set(ut_of_group.values()), taken


def _thread_node(t: ThreadKey) -> str:
    return f"t\x00{t.gid}\x00{t.thread_id}"


def _message_node(key: bytes) -> str:
    return "m\x00" + key.hex()
