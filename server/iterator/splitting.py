"""Where a step cuts the rest of its range, so no single range forms a long tail.

Three cuts, each a position that ends a piece (inclusive) and starts the next:

- **Large parent** (the seed's pre-split): the first time the rows read in one parent reach
  `large_range_threshold`, the rest of that parent is cut every `threshold` rows, found by
  the seed's ``LIMIT 1 OFFSET n`` probe, each probe starting at the previous cut (linear in
  the parent's size, not quadratic).
- **Slow parent** (work stealing): a range running longer than `steal_after_s` inside a
  parent it has read at least two chunks of is cut once more, as far ahead as it has read.
- **Long parent list** (work stealing, no query): a children range running longer than
  `steal_after_s` with two or more parents still ahead gives the second half of them away,
  cut at the prefix position ``(p,)`` that sorts before parent p's first row.
"""

from __future__ import annotations

import time

from server.config import IteratorSettings
from server.iterator.stepping import parent_cut
from storage.ports import IterationSource, Key, TaskRecord

__all__ = ["MAX_PIECES", "SplitFinder"]

MAX_PIECES = 32
"""Split pieces cut per step (a step is one transaction: DynamoDB allows 100 items)."""


class SplitFinder:
    """Finds the cuts of one step of a task (probing the source when it must)."""

    def __init__(self, source: IterationSource, settings: IteratorSettings) -> None:
        self._source = source
        self._s = settings

    async def cuts(self, task: TaskRecord, rows: list[Key], limit: int) -> list[Key]:
        """Positions after the last row read where the rest of the range is cut (sorted;
        empty: no cut). Called only after a full read (the range goes on)."""
        threshold = self._s.large_range_threshold
        after = rows[-1]
        before_run = (
            task.rows if not task.parents or (task.after and task.after[0] == after[0]) else 0
        )
        run = before_run + sum(1 for r in rows if not task.parents or r[0] == after[0])
        parents = [after[0]] if task.parents else None
        cuts: list[Key] = []
        if before_run < threshold <= run:
            cursor = after
            while len(cuts) < MAX_PIECES:
                point = await self._probe(task, parents, cursor, threshold - 1)
                if point is None:
                    break
                cuts.append(point)
                cursor = point
            return cuts
        running_ms = int(time.time() * 1000) - task.started_ms
        if running_ms < self._s.steal_after_s * 1000:
            return cuts
        if run >= 2 * limit:
            point = await self._probe(task, parents, after, run)
            if point is not None:
                cuts.append(point)
        if task.parents:
            point = parent_cut(task.parents, after, task.upto)
            if point is not None and (not cuts or cuts[-1] < point):
                cuts.append(point)
        return cuts

    async def _probe(
        self, task: TaskRecord, parents: list[int] | None, after: Key, offset: int
    ) -> Key | None:
        return await self._source.probe(
            task.level,
            parents=parents,
            first=task.first,
            last=task.last,
            after=after,
            upto=task.upto,
            offset=offset,
        )
