"""Joining unified threads at write time, so that later reads stay three levels deep.

When a message finds its thread and its Message-ID on two UTs that are not yet connected,
the seed records a merge. Here the merge is a link, and the joined component is then made
star-complete again: every member linked to the component's smallest UT (union by
smallest id; the links are the union-find's parent pointers, compressed to one hop, and
the smallest UT's links are its member list).

    1. plan     read the links of each side's smallest-known UT (its star: the members)
    2. write    the merge links and (smallest, member) for every member not linked yet
    3. verify   walk the component again from its smallest UT; anything missing (a member
                joined concurrently, another merge moved the smallest) -> back to 2
    4. prune    drop links between two members that are both linked to the smallest (the
                absorbed side's old star, the merge links): one link per member remains

Why this is enough under any interleaving, with any number of server processes: links only
ever join UTs of one conversation, so no interleaving can make a read wrong; reads walk
until closure. For speed, consider the component's last link write to complete: its
writer's verify walk starts after it, so it sees the final component; a clean verify means
the final component is star-complete, and a dirty one means that writer writes again (so
it was not the last). A link written by a reader's repair only adds edges inside a
component, which never undoes star-completeness. Only a writer that stops early (a crash,
`MAX_ROUNDS`, a closure over `max_size`) can leave a component incomplete, and then the
first read that walks it repairs it (`Weaver`). Pruning never splits a component: a link
is dropped only while both its UTs are linked to a smaller one, and links to a component's
smallest UT are never dropped (`graph.redundant_links`), so readers walking concurrently
still reach every member.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from server.runtime.errors import FailedPrecondition
from server.threadweaver.closure import walk
from server.threadweaver.graph import components, hint, missing_star_links, redundant_links
from storage.ports import ThreadStore

__all__ = ["MAX_ROUNDS", "unite"]

MAX_ROUNDS = 8
"""Write-verify rounds before a writer leaves the rest to readers' repair (only concurrent
merges into the same component ever need a second round)."""


def _plan(
    pairs: Collection[tuple[str, str]], links: Mapping[str, frozenset[str]]
) -> tuple[set[tuple[str, str]], set[str]]:
    """Links to write first, and the smallest UT of each joined component, from what is known.

    `links` holds the complete links of every endpoint and of each endpoint's hint.
    """
    local: dict[str, set[str]] = {}
    for a, b in pairs:
        local.setdefault(a, set()).add(b)
    for ut, linked in links.items():
        local.setdefault(ut, set()).update(linked)
    groups = components(local, (x for pair in pairs for x in pair))
    writes = set(pairs)
    smallest: set[str] = set()
    for group in {groups[a] for a, _ in pairs}:
        m = min(group)
        smallest.add(m)
        known = links.get(m, frozenset())
        writes.update((m, x) for x in group if x != m and x not in known)
    return writes, smallest


async def unite(
    store: ThreadStore,
    pairs: Collection[tuple[str, str]],
    links: dict[str, frozenset[str]],
    *,
    max_size: int,
) -> dict[str, str]:
    """Records the merges `pairs` and makes each joined component star-complete.

    `links` must hold the complete links of every endpoint (UTs without links map to an
    empty set); it is extended in place. Returns the canonical (smallest) id of every UT
    of the joined components, or an empty dict when one exceeds `max_size` UTs (the merges
    are recorded all the same; only the shortcuts are skipped).
    """
    endpoints = {x for pair in pairs for x in pair}
    roots = sorted({hint(x, links) for x in endpoints} - links.keys())
    if roots:
        found = await store.get_links(roots)
        links.update((r, found.get(r, frozenset())) for r in roots)
    writes, seeds = _plan(pairs, links)
    canonical: dict[str, str] = {}
    for _ in range(MAX_ROUNDS):
        await store.add_links(sorted(writes))
        try:
            seen = await walk(store, seeds, max_size=max_size)
        except FailedPrecondition:
            return {}
        groups = components(seen)
        canonical = {ut: min(group) for ut, group in groups.items()}
        writes = {
            edge for group in set(groups.values()) for edge in missing_star_links(group, seen)
        }
        if not writes:
            spare = [
                edge for group in set(groups.values()) for edge in redundant_links(group, seen)
            ]
            if spare:
                await store.remove_links(spare)
            break
        seeds = {min(group) for group in groups.values()}
    return canonical
