"""Merge closure: the set of unified threads joined by recorded merges.

Merges are rare (the seed's merge table is 4 orders of magnitude smaller than the rest),
so the closure is usually the UT itself after one lookup. It is computed for many start UTs
at once, one store round trip per BFS level (a single one where the engine walks the merge
graph itself), then split into components locally.
"""

from __future__ import annotations

from collections.abc import Iterable

from server.runtime.errors import FailedPrecondition
from storage.ports import ThreadStore

__all__ = ["closures"]


def _components(nodes: set[str], edges: dict[str, set[str]]) -> dict[str, frozenset[str]]:
    seen: dict[str, frozenset[str]] = {}
    for start in nodes:
        if start in seen:
            continue
        component = {start}
        stack = [start]
        while stack:
            for nxt in edges.get(stack.pop(), ()):
                if nxt not in component:
                    component.add(nxt)
                    stack.append(nxt)
        frozen = frozenset(component)
        for member in component:
            seen[member] = frozen
    return seen


async def closures(
    store: ThreadStore, starts: Iterable[str], *, max_size: int
) -> dict[str, frozenset[str]]:
    """Maps each start UT to its whole merge closure (itself included).

    Raises FailedPrecondition when the UTs reachable from `starts` exceed `max_size`: a
    closure that big comes from abused Message-IDs, and walking it would hurt everyone.
    """
    frontier = set(starts)
    nodes = set(frontier)
    budget = max_size + len(nodes)
    edges: dict[str, set[str]] = {}
    known: set[str] = set()  # UTs whose whole adjacency the store has reported
    while frontier:
        found = await store.get_merge_neighbours(sorted(frontier))
        # An engine that can walk the graph itself (SQLite's recursive CTE) reports the
        # adjacency of every UT it reached, so those need no further round trip.
        known |= frontier | found.keys()
        for ut, neighbours in found.items():
            edges.setdefault(ut, set()).update(neighbours)
            for n in neighbours:
                edges.setdefault(n, set()).add(ut)
                nodes.add(n)
        if len(nodes) > budget:
            raise FailedPrecondition(
                f"unified thread merges more than {max_size} unified threads; refusing to walk it"
            )
        frontier = nodes - known
    return _components(nodes, edges)
