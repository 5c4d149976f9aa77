"""Deleting finished jobs: on request (DeleteJob) and after their retention.

A job may go once it is finished (completed, failed or cancelled): nothing will write its
records again but a straggling worker's statistics, and a step it tries is refused by the
missing task's `seq`. Deletion is synchronous: every record of a job is found by its id
(its own rows on SQLite, its own partition on DynamoDB), never by scanning other jobs'. First
the job's work messages still queued (their bodies start with the job id: one DELETE over each
level's queue on SQLite, one pass over the visible messages on SQS), then its records, the job
record last (`storage.ports.JobStore.delete_job`), so a deletion cut short leaves the job
listed and a retry, or the next retention sweep, removes the rest. The deletion runs
shielded from the caller's cancellation, so a deadline that passes does not cut it short.
Unknown ids do nothing.

Retention: every `retention_sweep_s` each server pages through the jobs and deletes those
finished more than `finished_job_retention_s` ago (0 keeps them). Two replicas may both
delete one job: deleting is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from server.iterator.jobcache import JobCache
from server.iterator.model import FINISHED
from server.iterator.settings import IteratorSettings
from server.runtime.errors import FailedPrecondition, LoomError
from server.runtime.logs import get_logger
from storage.clock import now_ms
from storage.ports import JobStore

__all__ = ["Deleted", "JobDeleter"]

_log = get_logger("iterator")
_PAGE = 200


@dataclass(frozen=True, slots=True)
class Deleted:
    """What one deletion did."""

    deleted: bool
    """The job was there and is now gone (False: nothing to delete)."""
    records: int
    """Stored records removed: the job's own and its queued work messages."""


class JobDeleter:
    """Deletes finished jobs from the job store and the work queues."""

    __slots__ = ("_discard", "_jobs", "_on_deleted", "_running", "_s", "_store", "deleted_jobs")

    def __init__(
        self,
        store: JobStore,
        jobs: JobCache,
        settings: IteratorSettings,
        *,
        discard: Callable[[str], Awaitable[int]],
        on_deleted: Callable[[str], None],
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._s = settings
        self._discard = discard
        self._on_deleted = on_deleted
        self._running: set[asyncio.Future[Deleted]] = set()
        self.deleted_jobs = 0
        """Jobs this server deleted, by request or by retention (statistics)."""

    async def delete_job(self, job_id: str) -> Deleted:
        """Deletes a finished job and everything stored for it. FAILED_PRECONDITION for a
        running or paused job; an unknown (or already deleted) job does nothing."""
        record = await self._store.get_job(job_id)
        if record is None:
            # Nothing listed; a straggler's counters of a deleted job may remain: cheap to
            # look, and they name no scope.
            removed = await self._store.delete_job(job_id)
            return Deleted(deleted=False, records=removed)
        if record.state not in FINISHED:
            raise FailedPrecondition(
                f"job {job_id} is {record.state}: cancel it first (CancelJob), then delete it"
            )
        # Shielded: a caller whose deadline passes (a very large job on DynamoDB) leaves the
        # deletion running here to its end; its retry meanwhile deletes the same records.
        work = asyncio.ensure_future(self._remove(job_id))
        self._running.add(work)
        work.add_done_callback(self._finished)
        return await asyncio.shield(work)

    async def _remove(self, job_id: str) -> Deleted:
        removed = await self._discard(job_id)
        removed += await self._store.delete_job(job_id)
        self._jobs.forget(job_id)
        self._on_deleted(job_id)
        self.deleted_jobs += 1
        _log.info("job deleted", job_id=job_id, records=removed)
        return Deleted(deleted=True, records=removed)

    def _finished(self, work: asyncio.Future[Deleted]) -> None:
        self._running.discard(work)
        if not work.cancelled() and work.exception() is not None:
            _log.warning("job deletion failed", error=str(work.exception()))

    async def sweep_once(self) -> int:
        """Deletes every job finished more than the retention ago; how many."""
        keep_ms = int(self._s.finished_job_retention_s * 1000)
        if keep_ms <= 0:
            return 0
        cutoff = now_ms() - keep_ms
        expired: list[str] = []
        before: tuple[int, str] | None = None
        while jobs := await self._store.list_jobs(_PAGE, before):
            expired += [
                j.job_id
                for j in jobs
                if j.state in FINISHED and (j.finished_ms or j.created_ms) <= cutoff
            ]
            before = (jobs[-1].created_ms, jobs[-1].job_id)
        for job_id in expired:
            with contextlib.suppress(FailedPrecondition):
                await self.delete_job(job_id)
        return len(expired)

    async def run(self) -> None:
        """Sweeps every `retention_sweep_s` (never stopped by a storage fault)."""
        while True:
            await asyncio.sleep(self._s.retention_sweep_s)
            try:
                count = await self.sweep_once()
            except LoomError as exc:
                _log.warning("retention sweep failed", error=str(exc))
                continue
            if count:
                _log.info("finished jobs past their retention deleted", jobs=count)
