"""Deleting jobs and their retention, on the embedded stores (real SQLite files)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import pytest_asyncio

from server.iterator.deletion import JobDeleter
from server.iterator.jobcache import JobCache
from server.iterator.model import WorkMessage
from server.iterator.queues import LevelQueues
from server.iterator.settings import IteratorSettings
from server.runtime.errors import FailedPrecondition
from storage.clock import now_ms
from storage.ports import JobRecord, JobStateName, TaskRecord
from storage.sqlite.jobs import SqliteJobStore
from storage.sqlite.queue import SqliteWorkQueue

ROOT = TaskRecord(
    task_id="r", level=0, parents=(), first=(1,), last=(9,), after=(), upto=(), seq=0,
    done=False, rows=0, started_ms=1, spawned=(),
)  # fmt: skip


@dataclass
class Stores:
    store: SqliteJobStore
    queue: SqliteWorkQueue
    levels: LevelQueues
    deleted: list[str]

    def deleter(self, **settings: float) -> JobDeleter:
        return JobDeleter(
            self.store,
            JobCache(self.store),
            IteratorSettings(**settings),  # type: ignore[arg-type]
            discard=self.levels.discard_job,
            on_deleted=self.deleted.append,
        )

    async def job(self, state: JobStateName, finished_ago_s: float = 0.0) -> str:
        job_id = uuid.uuid4().hex
        finished = now_ms() - int(finished_ago_s * 1000) if state != "running" else 0
        record = JobRecord(
            job_id=job_id, created_ms=now_ms(), spec="{}", state=state, rate=0, paused_by="",
            error="", finished_ms=finished, version=1,
        )  # fmt: skip
        await self.store.create_job(record, ROOT, {"tasks.0": 1})
        await self.levels.announce(job_id, [ROOT, replace(ROOT, task_id="r.0", level=1)])
        return job_id


@pytest_asyncio.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    store = await SqliteJobStore.open(tmp_path / "state.sqlite3", synchronous="NORMAL")
    queue = await SqliteWorkQueue.open(tmp_path / "queue.sqlite3", synchronous="NORMAL")
    yield Stores(store, queue, LevelQueues(queue, ["a", "b"], 0.05), [])
    await store.close()
    await queue.close()


class TestWorkMessagePrefix:
    def test_the_prefix_starts_every_body_of_its_job_only(self) -> None:
        """A job's prefix matches its messages, not those of a job whose id extends it."""
        prefix = WorkMessage.prefix("ab")
        assert WorkMessage("ab", "r.1", 3).dumps().startswith(prefix)
        assert not WorkMessage("abc", "r", 0).dumps().startswith(prefix)


class TestDeleteJob:
    async def test_a_finished_job_goes_with_its_queued_work(self, stores: Stores) -> None:
        """Its records and its messages on every level go; another job's stay."""
        job, other = await stores.job("cancelled"), await stores.job("completed")
        done = await stores.deleter().delete_job(job)
        assert done.deleted
        assert done.records == 2 + 3  # two messages; the job, its task, its counter
        assert await stores.store.get_job(job) is None
        assert stores.deleted == [job]
        assert await stores.queue.depth("a") + await stores.queue.depth("b") == 2
        assert await stores.store.get_job(other) is not None

    @pytest.mark.parametrize("state", ["running", "paused"])
    async def test_an_unfinished_job_is_refused(self, stores: Stores, state: JobStateName) -> None:
        """Running or paused: FAILED_PRECONDITION, and nothing is removed."""
        job = await stores.job(state)
        with pytest.raises(FailedPrecondition, match="cancel it first"):
            await stores.deleter().delete_job(job)
        assert await stores.store.get_job(job) is not None
        assert await stores.queue.depth("a") == 1

    async def test_an_unknown_job_is_nothing(self, stores: Stores) -> None:
        """An unknown id, or one deleted already: nothing deleted, no error."""
        deleter = stores.deleter()
        job = await stores.job("failed")
        await deleter.delete_job(job)
        for job_id in (job, "f" * 32):
            done = await deleter.delete_job(job_id)
            assert (done.deleted, done.records) == (False, 0)
        assert stores.deleted == [job]


class TestRetention:
    async def test_the_sweep_deletes_finished_jobs_past_their_retention(
        self, stores: Stores
    ) -> None:
        """Finished more than the retention ago: deleted; newer, or running: kept."""
        old = [await stores.job(s, finished_ago_s=120) for s in ("completed", "failed")]
        recent = await stores.job("cancelled", finished_ago_s=1)
        running = await stores.job("running")
        assert await stores.deleter(finished_job_retention_s=60).sweep_once() == 2
        assert sorted(stores.deleted) == sorted(old)
        for job_id in (recent, running):
            assert await stores.store.get_job(job_id) is not None

    async def test_a_zero_retention_keeps_every_job(self, stores: Stores) -> None:
        """0 keeps finished jobs for ever."""
        job = await stores.job("completed", finished_ago_s=10**6)
        assert await stores.deleter(finished_job_retention_s=0).sweep_once() == 0
        assert await stores.store.get_job(job) is not None
