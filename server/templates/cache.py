"""A bounded LRU cache whose entries expire: Crusher's full-template cache, and the
template cache that lets AnnotateEmail answer without a store round trip."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["TtlLru"]

K = TypeVar("K")
V = TypeVar("V")


class TtlLru(Generic[K, V]):
    """At most `size` entries; each lives `ttl_s` (or its own ttl) from when it was put."""

    __slots__ = ("_clock", "_items", "_size", "_ttl")

    def __init__(
        self, size: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._size = max(1, size)
        self._ttl = ttl_s
        self._clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The live value of `key` (refreshing its recency), or None."""
        found = self._items.get(key)
        if found is None:
            return None
        expires, value = found
        if expires <= self._clock():
            del self._items[key]
            return None
        self._items.move_to_end(key)
        return value

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None

    def put(self, key: K, value: V, ttl_s: float | None = None) -> None:
        """Stores `value`, evicting the least recently used entry beyond `size`."""
        self._items[key] = (self._clock() + (self._ttl if ttl_s is None else ttl_s), value)
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        """Forgets `key`."""
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)
