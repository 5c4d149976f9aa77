"""The stateless workers: take a step message, read chunks, commit the steps, pass work on.

Every server runs `workers` of these asyncio tasks; every replica's workers share the same
queues (one per level, as in the seed), so adding replicas adds workers. A worker holds no
state a crash could lose: the task record holds the marker, the queue holds the message,
and each step's effects are one conditional write.

Handling one message "step s of task t" (the seed's work de-duplication, made exact):

- ``s == t.seq`` and t is open: read a chunk after the marker, maybe split, commit the step
  **iff t.seq is still s** (two copies of one message cannot both commit, so no chunk is
  emitted twice), enqueue the tasks it created — and go on with step s + 1 while holding
  the same message, up to `hold_steps` steps and a third of the visibility timeout. Then
  enqueue "step n of t" for whoever comes next and delete the message. A copy that lost a
  race just deletes itself. Holding saves, per step, the queue hop (send, receive, delete)
  and the task read, which on SQS and DynamoDB cost more than the chunk read itself.
- ``s < t.seq`` on a *redelivery*: steps were committed but the worker holding the message
  may have died before sending on; send the last step's tasks and "step t.seq" again
  (duplicates are harmless: see above).
- anything else is a stale duplicate: dropped.

A source read that fails is one of two things. The database is unreachable (an outage): the
job pauses until the source monitor finds it answering. Or the database refused the
statement for good (a column or table renamed under a running job): retrying would flap
between RUNNING and PAUSED for ever, so the job fails, with the database's message.

Deeper levels are served first, so started work finishes (and memory in flight stays
bounded) before more is discovered. A level whose queue was found empty is not asked
again for a short, growing while (reset when this server sends to it; `queues.py`), so
idle workers do not spend round trips on empty queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from server.iterator import model
from server.iterator.jobcache import JobCache
from server.iterator.pacing import reserve
from server.iterator.queues import MAX_QUIET_S, LevelQueues
from server.iterator.settings import IteratorSettings
from server.iterator.sizing import ChunkSizer
from server.iterator.splitting import SplitFinder
from server.iterator.stepping import StepInput, plan_step
from server.runtime import tracing
from server.runtime.errors import EngineRejected, LoomError, Unavailable
from server.runtime.logs import get_logger
from storage.clock import now_ms
from storage.ports import (
    IterationSource,
    JobStore,
    Key,
    Positions,
    QueuedMessage,
    Step,
    TaskRecord,
    WorkQueue,
)

__all__ = ["StepWorkers"]

_log = get_logger("iterator.worker")
_DEPTH_SAMPLE_S = 1.0
_MAX_CHUNK_BYTES = 300_000
"""A chunk is one ledger item: its keys and per-object acks (8 bytes per integer) stay well
under DynamoDB's 400 KB item limit whatever max_chunk says."""
_MAX_FANOUT = 32
"""Children tasks per step (a step is one transaction: DynamoDB allows 100 items)."""


class _SourceDown(Exception):
    """The source database failed a read: the job pauses until it answers again."""


class _SourceRejected(Exception):
    """The source database refused a read as written: the job fails."""

    def __init__(self, level: int, message: str) -> None:
        super().__init__(message)
        self.level = level


@dataclass(frozen=True, slots=True)
class _Chunk:
    """One read of a step: its rows, the LIMIT it was read with, where the range is cut."""

    rows: Positions
    limit: int
    cuts: list[Key]


def _retrieved(task: asyncio.Task[_Chunk]) -> None:
    """A dropped read's outcome is nobody's: taken here so asyncio does not log it."""
    if not task.cancelled():
        task.exception()


