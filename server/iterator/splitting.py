"""Where a step cuts the rest of its range, so no single range forms a long tail.

Three cuts, each a position that ends a piece (inclusive) and starts the next:

- **Large parent** (the seed's pre-split, found sooner): the first time the rows read in one
  parent reach `max_chunk`, one ``LIMIT 1 OFFSET n`` probe (the seed's) asks whether it has
  `large_range_threshold` rows; if so the range keeps the first `threshold` and the rest of
  the parent is cut every `threshold` rows, each probe starting at the previous cut
  (linear in the parent's size, not quadratic). The seed read the first `threshold` rows
  alone before it knew, so a parent's first quarter-million rows were always sequential.
- **Slow parent** (work stealing): a range running longer than `steal_after_s` inside a
  parent it has read at least two chunks of is cut once more, as far ahead as it has read.
- **Long parent list** (work stealing, no query): a children range running longer than
  `steal_after_s` with two or more parents still ahead gives the second half of them away,
  cut at the prefix position ``(p,)`` that sorts before parent p's first row.

Stealing happens only while the level's queue holds fewer work items than the server has
workers: when every worker is busy, cutting ranges again only multiplies them.
"""

from __future__ import annotations

from server.iterator.settings import IteratorSettings
from server.iterator.stepping import parent_cut
from storage.clock import now_ms
from storage.ports import IterationSource, Key, Positions, TaskRecord

__all__ = ["MAX_PIECES", "SplitFinder"]

MAX_PIECES = 32
"""Split pieces cut per step (a step is one transaction: DynamoDB allows 100 items)."""


class SplitFinder:
    """Finds the cuts of one step of a task (probing the source when it must)."""

    def __init__(self, source: IterationSource, settings: IteratorSettings) -> None:
        self._source = source
        self._s = settings

    async def cuts(
        self, task: TaskRecord, rows: Positions, limit: int, *, may_steal: bool = True
    ) -> list[Key]:
        """Positions after the last row read where the rest of the range is cut (sorted;
        empty: no cut). Called only after a full read (the range goes on). `may_steal`
        says whether a thief would find a worker (none: stealing only multiplies ranges)."""
        threshold = self._s.large_range_threshold
        after = rows[-1]
        here = after[0] if task.parents else None
        before_run = task.rows if not task.parents or (task.after and task.after[0] == here) else 0
        run = before_run + (rows.last_run() if task.parents else len(rows))
        parents = [after[0]] if task.parents else None
        # A range that already ends inside this parent is a piece of it: cut once is enough.
        cut_already = bool(task.upto) and (
            not task.parents or (len(task.upto) > 1 and task.upto[0] == here)
        )
        # Asked once per parent: when its rows read cross one largest chunk.
        if not cut_already and before_run < min(self._s.max_chunk, threshold) <= run:
            return await self._large(task, parents, after, run, threshold)
        running_ms = now_ms() - task.started_ms
        if not may_steal or running_ms < self._s.steal_after_s * 1000:
            return []
        cuts: list[Key] = []
        if run >= 2 * limit:
            point = await self._probe(task, parents, after, run)
            if point is not None:
                cuts.append(point)
        if task.parents:
            point = parent_cut(task.parents, after, task.upto)
            if point is not None and (not cuts or cuts[-1] < point):
                cuts.append(point)
        return cuts

    async def _large(
        self, task: TaskRecord, parents: list[int] | None, after: Key, run: int, threshold: int
    ) -> list[Key]:
        """Cuts of a parent found large, or none. Asked the first time the rows read in one
        parent reach `max_chunk`: one probe tells whether it has `threshold` rows, so a
        large parent is split after one chunk rather than after reading `threshold` rows
        alone (the seed's first range is sequential); then every `threshold` rows, each
        probe from the last."""
        cuts: list[Key] = []
        cursor = after
        if run < threshold:
            first = await self._probe(task, parents, after, threshold - run - 1)
            if first is None:
                return cuts  # not large
            cuts.append(first)
            cursor = first
        while len(cuts) < MAX_PIECES:
            point = await self._probe(task, parents, cursor, threshold - 1)
            if point is None:
                break
            cuts.append(point)
            cursor = point
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
