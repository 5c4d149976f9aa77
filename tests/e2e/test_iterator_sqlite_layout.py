"""An embedded job store written before chunk keys had a table of their own still serves.

Chunks once kept their keys in their state row (``iter_chunk.keys``); they now live in
``iter_chunk_keys``, written once. A state file of the old layout, with a job's chunks not
yet delivered when the server was upgraded, must hand out those chunks' keys as they were:
nothing acknowledged or emitted may be lost to a layout change.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from storage.ports import ChunkRecord, JobRecord, Positions, TaskRecord
from storage.sqlite.job_rows import CHUNK_FIELDS, chunk_params, insert_sql
from storage.sqlite.jobs import SqliteJobStore

JOB = JobRecord(
    job_id="old",
    created_ms=1,
    spec="{}",
    state="running",
    rate=0,
    paused_by="",
    error="",
    finished_ms=0,
    version=1,
)
ROOT = TaskRecord(
    task_id="r",
    level=0,
    parents=(),
    first=(1,),
    last=(9,),
    after=(),
    upto=(),
    seq=0,
    done=False,
    rows=0,
    started_ms=0,
    spawned=(),
)


async def test_chunks_of_the_old_layout_lease_with_their_keys(tmp_path: Path) -> None:
    """A chunk row holding its own keys (the old layout) leases with those keys, and
    settles."""
    path = tmp_path / "iterator-state.sqlite3"
    store = await SqliteJobStore.open(path)
    await store.create_job(JOB, ROOT, {})
    await store.close()
    old_keys = Positions.of(2, [(7, 70), (7, 71), (8, 80)]).tobytes()
    old = ChunkRecord(
        chunk_id="r/0",
        width=2,
        keys=old_keys,
        count=3,
        state="ready",
        lease_until_ms=0,
        sends=0,
        acked_keys=b"",
        version=1,
    )
    with sqlite3.connect(path) as conn:  # as an earlier Loom wrote it: keys in the row
        conn.execute(insert_sql("iter_chunk", CHUNK_FIELDS), chunk_params("old", old))
    store = await SqliteJobStore.open(path)
    try:
        leased = await store.lease_chunks(
            "old", now_ms=1, lease_ms=1000, max_objects=100, max_chunks=10
        )
        assert [(c.chunk_id, c.keys, c.count) for c in leased] == [("r/0", old_keys, 3)]
        assert await store.settle_chunks("old", ["r/0"], "delivered") == (1, 3)
    finally:
        await store.close()
