"""The stateless workers: take a step message, read one chunk, commit the step, pass work on.

Every server runs `workers` of these asyncio tasks; every replica's workers share the same
queues (one per level, as in the seed), so adding replicas adds workers. A worker holds no
state a crash could lose: the task record holds the marker, the queue holds the message,
and the step's effects are one conditional write.

Handling one message "step s of task t" (the seed's work de-duplication, made exact):

- ``s == t.seq`` and t is open: read a chunk after the marker, maybe split, commit the step
  **iff t.seq is still s** (two copies of one message cannot both commit, so no chunk is
  emitted twice), then enqueue the tasks it created and the next step, then delete the
  message. A copy that lost the race just deletes itself.
- ``s == t.seq - 1`` on a *redelivery*: the step was committed but its messages may have
  been lost with a crashed worker; send them again (duplicates are harmless: see above).
- anything else is a stale duplicate: dropped.

Deeper levels are served first, so started work finishes (and memory in flight stays
bounded) before more is discovered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence

from server.config import IteratorSettings
from server.iterator import model
from server.iterator.jobcache import JobCache
from server.iterator.sizing import ChunkSizer
from server.iterator.stepping import StepInput, plan_step
from server.runtime.errors import LoomError, Unavailable
from server.runtime.logs import get_logger
from storage.errors import StorageError
from storage.ports import IterationSource, JobStore, Key, QueuedMessage, TaskRecord, WorkQueue

__all__ = ["Pipeline"]

_log = get_logger("iterator.worker")
_MAX_PIECES = 32
_DEPTH_SAMPLE_S = 1.0
"""Split pieces cut per step (a step is one transaction: DynamoDB allows 100 items)."""


class Pipeline:
    """The worker pool of one server and what it needs to send work on."""

    def __init__(
        self,
        source: IterationSource,
        queue: WorkQueue,
        store: JobStore,
        jobs: JobCache,
        settings: IteratorSettings,
        *,
        queue_names: Sequence[str],
        on_emit: Callable[[str], None],
        on_source_down: Callable[[str, str], Awaitable[None]],
    ) -> None:
        self._source = source
        self._queue = queue
        self._store = store
        self._jobs = jobs
        self._s = settings
        self._names = list(queue_names)
        self._on_emit = on_emit
        self._on_source_down = on_source_down
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

    async def sample_depths(self) -> None:
        """Reads every level's queue depth (what the metrics show between samples)."""
        for level, name in enumerate(self._names):
            self.depths[level] = await self._queue.depth(name)

    async def _sample_loop(self) -> None:
        while True:
            with contextlib.suppress(LoomError, StorageError):
                await self.sample_depths()
            await asyncio.sleep(_DEPTH_SAMPLE_S)

    async def stop(self) -> None:
        """Cancels the workers; messages they held reappear after their visibility."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def announce(self, job_id: str, tasks: Sequence[TaskRecord]) -> None:
        """Enqueues step 0 of each new task on its level's queue."""
        by_level: dict[int, list[str]] = {}
        for t in tasks:
            by_level.setdefault(t.level, []).append(model.WorkMessage(job_id, t.task_id, 0).dumps())
        for level, bodies in by_level.items():
            await self._queue.send(self._names[level], bodies)

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
                    messages = await self._queue.receive(
                        self._names[level],
                        max_messages=4,
                        visibility_s=self._s.visibility_timeout_s,
                        wait_s=0,
                    )
                    if messages:
                        worked = True
                        for message in messages:
                            await self._handle(level, message, sizer)
                        break
            except asyncio.CancelledError:
                raise
            except (LoomError, StorageError) as exc:
                _log.warning("worker: engine fault", error=str(exc))
                await asyncio.sleep(min(1.0, idle * 4))
            except Exception:  # a bug must not kill the pool; the message reappears
                _log.exception("worker: unexpected error")
                await asyncio.sleep(idle)
            if worked:
                idle = self._s.poll_interval_s
            else:
                await asyncio.sleep(idle)
                idle = min(0.5, idle * 1.5)

    async def _handle(self, level: int, message: QueuedMessage, sizer: ChunkSizer) -> None:
        queue = self._names[level]
        work = model.WorkMessage.loads(message.body)
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
        if work.seq == task.seq - 1 and message.receive_count > 1:
            await self._pass_on(work.job, task)  # a committed step whose messages may be lost
        elif work.seq == task.seq and not task.done:
            try:
                await self._step(work.job, job.rate, spec, task, sizer)
            except Unavailable as exc:
                if "source" not in str(exc):
                    raise
                await self._on_source_down(work.job, str(exc))
                await self._queue.set_visibility(queue, message.receipt, self._s.pause_poll_s)
                return
        else:
            self.dropped += 1
            self.dropped_at[level] += 1
        await self._queue.delete(queue, [message.receipt])

    async def _step(
        self, job_id: str, rate: int, spec: model.JobSpec, task: TaskRecord, sizer: ChunkSizer
    ) -> None:
        limit = sizer.limit(task.level)
        emitting = task.level == spec.emit_level
        if emitting and rate > 0:
            limit = max(1, min(limit, rate))
        started = time.perf_counter()
        rows = await self._source.read(
            task.level,
            parents=task.parents or None,
            first=task.first,
            last=task.last,
            after=task.after,
            upto=task.upto,
            limit=limit,
        )
        if len(rows) == limit:
            sizer.observe(task.level, len(rows), time.perf_counter() - started)
        cuts: list[Key] = []
        if len(rows) == limit:
            cuts = await self._split_points(task, rows, limit)
        if emitting and rate > 0 and rows:
            wait = await self._store.reserve(job_id, len(rows), float(rate), _now_ms())
            if wait > 0:
                await asyncio.sleep(wait)
        step = plan_step(task, spec, StepInput(rows, limit, cuts, _now_ms()))
        if not await self._store.commit_step(job_id, step, task.seq):
            self.dropped += 1
            self.reads_wasted += 1
            await self._store.add_counters(job_id, {model.REREAD_CHUNKS: 1})
            return
        self.steps += 1
        if step.chunk is not None:
            self.chunks_emitted += 1
            self._on_emit(job_id)
        await self._pass_on(job_id, step.task, list(step.new_tasks))

    async def _pass_on(
        self, job_id: str, task: TaskRecord, created: list[TaskRecord] | None = None
    ) -> None:
        """Enqueues what a committed step created, then the task's next step."""
        if created is None:
            created = []
            for task_id in task.spawned:
                spawned = await self._store.get_task(job_id, task_id)
                if spawned is not None:
                    created.append(spawned)
        await self.announce(job_id, created)
        if not task.done:
            body = model.WorkMessage(job_id, task.task_id, task.seq).dumps()
            await self._queue.send(self._names[task.level], [body])

    async def _split_points(self, task: TaskRecord, rows: list[Key], limit: int) -> list[Key]:
        """Where to cut the rest of a large or slow range (empty: no cut).

        Large: the first time a parent's rows read reach `large_range_threshold`, the rest
        of that parent is cut every `threshold` rows, found by the seed's ``LIMIT 1 OFFSET
        n`` probe, each probe starting at the previous cut (linear in the parent's size,
        not quadratic). Slow (work stealing): a range running longer than `steal_after_s`
        is cut once more, as far ahead as it has already read, so its remainder is shared.
        """
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
            while len(cuts) < _MAX_PIECES:
                point = await self._probe(task, parents, cursor, threshold - 1)
                if point is None:
                    break
                cuts.append(point)
                cursor = point
            return cuts
        running_ms = _now_ms() - task.started_ms
        if running_ms >= self._s.steal_after_s * 1000 and run >= 2 * limit:
            point = await self._probe(task, parents, after, run)
            if point is not None:
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


def _now_ms() -> int:
    return int(time.time() * 1000)