class StepWorkers:
    """The worker pool of one server: takes step messages from the levels' queues."""

    def __init__(
        self,
        source: IterationSource,
        queue: WorkQueue,
        store: JobStore,
        jobs: JobCache,
        settings: IteratorSettings,
        *,
        levels: LevelQueues,
        on_emit: Callable[[str], None],
        on_source_down: Callable[[str, str], Awaitable[None]],
        on_source_rejected: Callable[[str, int, str], Awaitable[None]],
    ) -> None:
        self._source = source
        self._queue = queue
        self._levels = levels
        self._store = store
        self._jobs = jobs
        self._s = settings
        self._names = levels.names
        self._on_emit = on_emit
        self._on_source_down = on_source_down
        self._on_source_rejected = on_source_rejected
        self._splits = SplitFinder(source, settings)
        self._fanout = max(1, min(_MAX_FANOUT, settings.fanout))
        self._tasks: list[asyncio.Task[None]] = []
        self.steps = 0
        """Steps this server committed (statistics)."""
        self.dropped = 0
        """Duplicate messages dropped (statistics)."""
        self.dropped_at = [0] * len(self._names)
        """Stale duplicate work messages discarded, per level (statistics)."""
        self.chunks_emitted = 0
        """Chunks this server wrote to a ledger (statistics)."""
        self.reads_wasted = 0
        """Chunks read from the source whose step another copy of the message had already
        committed: the seed's duplicate work, never emitted twice (statistics)."""
        self.depths = [0] * len(self._names)
        """Messages in each level's queue when last sampled (`sample_depths`)."""

    def start(self) -> None:
        """Starts the workers and the queue-depth sampler (inside the running loop)."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._run(i), name=f"iterator-worker-{i}")
                for i in range(max(1, self._s.workers))
            ]
            self._tasks.append(asyncio.create_task(self._sample_loop(), name="iterator-depths"))

    async def stop(self) -> None:
        """Cancels the workers; messages they held reappear after their visibility."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def sample_depths(self) -> None:
        """Reads every level's queue depth (what the metrics show between samples)."""
        for level, name in enumerate(self._names):
            self.depths[level] = await self._queue.depth(name)

    async def _sample_loop(self) -> None:
        while True:
            with contextlib.suppress(LoomError):
                await self.sample_depths()
            await asyncio.sleep(_DEPTH_SAMPLE_S)

    async def _run(self, index: int) -> None:
        sizer = ChunkSizer(
            target_s=self._s.target_chunk_s,
            minimum=self._s.min_chunk,
            maximum=self._s.max_chunk,
            initial=self._s.initial_chunk,
        )
        idle = self._s.poll_interval_s
        levels = list(range(len(self._names) - 1, -1, -1))
        while True:
            worked = False
            try:
                for level in levels:
                    if self._levels.quiet(level):
                        continue
                    messages = await self._queue.receive(
                        self._names[level],
                        max_messages=4,
                        visibility_s=self._s.visibility_timeout_s,
                        wait_s=0,
                    )
                    if not messages:
                        self._levels.found_empty(level)
                        continue
                    worked = True
                    # One budget for the batch: no message is held past its visibility.
                    deadline = time.monotonic() + self._s.visibility_timeout_s / 3
                    for message in messages:
                        await self._handle(level, message, sizer, deadline)
                    break
            except asyncio.CancelledError:
                raise
            except LoomError as exc:
                _log.warning("worker: engine fault", error=str(exc))
                await asyncio.sleep(min(1.0, idle * 4))
            except Exception:  # a bug must not kill the pool; the message reappears
                _log.exception("worker: unexpected error")
                await asyncio.sleep(idle)
            if worked:
                idle = self._s.poll_interval_s
            else:
                await self._levels.idle(idle)
                idle = min(MAX_QUIET_S, idle * 1.5)

    async def _handle(
        self, level: int, message: QueuedMessage, sizer: ChunkSizer, deadline: float
    ) -> None:
        work = model.WorkMessage.loads(message.body)
        if work is None or not tracing.enabled():
            await self._step(level, message, work, sizer, deadline)
            return
        # The chunk's own trace, linked to the span that queued this step (another server's).
        with tracing.linked(
            "iterator.chunk",
            [tracing.parse_traceparent(work.trace)],
            {"loom.job_id": work.job, "loom.task_id": work.task, "loom.seq": work.seq},
        ):
            await self._step(level, message, work, sizer, deadline)

    async def _step(
        self,
        level: int,
        message: QueuedMessage,
        work: model.WorkMessage | None,
        sizer: ChunkSizer,
        deadline: float,
    ) -> None:
        queue = self._names[level]
        if work is None:
            await self._queue.delete(queue, [message.receipt])
            return
        found = await self._jobs.get(work.job)
        if found is None or found[0].state in ("completed", "cancelled", "failed"):
            await self._queue.delete(queue, [message.receipt])
            return
        job, spec = found
        if job.state == "paused":
            await self._queue.set_visibility(queue, message.receipt, self._s.pause_poll_s)
            return
        task = await self._store.get_task(work.job, work.task)
        if task is None or task.level != level:
            await self._queue.delete(queue, [message.receipt])
            return
        if work.seq < task.seq and message.receive_count > 1:
            await self._pass_on(work.job, task)  # committed steps whose messages may be lost
        elif work.seq == task.seq and not task.done:
            try:
                await self._hold(work.job, spec, job.rate, task, sizer=sizer, deadline=deadline)
            except _SourceDown as exc:
                await self._on_source_down(work.job, str(exc))
                await self._queue.set_visibility(queue, message.receipt, self._s.pause_poll_s)
                return
            except _SourceRejected as exc:
                await self._on_source_rejected(work.job, exc.level, str(exc))
            except asyncio.CancelledError:
                # The server is stopping: let the next worker (a replica, or this server
                # restarted) have the range now rather than after the visibility timeout.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1.0):
                        await asyncio.shield(self._queue.set_visibility(queue, message.receipt, 0))
                raise
        else:
            self.dropped += 1
            self.dropped_at[level] += 1
        await self._queue.delete(queue, [message.receipt])

    async def _hold(
        self,
        job_id: str,
        spec: model.JobSpec,
        rate: int,
        task: TaskRecord,
        *,
        sizer: ChunkSizer,
        deadline: float,
    ) -> None:
        """Steps `task` while holding its message, then hands the rest on.

        Each step's read of the next chunk starts before the step commits: the next marker
        is known once the rows are, so the source and the state engine work at once and a
        step costs the longer of its read and its commit, not their sum. A read ahead whose
        step is not taken (a copy committed first, the hold ends, the job stopped) is
        dropped: it was a read, and nothing was written for it.
        """
        taken = 0
        reading: asyncio.Task[_Chunk] | None = self._read_ahead(task, spec, rate, sizer)
        try:
            while reading is not None:
                chunk = await reading
                reading = None
                step = plan_step(
                    task,
                    spec,
                    StepInput(chunk.rows, chunk.limit, chunk.cuts, now_ms(), self._fanout),
                )
                go_on = (
                    not step.task.done
                    and taken + 1 < self._s.hold_steps
                    and time.monotonic() < deadline
                )
                if go_on:
                    reading = self._read_ahead(step.task, spec, rate, sizer)
                if not await self._paced(job_id, rate, step):
                    break  # paused or finished while this step waited: it is not taken
                if not await self._commit(job_id, task, step, sizer):
                    return  # another copy committed this step: it goes on
                taken += 1
                task = step.task
                await self._levels.announce(job_id, step.new_tasks)
                if task.done:
                    return
                found = await self._jobs.get(job_id) if go_on else None
                if found is None or found[0].state != "running":
                    break  # paused or finished: whoever takes the message next will see it
                rate = found[0].rate
        finally:
            if reading is not None:
                reading.cancel()
                reading.add_done_callback(_retrieved)
        await self._levels.send(task.level, [_step_body(job_id, task)])

    def _read_ahead(
        self, task: TaskRecord, spec: model.JobSpec, rate: int, sizer: ChunkSizer
    ) -> asyncio.Task[_Chunk]:
        return asyncio.create_task(self._read(task, spec, rate, sizer))

    async def _read(
        self, task: TaskRecord, spec: model.JobSpec, rate: int, sizer: ChunkSizer
    ) -> _Chunk:
        """Reads the chunk after the task's marker, and where the rest of its range is cut."""
        width = len(self._source.levels[task.level].id_columns) + (1 if task.parents else 0)
        limit = min(sizer.limit(task.level), _MAX_CHUNK_BYTES // (8 * (width + 1)))
        if task.level == spec.emit_level and rate > 0:
            limit = max(1, min(limit, rate))
        started = time.perf_counter()
        try:
            rows = await self._source.read(
                task.level,
                parents=task.parents or None,
                first=task.first,
                last=task.last,
                after=task.after,
                upto=task.upto,
                limit=limit,
            )
            cuts: list[Key] = []
            if len(rows) == limit:
                sizer.observe(task.level, len(rows), time.perf_counter() - started)
                idle = self.depths[task.level] < self._s.workers  # sampled every second
                cuts = await self._splits.cuts(task, rows, limit, may_steal=idle)
        except Unavailable as exc:  # only the source's breaker answers for these calls
            raise _SourceDown(str(exc)) from exc
        except EngineRejected as exc:  # only the source refuses statements
            raise _SourceRejected(task.level, exc.reason) from exc
        return _Chunk(rows, limit, cuts)

    async def _paced(self, job_id: str, rate: int, step: Step) -> bool:
        """Waits until the job's pace allows the step's objects; False when the job stopped
        running meanwhile (paused, failed, cancelled).

        A paced wait can last long after the read: without this look the step would commit
        a chunk into a job that had already failed or been paused, and a finished job's
        counts would still grow. The look is the job cache's, as fresh as every worker's
        view of the job (a quarter second across replicas; at once on the server that
        stopped it)."""
        if step.chunk is None or rate <= 0:
            return True
        wait = await reserve(
            self._store, job_id, objects=step.chunk.count, rate=float(rate), now_ms=now_ms()
        )
        if wait <= 0:
            return True
        await asyncio.sleep(wait)
        found = await self._jobs.get(job_id)
        return found is not None and found[0].state == "running"

    async def _commit(self, job_id: str, task: TaskRecord, step: Step, sizer: ChunkSizer) -> bool:
        """Commits the step of `task`; False when a copy of its message committed it
        first."""
        committing = time.perf_counter()
        committed = await self._store.commit_step(job_id, step, task.seq)
        sizer.observe_commit(time.perf_counter() - committing)
        if not committed:
            self.dropped += 1
            self.reads_wasted += 1
            await self._store.add_counters(job_id, {model.REREAD_CHUNKS: 1})
            return False
        self.steps += 1
        if step.chunk is not None:
            self.chunks_emitted += 1
            self._on_emit(job_id)
        return True

    async def _pass_on(self, job_id: str, task: TaskRecord) -> None:
        """Enqueues again what the task's last committed step created, and its next step."""
        created = []
        for task_id in task.spawned:
            spawned = await self._store.get_task(job_id, task_id)
            if spawned is not None:
                created.append(spawned)
        await self._levels.announce(job_id, created)
        if not task.done:
            await self._levels.send(task.level, [_step_body(job_id, task)])


def _step_body(job_id: str, task: TaskRecord) -> str:
    """The work message of `task`'s next step (carrying the current span, tracing on)."""
    return model.WorkMessage(job_id, task.task_id, task.seq, trace=tracing.traceparent()).dumps()
