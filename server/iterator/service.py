"""The Iterator's use cases: start, inspect and steer jobs; decide completion; ride out a
source outage.

Job state changes are compare-and-set on the job's version, so two replicas (or a user and
the completion checker) never both move a job: COMPLETED is reached exactly once. Each
server checks the running jobs every `check_interval_s`: counters first (cheap), then the
ledger, record by record, which must agree before the job is marked COMPLETED.

When the source database fails, the job whose step failed pauses itself ("source"); a
monitor pings the source every `source_probe_s` (through the same circuit breaker) and
resumes those jobs once it answers. When the database answers but refuses the read itself
(a column or table renamed under a running job), waiting cannot help: the job fails, and
GetJob says which level's read and what the database said.

A queue can lose a message Loom sent it: the job was created (or a step committed) but the
send failed because the queue was down, or an in-memory queue restarted empty. Nothing
would ever take that range again and the job would wait for ever, so the checker watches
each running job's counters: when they have not moved for `resend_after_s`, the current
step of every open range is sent again. A copy of a message still in the queue is dropped
by the marker check, so resending is always safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from server.iterator import model, progress
from server.iterator.deletion import Deleted, JobDeleter
from server.iterator.delivery import AckResult, Delivery
from server.iterator.jobcache import JobCache
from server.iterator.scope import Scope
from server.iterator.settings import IteratorSettings
from server.iterator.stepping import fresh_task
from server.runtime.errors import EngineRejected, FailedPrecondition, LoomError, NotFound
from server.runtime.logs import get_logger
from storage.clock import now_ms
from storage.ports import ChunkState, IterationSource, JobRecord, JobStore, TaskRecord

__all__ = ["IteratorService", "JobView"]

_log = get_logger("iterator")


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as GetJob shows it."""

    record: JobRecord
    spec: model.JobSpec
    progress: progress.Progress
    objects_per_second: float
    eta_seconds: float
    counters: dict[str, int]


