"""A small disjoint-set forest: the reference answer for thread unification.

Unifying email threads is a connected-components problem over the bipartite graph
thread ↔ Message-ID (a thread contains a message; two threads holding the same Message-ID
belong together). A union-find answers it exactly and in near-linear time, so the corpus
generator uses it for ground truth and the property tests use it as the oracle the
write-time ThreadWeaver algorithm must agree with. It is deliberately independent of every
other Loom module so a test can import it alone.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["UnionFind"]

T = TypeVar("T", bound=Hashable)


class UnionFind(Generic[T]):
    """Disjoint sets with path compression and union by size (amortised near O(1) per operation)."""

    __slots__ = ("_parent", "_size")

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._parent: dict[T, T] = {}
        self._size: dict[T, int] = {}
        for item in items:
            self.add(item)

    def __len__(self) -> int:
        """Number of items (not sets) known to the forest."""
        return len(self._parent)

    def __contains__(self, item: object) -> bool:
        return item in self._parent

    def __iter__(self) -> Iterator[T]:
        return iter(self._parent)

    def add(self, item: T) -> None:
        """Make ``item`` a singleton set unless it is already known (idempotent)."""
        if item not in self._parent:
            self._parent[item] = item
            self._size[item] = 1

    def find(self, item: T) -> T:
        """The representative of ``item``'s set; unknown items become singletons first.

        Iterative two-pass path compression: a 100,000-message chain must not hit Python's
        recursion limit.
        """
        self.add(item)
        root = item
        parent = self._parent
        while parent[root] != root:
            root = parent[root]
        while parent[item] != root:
            parent[item], item = root, parent[item]
        return root

    def union(self, a: T, b: T) -> T:
        """Merge the sets of ``a`` and ``b`` and return the new representative."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if self._size[ra] < self._size[rb]:
            ra, rb = rb, ra
        self._parent[rb] = ra
        self._size[ra] += self._size.pop(rb)
        return ra

    def connected(self, a: T, b: T) -> bool:
        """Whether ``a`` and ``b`` are in the same set."""
        return self.find(a) == self.find(b)

    def set_size(self, item: T) -> int:
        """Number of items in ``item``'s set."""
        return self._size[self.find(item)]

    def groups(self) -> dict[T, list[T]]:
        """Every set, keyed by its representative (members in insertion order)."""
        out: dict[T, list[T]] = {}
        for item in self._parent:
            out.setdefault(self.find(item), []).append(item)
        return out
