"""Progress, completion and ETA from a job's counters (pure).

Completion by counters is exact because every counter moves inside the conditional write
of the step that causes it: a job's iteration is complete when every range ever created is
closed (ranges are created by the same writes that close their parents, so once the counts
meet nothing can create another), and the job is complete when, on top of that, every
emitted chunk is settled — delivered, or acknowledged for jobs that need acks.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from server.iterator import model
from storage.ports import LedgerSummary

__all__ = [
    "LevelView",
    "Progress",
    "RateMeter",
    "eta_seconds",
    "ledger_disagreement",
    "progress",
]


@dataclass(frozen=True, slots=True)
class LevelView:
    """One level's progress within a job."""

    name: str
    discovered: int
    completed: int
    emitted: int
    acked: int
    all_discovered: bool
    ranges: int
    ranges_closed: int


@dataclass(frozen=True, slots=True)
class Progress:
    """A job's progress as GetJob shows it."""

    levels: tuple[LevelView, ...]
    iteration_complete: bool
    complete: bool
    emitted_objects: int
    emitted_chunks: int
    settled_objects: int
    settled_chunks: int
    acked_objects: int
    acked_chunks: int


def progress(spec: model.JobSpec, names: Sequence[str], c: Mapping[str, int]) -> Progress:
    """Per-level progress and completion of a job from its counters."""
    views = []
    all_closed = True
    for level in range(spec.scope_level, spec.emit_level + 1):
        ranges, closed = c.get(model.tasks(level), 0), c.get(model.tasks_done(level), 0)
        all_closed = all_closed and ranges == closed
        emitting = level == spec.emit_level
        found = c.get(model.found(level), 0)
        views.append(
            LevelView(
                name=names[level],
                discovered=found,
                completed=found if emitting else c.get(model.closed(level), 0),
                emitted=c.get(model.EMITTED_OBJECTS, 0) if emitting else 0,
                acked=c.get("acked_objects", 0) if emitting else 0,
                all_discovered=all_closed,
                ranges=ranges,
                ranges_closed=closed,
            )
        )
    emitted_chunks = c.get(model.EMITTED_CHUNKS, 0)
    settled_chunks = c.get(model.settled(spec.require_ack, "chunks"), 0)
    return Progress(
        levels=tuple(views),
        iteration_complete=all_closed,
        complete=all_closed and settled_chunks == emitted_chunks,
        emitted_objects=c.get(model.EMITTED_OBJECTS, 0),
        emitted_chunks=emitted_chunks,
        settled_objects=c.get(model.settled(spec.require_ack, "objects"), 0),
        settled_chunks=settled_chunks,
        acked_objects=c.get("acked_objects", 0),
        acked_chunks=c.get("acked_chunks", 0),
    )


def ledger_disagreement(p: Progress, ledger: LedgerSummary) -> str:
    """Why the ledger does not confirm the counters' completion ("" when it does)."""
    ranges = sum(v.ranges for v in p.levels)
    problems = []
    if ledger.tasks != ranges:
        problems.append(f"{ledger.tasks} ranges in the ledger, {ranges} counted")
    if ledger.tasks_open:
        problems.append(f"{ledger.tasks_open} ranges still open in the ledger")
    if ledger.chunks != p.emitted_chunks:
        problems.append(f"{ledger.chunks} chunks in the ledger, {p.emitted_chunks} counted")
    if ledger.objects != p.emitted_objects:
        problems.append(f"{ledger.objects} objects in the ledger, {p.emitted_objects} counted")
    if ledger.chunks_unsettled:
        problems.append(f"{ledger.chunks_unsettled} chunks unsettled in the ledger")
    return "; ".join(problems)


class RateMeter:
    """Objects emitted per second over a sliding window, from sampled counter values."""

    __slots__ = ("_samples", "_window_s")

    def __init__(self, window_s: float = 5.0) -> None:
        self._window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, value: int, now: float | None = None) -> None:
        """Records the counter's value now."""
        t = time.monotonic() if now is None else now
        self._samples.append((t, value))
        while len(self._samples) > 2 and t - self._samples[1][0] > self._window_s:
            self._samples.popleft()

    def rate(self) -> float:
        """Per second over the window (0 with fewer than two samples)."""
        if len(self._samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = self._samples[0], self._samples[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0


def eta_seconds(p: Progress, rate: float) -> float:
    """Seconds to completion at `rate` objects/s; negative when it cannot be told yet.

    Once iteration is complete the remainder is the unsettled objects. Before, the total
    is extrapolated from the deepest level whose discovery is complete: the share of its
    objects whose children are all found says how far along the emitted level is.
    """
    if rate <= 0:
        return -1.0
    if p.iteration_complete:
        return max(0, p.emitted_objects - p.settled_objects) / rate
    known = [v for v in p.levels[:-1] if v.all_discovered and v.discovered]
    if not known:
        return -1.0
    deepest = known[-1]
    share = deepest.completed / deepest.discovered
    if share <= 0:
        return -1.0
    total = p.emitted_objects / share
    return max(0.0, total - p.settled_objects) / rate
