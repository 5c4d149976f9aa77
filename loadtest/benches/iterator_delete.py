"""What DeleteJob costs: a finished job with N chunks deleted, per engine.

``python -m loadtest.benches.iterator_delete [--engines sqlite,dynamodb] [--chunks 2000]
[--objects 500] [--queued 200]``

For each engine of the Iterator's state (SQLite in a temporary file; DynamoDB Local from
LOOM_TEST_DYNAMODB_ENDPOINT) and its queue (SQLite; SQS from LOOM_TEST_SQS_ENDPOINT), writes
one job as the pipeline does, through the stores' own ports: N committed steps, each with
its task and a chunk of `--objects` two-integer keys, all delivered, plus `--queued` work
messages of the job (and as many of another job) left in its level's queue; the job is
then COMPLETED. Then deletes it exactly as DeleteJob does (`JobDeleter`: the queue's
messages of the job, then every record, the job last) and prints the time, the records
removed and, as the same-run baseline, the time the N steps took to write.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from server.iterator.deletion import JobDeleter
from server.iterator.jobcache import JobCache
from server.iterator.model import WorkMessage
from server.iterator.queues import LevelQueues
from server.iterator.settings import IteratorSettings
from storage.dynamodb.jobs import DynamoDBJobStore
from storage.ports import ChunkRecord, JobRecord, JobStore, Step, TaskRecord, WorkQueue
from storage.settings import DynamoDBSettings, SqsSettings
from storage.sqlite.jobs import SqliteJobStore
from storage.sqlite.queue import SqliteWorkQueue
from storage.sqs.queue import SqsWorkQueue

__all__ = ["main"]

_LEVEL = "bench"


def _root() -> TaskRecord:
    return TaskRecord(
        task_id="r", level=0, parents=(), first=(1,), last=(10**9,), after=(), upto=(),
        seq=0, done=False, rows=0, started_ms=1, spawned=(),
    )  # fmt: skip


def _chunk(seq: int, objects: int) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=f"r/{seq}", width=2, keys=os.urandom(16 * objects), count=objects,
        state="ready", lease_until_ms=0, sends=0, acked_keys=b"", version=1,
    )  # fmt: skip


async def _open(engine: str, data: Path) -> tuple[JobStore, WorkQueue]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}-"
    if engine == "sqlite":
        store: JobStore = await SqliteJobStore.open(data / "state.sqlite3", synchronous="NORMAL")
        queue: WorkQueue = await SqliteWorkQueue.open(data / "queue.sqlite3", synchronous="NORMAL")
        return store, queue
    store = await DynamoDBJobStore.open(
        DynamoDBSettings(
            endpoint_url=os.environ["LOOM_TEST_DYNAMODB_ENDPOINT"],
            table_prefix=prefix,
            create_tables=True,
        )
    )
    queue = await SqsWorkQueue.open(
        SqsSettings(
            endpoint_url=os.environ["LOOM_TEST_SQS_ENDPOINT"],
            queue_prefix=prefix,
            create_queues=True,
        ),
        [_LEVEL],
    )
    return store, queue


async def _write(store: JobStore, queue: WorkQueue, chunks: int, objects: int, queued: int) -> str:
    job = JobRecord(
        job_id=uuid.uuid4().hex, created_ms=1, spec="{}", state="running", rate=0,
        paused_by="", error="", finished_ms=0, version=1,
    )  # fmt: skip
    root = _root()
    await store.create_job(job, root, {"tasks.0": 1})
    for seq in range(chunks):
        child = replace(root, task_id=f"r.{seq}", level=1, done=True)
        step = Step(
            task=replace(root, after=(seq,), seq=seq + 1, done=seq == chunks - 1),
            new_tasks=[child],
            chunk=_chunk(seq, objects),
            counters={"found.0": objects, "emitted_chunks": 1, "emitted_objects": objects},
        )
        assert await store.commit_step(job.job_id, step, seq)
        if seq % 50 == 49 or seq == chunks - 1:
            done = [f"r/{i}" for i in range(seq - seq % 50, seq + 1)]
            await store.settle_chunks(job.job_id, done, "delivered")
    other = uuid.uuid4().hex
    await queue.send(_LEVEL, [WorkMessage(job.job_id, f"r.{i}", 0).dumps() for i in range(queued)])
    await queue.send(_LEVEL, [WorkMessage(other, f"r.{i}", 0).dumps() for i in range(queued)])
    assert await store.update_job(replace(job, state="completed", finished_ms=2), 1)
    return job.job_id


async def _one(engine: str, chunks: int, objects: int, queued: int) -> None:
    with tempfile.TemporaryDirectory(prefix="loom-delete-bench-") as tmp:
        store, queue = await _open(engine, Path(tmp))
        try:
            started = time.perf_counter()
            job_id = await _write(store, queue, chunks, objects, queued)
            wrote_s = time.perf_counter() - started
            settings = IteratorSettings()
            levels = LevelQueues(queue, [_LEVEL], settings.poll_interval_s)
            deleter = JobDeleter(
                store,
                JobCache(store),
                settings,
                discard=levels.discard_job,
                on_deleted=lambda _: None,
            )
            started = time.perf_counter()
            done = await deleter.delete_job(job_id)
            delete_s = time.perf_counter() - started
            assert done.deleted
            assert await store.get_job(job_id) is None
            left = await queue.depth(_LEVEL)
        finally:
            await store.close()
            await queue.close()
    print(
        f"{engine:9} chunks={chunks:,} objects/chunk={objects} queued={queued}: "
        f"delete {delete_s:.2f} s, {done.records:,} records removed "
        f"({done.records / delete_s:,.0f}/s); writing the job took {wrote_s:.2f} s "
        f"(delete/write {delete_s / wrote_s:.3f}); other job's messages left {left}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="sqlite,dynamodb")
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--queued", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    for engine in args.engines.split(","):
        asyncio.run(_one(engine, args.chunks, args.objects, args.queued))


if __name__ == "__main__":
    main()
