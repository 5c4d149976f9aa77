"""The Iterator's job store as portable records (`server.portable`): finished jobs and their
counters only; a store with work in flight is refused, since no other store could resume it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from google.protobuf.message import Message
from loom.v1 import dump_pb2

from server.iterator.model import FINISHED
from server.portable.records import PAGE, ActiveJobs, Kind, ServiceData, as_record, same_service
from storage.ports import (
    JobRecord,
    JobStore,
    TaskRecord,
)

__all__ = ["JobData"]


class JobData:
    """The Iterator's opened job store, as `ServiceData`."""

    kinds: tuple[Kind, ...] = (Kind("jobs", dump_pb2.JobDumpRecord),)

    def __init__(self, store: JobStore, settings: object) -> None:
        self.store = store

    async def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        active = await self.store.active_jobs()
        if active:
            names = ", ".join(f"{j.job_id} ({j.state})" for j in active[:10])
            raise ActiveJobs(
                f"the iterator has {len(active)} job(s) running or paused: {names}; "
                "wait for them to finish, or cancel them (CancelJob), then dump again"
            )
        before: tuple[int, str] | None = None
        while jobs := await self.store.list_jobs(PAGE, before):
            page: list[Message] = []
            for job in jobs:
                counters = await self.store.counters(job.job_id)
                page.append(_job_message(job, counters))
            yield "jobs", page
            before = (jobs[-1].created_ms, jobs[-1].job_id)

    async def subjects(self) -> AsyncIterator[str]:
        """Job ids: `DeleteJob` records the job it deleted in the erasure log."""
        before: tuple[int, str] | None = None
        while jobs := await self.store.list_jobs(PAGE, before):
            for job in jobs:
                yield job.job_id
            before = (jobs[-1].created_ms, jobs[-1].job_id)

    async def erase(self, subjects: Sequence[str]) -> None:
        """Deletes the jobs and everything stored for them (a restored store has no work in
        flight to refuse: a job restored running is deleted too, as it was before)."""
        for job_id in subjects:
            await self.store.delete_job(job_id)

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        for record in (as_record(r, dump_pb2.JobDumpRecord) for r in records):
            if record.state not in FINISHED:
                raise ValueError(f"job {record.job_id}: only finished jobs load ({record.state})")
            if await self.store.get_job(record.job_id) is not None:
                continue  # a job id is unique: present means loaded already
            job = JobRecord(
                job_id=record.job_id,
                created_ms=record.created_ms,
                spec=record.spec,
                state=record.state,  # checked above
                rate=record.rate,
                paused_by=record.paused_by,
                error=record.error,
                finished_ms=record.finished_ms,
                version=record.version,
            )
            # A finished job's one task is done: nothing will read it again.
            root = TaskRecord(
                task_id="root", level=0, parents=(), first=(), last=(), after=(), upto=(),
                seq=0, done=True, rows=0, started_ms=record.created_ms, spawned=(),
            )  # fmt: skip
            await self.store.create_job(job, root, dict(record.counters))

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        target = same_service(self, other)
        found: list[str] = []
        before: tuple[int, str] | None = None
        while jobs := await self.store.list_jobs(PAGE, before):
            for job in jobs:
                theirs = await target.store.get_job(job.job_id)
                mine_counters = await self.store.counters(job.job_id)
                their_counters = await target.store.counters(job.job_id)
                if theirs != job or mine_counters != their_counters:
                    found.append(f"job {job.job_id} differs")
                    if len(found) >= limit:
                        return found
            before = (jobs[-1].created_ms, jobs[-1].job_id)
        return found

    async def close(self) -> None:
        await self.store.close()


def _job_message(job: JobRecord, counters: dict[str, int]) -> dump_pb2.JobDumpRecord:
    return dump_pb2.JobDumpRecord(
        job_id=job.job_id,
        created_ms=job.created_ms,
        spec=job.spec,
        state=job.state,
        rate=job.rate,
        paused_by=job.paused_by,
        error=job.error,
        finished_ms=job.finished_ms,
        version=job.version,
        counters=counters,
    )
