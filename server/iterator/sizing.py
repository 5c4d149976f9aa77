"""Chunks sized by time, not rows (pt-online-schema-change's ``--chunk-time``, Spirit).

Each worker keeps, per level, a moving average of the seconds one row costs to read and
sets its next LIMIT so a chunk takes about `target_s`: a slow or loaded source gets smaller
chunks (short transactions, quick reaction to pause and rate changes), a fast one larger
chunks (fewer round trips and queue hops per object). The target is never below
`COMMITS_PER_TARGET` times what committing a chunk costs (the step's writes to the state
engine, also a moving average): workers read the next chunk while a step commits, so the
commits cost no reading time, but every step is one transaction of a state engine all
workers share. When a transaction of DynamoDB (Local: ~40 ms) costs more than reading a few
thousand rows, chunks that read for less would make the engine's transaction rate the
pipeline's bound. Bounded both ways; a chunk is one ledger item, so the upper bound also
bounds an item's size.
"""

from __future__ import annotations

__all__ = ["COMMITS_PER_TARGET", "ChunkSizer"]

COMMITS_PER_TARGET = 4
"""A chunk reads for at least this many commits' time: transactions stay a small share."""


class ChunkSizer:
    """The LIMIT of the next read of each level, adapted to the measured read time."""

    __slots__ = ("_alpha", "_cost", "_initial", "_max", "_min", "_overhead", "_target")

    def __init__(
        self, *, target_s: float, minimum: int, maximum: int, initial: int, alpha: float = 0.3
    ) -> None:
        self._target = max(1e-4, target_s)
        self._min = max(1, minimum)
        self._max = max(self._min, maximum)
        self._initial = min(max(initial, self._min), self._max)
        self._alpha = alpha
        self._cost: dict[int, float] = {}
        self._overhead = 0.0

    def limit(self, level: int) -> int:
        """The LIMIT to use for the next read of `level`."""
        cost = self._cost.get(level)
        if cost is None or cost <= 0:
            return self._initial
        target = max(self._target, COMMITS_PER_TARGET * self._overhead)
        return int(min(self._max, max(self._min, target / cost)))

    def observe_commit(self, seconds: float) -> None:
        """Records what committing one step took (its writes, not its read)."""
        if seconds > 0:
            self._overhead += self._alpha * (seconds - self._overhead)

    def observe(self, level: int, rows: int, seconds: float) -> None:
        """Records that a full read (as many rows as its LIMIT) of `level` took `seconds`.

        Short reads (the tail of a range) are not observed: their cost per row says more
        about the round trip than about the rows, and would shrink every later chunk.
        """
        if seconds <= 0:
            return
        per_row = seconds / max(1, rows)
        old = self._cost.get(level)
        self._cost[level] = per_row if old is None else old + self._alpha * (per_row - old)
