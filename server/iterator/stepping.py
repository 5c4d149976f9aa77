"""One step of a range, as pure functions: what a chunk read turns into.

A *task* reads one level: either a bounded id range (the scope) or the children of a sorted
list of parents (every row one chunk of the level above found). A step reads one chunk
after the task's marker and commits, atomically and only if no copy of the same message
committed first, the task's new marker, the tasks it creates, the chunk it emits and the
counters it moves. Because counters move only inside that conditional write, a redelivered
or duplicated message can never count anything twice — which is what lets completion be
decided by counters (Box's discovered / all-discovered / completed events) and checked
against the ledger.

Parent completion is exact even with empty parents and split parents: a parent q of a
children task is closed by the step whose read crosses q's end — q >= the old marker's
parent and q < the new marker's parent — and, when the task ends, every q up to (but not
including) the parent its inclusive end bound sits in. A split piece ends inside its parent,
so only the piece that reaches the parent's real end closes it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace

from server.iterator import model
from storage.ports import ChunkRecord, Key, Positions, Step, TaskRecord

__all__ = [
    "StepInput",
    "child_id",
    "closed_parents",
    "fan_out",
    "fresh_task",
    "parent_cut",
    "piece_id",
    "plan_step",
]


def child_id(task_id: str, seq: int) -> str:
    """The id of the task created by step `seq` of `task_id` (stable across redeliveries)."""
    return f"{task_id}.{seq}"


def piece_id(task_id: str, seq: int, index: int) -> str:
    """The id of split piece `index` cut at step `seq` of `task_id`."""
    return f"{task_id}.{seq}s{index}"


def chunk_id(task_id: str, seq: int) -> str:
    """The stable id of the chunk emitted by step `seq` of `task_id`."""
    return f"{task_id}/{seq}"


def fan_out(ids: Sequence[int], fanout: int) -> list[Sequence[int]]:
    """`ids` (sorted) cut into at most `fanout` contiguous, near-equal lists."""
    pieces = max(1, min(fanout, len(ids)))
    size, extra = divmod(len(ids), pieces)
    out: list[Sequence[int]] = []
    start = 0
    for index in range(pieces):
        end = start + size + (1 if index < extra else 0)
        out.append(ids[start:end])
        start = end
    return out


def parent_cut(parents: Sequence[int], after: Key, upto: Key) -> Key | None:
    """Where to cut a children range's remaining parents in two (no query needed): the
    prefix position ``(p,)`` of the middle one, which sorts before every row of p. None
    when fewer than two parents remain after the marker's own."""
    lo = bisect.bisect_right(parents, after[0]) if after else 0
    if upto:
        hi = bisect.bisect_left(parents, upto[0]) if len(upto) == 1 else len(parents)
        hi = min(hi, bisect.bisect_right(parents, upto[0]))
    else:
        hi = len(parents)
    if hi - lo < 2:
        return None
    return (parents[(lo + hi) // 2],)


def closed_parents(task: TaskRecord, new_after: Key, finished: bool) -> int:
    """Parents of a children task closed between its marker and `new_after`."""
    parents = task.parents
    lo = bisect.bisect_left(parents, task.after[0]) if task.after else 0
    if finished:
        hi = bisect.bisect_left(parents, task.upto[0]) if task.upto else len(parents)
    else:
        hi = bisect.bisect_left(parents, new_after[0]) if new_after else lo
    return max(0, hi - lo)


@dataclass(frozen=True, slots=True)
class StepInput:
    """What the worker learned in one step."""

    rows: Sequence[Key]
    """Positions read (in order): what the source returned (`Positions`), or any sequence
    of equal-width keys."""
    limit: int
    """The LIMIT of the read: fewer rows means the range is exhausted."""
    split_points: Sequence[Key] = ()
    """Positions where the rest of the range is cut (each ends a piece, inclusive)."""
    now_ms: int = 0
    fanout: int = 1
    """Children tasks one step may create: its parents are dealt into up to this many
    contiguous lists, read in parallel by different workers (and replicas)."""


def plan_step(task: TaskRecord, spec: model.JobSpec, got: StepInput) -> Step:
    """The atomic write of one step of `task` (pure): the task's new marker, what the rows
    become (a chunk at the emitted level, children tasks above it), the pieces a split cuts
    off, and the counters that decide completion."""
    rows = _positions(got.rows)
    level = task.level
    new_after = rows[-1] if rows else task.after
    finished = len(rows) < got.limit
    counters: dict[str, int] = {model.found(level): len(rows)}
    new_tasks: list[TaskRecord] = []
    chunk = None
    if level == spec.emit_level:
        if rows:
            chunk = _chunk(task, rows)
            counters[model.EMITTED_OBJECTS] = len(rows)
            counters[model.EMITTED_CHUNKS] = 1
    elif rows:
        new_tasks = _children(task, rows, got)
        counters[model.tasks(level + 1)] = len(new_tasks)

    upto = task.upto
    if got.split_points and not finished:
        pieces = _pieces(task, got)
        new_tasks += pieces
        counters[model.tasks(level)] = counters.get(model.tasks(level), 0) + len(pieces)
        upto = got.split_points[0]
        # The task now ends at the first cut: it may already have read all of its range.
        finished = finished or (bool(rows) and rows[-1] >= upto)

    if task.parents:
        shown = replace(task, upto=upto)
        counters[model.closed(level - 1)] = closed_parents(shown, new_after, finished)
    if finished:
        counters[model.tasks_done(level)] = 1
    new_task = replace(
        task,
        after=new_after,
        upto=upto,
        seq=task.seq + 1,
        done=finished,
        rows=_rows_in_parent(task, rows),
        started_ms=got.now_ms if got.split_points else task.started_ms,
        spawned=tuple(t.task_id for t in new_tasks),
    )
    return Step(
        task=new_task,
        new_tasks=new_tasks,
        chunk=chunk,
        counters={k: v for k, v in counters.items() if v},
    )


def _positions(rows: Sequence[Key]) -> Positions:
    if isinstance(rows, Positions):
        return rows
    return Positions.of(len(rows[0]) if rows else 1, rows)


def _rows_in_parent(task: TaskRecord, rows: Positions) -> int:
    """Rows read since the marker entered its current parent (every row, for a bounded
    read): what tells a large parent, worth splitting, from a small one."""
    if task.parents and rows and (not task.after or rows[-1][0] != task.after[0]):
        return rows.last_run()
    return task.rows + len(rows)


def _chunk(task: TaskRecord, rows: Positions) -> ChunkRecord:
    """The chunk a step of the emitted level writes, ready to lease, under a stable id."""
    return ChunkRecord(
        chunk_id=chunk_id(task.task_id, task.seq),
        width=rows.width,
        keys=rows.tobytes(),
        count=len(rows),
        state="ready",
        lease_until_ms=0,
        sends=0,
        acked_keys=b"",
        version=1,
    )


def fresh_task(
    task_id: str,
    level: int,
    parents: tuple[int, ...],
    now_ms: int,
    *,
    first: Key = (),
    last: Key = (),
    after: Key = (),
    upto: Key = (),
) -> TaskRecord:
    """A task nothing has read yet: a job's root range, a step's children, a split's pieces."""
    return TaskRecord(
        task_id=task_id,
        level=level,
        parents=parents,
        first=first,
        last=last,
        after=after,
        upto=upto,
        seq=0,
        done=False,
        rows=0,
        started_ms=now_ms,
        spawned=(),
    )


def _children(task: TaskRecord, rows: Positions, got: StepInput) -> list[TaskRecord]:
    """The children tasks of the rows read: their ids dealt into up to `fanout` contiguous
    parent lists of the next level, one task each (named by the step: stable on redelivery)."""
    groups = fan_out(sorted(set(rows.column(rows.width - 1))), got.fanout)
    name = child_id(task.task_id, task.seq)
    return [
        fresh_task(
            name if len(groups) == 1 else f"{name}c{index}",
            task.level + 1,
            tuple(group),
            got.now_ms,
        )
        for index, group in enumerate(groups)
    ]


def _pieces(task: TaskRecord, got: StepInput) -> list[TaskRecord]:
    """The split pieces of the rest of the range: each starts after one cut and ends at the
    next (the last at the task's own end); the task itself keeps up to the first cut."""
    cuts = list(got.split_points)
    ends = [*cuts[1:], task.upto]
    return [
        fresh_task(
            piece_id(task.task_id, task.seq, index),
            task.level,
            task.parents,
            got.now_ms,
            first=task.first,
            last=task.last,
            after=start,
            upto=end,
        )
        for index, (start, end) in enumerate(zip(cuts, ends, strict=True))
    ]