class IteratorService:
    """Jobs over one source, one queue set and one job store."""

    def __init__(
        self,
        source: IterationSource,
        store: JobStore,
        jobs: JobCache,
        delivery: Delivery,
        settings: IteratorSettings,
        *,
        level_names: list[str],
        announce: Callable[[str, Sequence[TaskRecord]], Awaitable[None]],
        discard: Callable[[str], Awaitable[int]],
    ) -> None:
        self._source = source
        self._store = store
        self._jobs = jobs
        self._delivery = delivery
        self._s = settings
        self._names = level_names
        self._announce = announce
        self._meters: dict[str, progress.RateMeter] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.finished: dict[str, int] = {}
        """Jobs this server's checker moved to COMPLETED or FAILED, by state (statistics:
        summed over every replica, each job counts once)."""
        self.unsettled_chunks = 0
        """Chunks of running jobs emitted and not yet delivered/acked, at the last check."""
        self.ranges_resent = 0
        """Open ranges of stalled jobs this server sent again (statistics)."""
        self._stalled: dict[str, tuple[tuple[tuple[str, int], ...], float]] = {}
        """Per running job: its counters when they last moved, and when (monotonic)."""
        self._wake = asyncio.Event()
        """Set when a job may have just finished: the checker runs now, not at its tick."""
        self.deleter = JobDeleter(store, jobs, settings, discard=discard, on_deleted=self._deleted)

    def start(self) -> None:
        """Starts the completion checker and the source monitor."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._check_loop(), name="iterator-checker"),
                asyncio.create_task(self._source_loop(), name="iterator-source-monitor"),
                asyncio.create_task(self.deleter.run(), name="iterator-retention"),
            ]

    async def stop(self) -> None:
        """Stops the background loops."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def start_job(
        self, scope: Scope, *, rate: int, require_ack: bool, ack_timeout_s: int, request_json: str
    ) -> JobView:
        """Creates a job over `scope` (NOT_FOUND when nothing is there) and its first range."""
        try:
            found = await self._source.exists(scope.level, scope.first, scope.last)
        except EngineRejected as exc:
            raise FailedPrecondition(self._rejected(scope.level, exc.reason)) from exc
        if not found:
            raise NotFound(
                f"no {self._names[scope.level]} in {list(scope.first)}..{list(scope.last)}"
            )
        now = now_ms()
        spec = model.JobSpec(
            scope.level,
            scope.first,
            scope.last,
            scope.emit_level,
            require_ack,
            ack_timeout_s or self._s.ack_timeout_s,
            request_json,
        )
        job_id = uuid.uuid4().hex
        record = JobRecord(
            job_id=job_id,
            created_ms=now,
            spec=spec.dumps(),
            state="running",
            rate=rate,
            paused_by="",
            error="",
            finished_ms=0,
            version=1,
        )
        root = fresh_task("r", scope.level, (), now, first=scope.first, last=scope.last)
        await self._store.create_job(record, root, {model.tasks(scope.level): 1})
        try:
            await self._announce(job_id, [root])
        except LoomError:
            # The caller hears UNAVAILABLE: the job must not run behind its back. Should this
            # write fail too (or the server die first), the stall check sends the range.
            failed = replace(
                record,
                state="failed",
                error="the work queue was unavailable when the job was started",
                finished_ms=now_ms(),
            )
            with contextlib.suppress(LoomError):
                await self._store.update_job(failed, record.version)
            raise
        return await self.view(job_id)

    async def view(self, job_id: str) -> JobView:
        """The job's record, progress, rate and ETA. NOT_FOUND for an unknown job."""
        record = await self._store.get_job(job_id)
        if record is None:
            raise NotFound(f"job {job_id} not found")
        spec = model.JobSpec.loads(record.spec)
        counters = await self._store.counters(job_id)
        p = progress.progress(spec, self._names, counters)
        meter = self._meters.setdefault(job_id, progress.RateMeter())
        if record.state not in model.FINISHED:
            meter.add(p.emitted_objects)
        rate = meter.rate() if record.state == "running" else 0.0
        eta = 0.0 if record.state == "completed" else progress.eta_seconds(p, rate)
        return JobView(record, spec, p, rate, eta, counters)

    async def stream(self, job_id: str, max_objects: int) -> AsyncIterator[model.ChunkBatch]:
        """The job's emitted chunks, one batch per stream message, until it is finished."""
        spec = (await self.view(job_id)).spec
        level = self._names[spec.emit_level]
        scope_read = spec.emit_level == spec.scope_level
        async for chunks in self._delivery.stream(
            job_id, spec, max_objects, on_idle=self.check_soon
        ):
            yield model.ChunkBatch(level, scope_read, chunks)

    def check_soon(self) -> None:
        """Runs the completion check now rather than at its next tick: a stream found
        nothing left to send, so its job may be done (its consumer waits for the end)."""
        self._wake.set()

    async def ack(
        self, job_id: str, chunk_ids: Sequence[str], object_ids: Sequence[int]
    ) -> AckResult:
        """Settles acknowledged chunks and objects of a job that requires acks."""
        spec = (await self.view(job_id)).spec
        return await self._delivery.ack(job_id, spec, chunk_ids, object_ids)

    async def pause(self, job_id: str) -> JobView:
        """Pauses a running job (a paused one stays paused)."""
        return await self._transition(job_id, "paused", "user", allowed=("running", "paused"))

    async def resume(self, job_id: str) -> JobView:
        """Resumes a paused job (a running one stays running)."""
        return await self._transition(job_id, "running", "", allowed=("running", "paused"))

    async def cancel(self, job_id: str) -> JobView:
        """Cancels a job that has not finished (a cancelled one stays cancelled)."""
        return await self._transition(
            job_id, "cancelled", "", allowed=("running", "paused", "cancelled")
        )

    async def update_rate(self, job_id: str, rate: int) -> JobView:
        """Sets the job's rate limit; every worker of every replica follows within ~0.25 s."""
        while True:
            record = await self._store.get_job(job_id)
            if record is None:
                raise NotFound(f"job {job_id} not found")
            if record.state in model.FINISHED:
                raise FailedPrecondition(f"job {job_id} is {record.state}")
            if await self._store.update_job(replace(record, rate=rate), record.version):
                return await self.view(job_id)

    async def _transition(
        self, job_id: str, state: str, paused_by: str, allowed: tuple[str, ...]
    ) -> JobView:
        while True:
            record = await self._store.get_job(job_id)
            if record is None:
                raise NotFound(f"job {job_id} not found")
            if record.state not in allowed:
                raise FailedPrecondition(f"job {job_id} is {record.state}")
            if record.state == state:
                return await self.view(job_id)
            changed = replace(
                record,
                state=state,  # type: ignore[arg-type]
                paused_by=paused_by,
                error="" if state == "running" else record.error,
                finished_ms=now_ms() if state in model.FINISHED else 0,
            )
            if await self._store.update_job(changed, record.version):
                self._jobs.put(replace(changed, version=record.version + 1))
                if state in model.FINISHED:
                    self._delivery.notify(job_id)
                return await self.view(job_id)

    async def list_jobs(self, limit: int, before: tuple[int, str] | None) -> list[JobView]:
        """A page of jobs, newest first. Each is read again by its key, so a job deleted
        meanwhile (or still in a lagging index) is left out, and the page filled from the
        next ones: a short page still means the last one."""
        views: list[JobView] = []
        while len(views) < limit:
            want = limit - len(views)
            records = await self._store.list_jobs(want, before)
            for r in records:
                with contextlib.suppress(NotFound):
                    views.append(await self.view(r.job_id))
            if len(records) < want:
                break
            before = (records[-1].created_ms, records[-1].job_id)
        return views

    async def delete_job(self, job_id: str) -> Deleted:
        """Deletes a finished or cancelled job, its ledger and its queued work, returning
        once all of it is removed (`server.iterator.deletion`). Idempotent: an unknown or
        already deleted job does nothing; FAILED_PRECONDITION for a running or paused one."""
        return await self.deleter.delete_job(job_id)

    def _deleted(self, job_id: str) -> None:
        self._meters.pop(job_id, None)
        self._stalled.pop(job_id, None)
        self._delivery.notify(job_id)

    async def source_down(self, job_id: str, error: str) -> None:
        """A step of `job_id` found the source down: the job pauses itself."""
        record = await self._store.get_job(job_id)
        if record is None or record.state != "running":
            return
        changed = replace(record, state="paused", paused_by="source", error=error)
        if await self._store.update_job(changed, record.version):
            self._jobs.put(replace(changed, version=record.version + 1))
            _log.warning("job paused: source unavailable", job_id=job_id, error=error)

    async def source_rejected(self, job_id: str, level: int, error: str) -> None:
        """The source refused a read of `job_id` as written: the job fails, saying why."""
        while True:
            record = await self._store.get_job(job_id)
            if record is None or record.state in model.FINISHED:
                return
            failed = replace(
                record,
                state="failed",
                paused_by="",
                error=self._rejected(level, error),
                finished_ms=now_ms(),
            )
            if await self._store.update_job(failed, record.version):
                self._jobs.put(replace(failed, version=record.version + 1))
                self.finished["failed"] = self.finished.get("failed", 0) + 1
                self._delivery.notify(job_id)
                _log.error("job failed: the source refused its read", job_id=job_id, error=error)
                return

    def _rejected(self, level: int, error: str) -> str:
        return (
            f"the source refused the read of level {self._names[level]!r} "
            f"(iterator.levels[{level}]): {error}"
        )

    async def check_once(self) -> None:
        """Completes every running job whose counters and ledger both say it is done."""
        unsettled = 0
        running = set()
        for record in await self._store.active_jobs():
            if record.state != "running":
                continue
            running.add(record.job_id)
            spec = model.JobSpec.loads(record.spec)
            counters = await self._store.counters(record.job_id)
            p = progress.progress(spec, self._names, counters)
            self._meters.setdefault(record.job_id, progress.RateMeter()).add(p.emitted_objects)
            unsettled += max(0, p.emitted_chunks - p.settled_chunks)
            if not p.iteration_complete:
                with contextlib.suppress(LoomError):  # the queue may be down
                    await self._resend_if_stalled(record.job_id, counters)
            if not p.complete:
                continue
            settled: ChunkState = "acked" if spec.require_ack else "delivered"
            ledger = await self._store.ledger(record.job_id, settled=settled)
            problem = progress.ledger_disagreement(p, ledger)
            if problem:
                # Counters move inside the same writes as the records: they cannot disagree
                # unless something outside Loom changed the state. Never complete silently.
                _log.error("ledger disagrees with counters", job_id=record.job_id, why=problem)
                final = replace(record, state="failed", error=f"ledger check: {problem}")
            else:
                final = replace(record, state="completed")
            final = replace(final, finished_ms=now_ms())
            if await self._store.update_job(final, record.version):
                self.finished[final.state] = self.finished.get(final.state, 0) + 1
                self._delivery.notify(record.job_id)
                _log.info("job finished", job_id=record.job_id, state=final.state)
        self.unsettled_chunks = unsettled
        for job_id in self._stalled.keys() - running:  # paused or finished: start afresh
            del self._stalled[job_id]

    async def _resend_if_stalled(self, job_id: str, counters: dict[str, int]) -> None:
        """Sends every open range's current step again once the counters stood still for
        `resend_after_s`, then waits as long again before the next attempt (a failed one
        included: while the queue is down, a stalled job costs no reads every check)."""
        now = time.monotonic()
        mark = tuple(sorted(counters.items()))
        seen = self._stalled.get(job_id)
        if seen is None or seen[0] != mark:
            self._stalled[job_id] = (mark, now)
            return
        if now - seen[1] < self._s.resend_after_s:
            return
        self._stalled[job_id] = (mark, now)
        current = await self._store.get_job(job_id)  # `active_jobs` may be an index behind
        if current is None or current.state != "running":
            return
        tasks = await self._store.open_tasks(job_id)
        await self._announce(job_id, tasks)
        self.ranges_resent += len(tasks)
        _log.warning(
            "job stalled: open ranges sent again",
            job_id=job_id,
            ranges=len(tasks),
            stalled_s=round(now - seen[1], 1),
        )

    async def _check_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._s.check_interval_s):
                    await self._wake.wait()
            self._wake.clear()
            with contextlib.suppress(LoomError):
                await self.check_once()

    async def _source_loop(self) -> None:
        while True:
            await asyncio.sleep(self._s.source_probe_s)
            with contextlib.suppress(LoomError):
                waiting = [
                    r
                    for r in await self._store.active_jobs()
                    if r.state == "paused" and r.paused_by == "source"
                ]
                if not waiting:
                    continue
                try:
                    await self._source.ping()
                except LoomError:
                    continue
                for record in waiting:
                    with contextlib.suppress(FailedPrecondition, NotFound):
                        await self._resume_after_outage(record)

    async def _resume_after_outage(self, record: JobRecord) -> None:
        changed = replace(record, state="running", paused_by="", error="")
        if await self._store.update_job(changed, record.version):
            self._jobs.put(replace(changed, version=record.version + 1))
            _log.info("job resumed: source is back", job_id=record.job_id)
