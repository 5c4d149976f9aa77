"""The template cache: bounded, least recently used first, expiring at its TTL."""

from __future__ import annotations

from server.templates.cache import TtlLru


class TestTtlLru:
    def test_bounded_and_expiring(self) -> None:
        """Least recently used goes first; entries expire at their TTL."""
        now = [0.0]
        cache = TtlLru[str, int](2, 10.0, clock=lambda: now[0])
        cache.put("a", 1)
        cache.put("b", 2)
        assert cache.get("a") == 1
        cache.put("c", 3)
        assert cache.get("b") is None
        now[0] = 11.0
        assert cache.get("a") is None
