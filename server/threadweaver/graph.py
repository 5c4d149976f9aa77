"""Pure graph arithmetic over UT links: components, canonical ids, missing star links.

The link graph is undirected and only grows. Every link joins two UTs of one conversation
(a recorded merge, or a shortcut to the component's smallest UT), so its connected
components are exactly the unified threads. A component is *star-complete* when every
member is linked to its smallest UT: then any member reaches every other in two hops,
which is what keeps a read at a constant number of round trips.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["components", "hint", "missing_star_links", "redundant_links"]

Links = Mapping[str, Iterable[str]]


def components(links: Links, nodes: Iterable[str] = ()) -> dict[str, frozenset[str]]:
    """Each UT (of `nodes`, of `links`' keys and of their links) -> its component.

    Members of one component share one frozenset object.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = parent.setdefault(x, x)
        while root != parent[root]:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for node in nodes:
        find(node)
    for a, linked in links.items():
        find(a)
        for b in linked:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, set[str]] = {}
    for node in parent:
        groups.setdefault(find(node), set()).add(node)
    out: dict[str, frozenset[str]] = {}
    for members in groups.values():
        frozen = frozenset(members)
        for member in members:
            out[member] = frozen
    return out


def hint(ut: str, links: Mapping[str, frozenset[str]]) -> str:
    """The smallest of `ut` and the UTs linked to it.

    In a star-complete component that is the component's canonical (smallest) id, read in
    one lookup; otherwise it is still a UT of the same conversation.
    """
    linked = links.get(ut)
    return min(*linked, ut) if linked else ut


def missing_star_links(
    component: frozenset[str], links: Mapping[str, frozenset[str]]
) -> list[tuple[str, str]]:
    """The links (smallest, member) `component` lacks to be star-complete, given full `links`."""
    smallest = min(component)
    return [
        (smallest, x)
        for x in sorted(component)
        if x != smallest and smallest not in links.get(x, frozenset())
    ]


def redundant_links(
    component: frozenset[str], links: Mapping[str, frozenset[str]]
) -> list[tuple[str, str]]:
    """Links between two members that are both linked to the smallest: safe to drop.

    Each such link has a detour through a smaller UT, and a link to a component's smallest
    UT is never dropped, so however many writers drop links at once (each checking its own
    detour, through ever smaller UTs), no component comes apart. Dropping them keeps a
    component's link count at one per member instead of growing with every merge (an
    absorbed UT keeps its old star otherwise).
    """
    smallest = min(component)
    return [
        (a, b)
        for a in sorted(component)
        if a != smallest and smallest in links.get(a, frozenset())
        for b in sorted(links.get(a, frozenset()))
        if a < b and b != smallest and smallest in links.get(b, frozenset())
    ]
