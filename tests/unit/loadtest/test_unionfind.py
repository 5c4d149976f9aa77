"""The union-find used as ground truth for thread unification."""

from __future__ import annotations

from loadtest.corpora.unionfind import UnionFind


class TestUnionFind:
    def test_streak_chain_example(self) -> None:
        """A→B→C→D→E forwarding (threads 111..555 via rfc 1..4) is one component."""
        uf: UnionFind[str] = UnionFind()
        for k, (a, b) in enumerate(zip("12345", "2345", strict=False), start=1):
            uf.union(f"t{a}{a}{a}", f"rfc{k}")
            uf.union(f"t{b}{b}{b}", f"rfc{k}")
        assert uf.connected("t111", "t555")
        assert uf.set_size("t333") == 9

    def test_bob_bridges_alice_and_charlie(self) -> None:
        """Disjoint until a third thread shares a Message-ID with each side (the seed's case)."""
        uf: UnionFind[str] = UnionFind()
        for rfc in ("1", "2", "3"):
            uf.union("alice", rfc)
        for rfc in ("5", "6", "7"):
            uf.union("charlie", rfc)
        assert not uf.connected("alice", "charlie")
        uf.union("bob", "3")
        uf.union("bob", "5")
        assert uf.connected("alice", "charlie")

    def test_groups_and_singletons(self) -> None:
        """Unknown items are singletons; groups list every set exactly once."""
        uf = UnionFind([1, 2, 3, 4])
        uf.union(1, 2)
        uf.union(3, 3)
        groups = sorted(sorted(g) for g in uf.groups().values())
        assert groups == [[1, 2], [3], [4]]
        assert uf.find(99) == 99
        assert len(uf) == 5

    def test_long_chain_does_not_recurse(self) -> None:
        """A 200,000-link chain (deeper than Python's recursion limit) resolves."""
        uf: UnionFind[int] = UnionFind()
        for i in range(200_000):
            uf._parent[i] = i + 1  # worst-case shape, built directly
            uf._size[i] = 1
        uf.add(200_000)
        assert uf.find(0) == 200_000
        assert uf.find(0) == 200_000
