"""The Iterator JobStore contract, run unchanged on SQLite and DynamoDB Local."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

from server.iterator.pacing import reserve
from storage.ports import ChunkRecord, JobRecord, JobStore, Positions, Step, TaskRecord


def _job(created: int = 1000) -> JobRecord:
    return JobRecord(
        job_id=uuid.uuid4().hex,
        created_ms=created,
        spec='{"x":1}',
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
    started_ms=5,
    spawned=(),
)


def _chunk(cid: str, n: int) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=cid,
        width=1,
        keys=bytes(8 * n),
        count=n,
        state="ready",
        lease_until_ms=0,
        sends=0,
        acked_keys=b"",
        version=1,
    )


async def test_job_round_trip_and_versioned_update(job_store: JobStore) -> None:
    """A created job reads back; updates need the current version."""
    job = _job()
    await job_store.create_job(job, ROOT, {"tasks.0": 1})
    assert await job_store.get_job(job.job_id) == job
    assert await job_store.get_task(job.job_id, "r") == ROOT
    assert await job_store.counters(job.job_id) == {"tasks.0": 1}
    paused = replace(job, state="paused", paused_by="user")
    assert await job_store.update_job(paused, 1)
    assert await job_store.update_job(replace(job, state="cancelled"), 1) is False
    assert await job_store.get_job(job.job_id) == replace(paused, version=2)
    assert await job_store.get_job("f" * 32) is None


async def test_jobs_list_newest_first_and_active(job_store: JobStore) -> None:
    """list_jobs pages newest first; active_jobs holds running and paused ones only."""
    jobs = [_job(created=1000 + i) for i in range(5)]
    for j in jobs:
        await job_store.create_job(j, ROOT, {})
    done = replace(jobs[0], state="completed")
    assert await job_store.update_job(done, 1)
    page = await job_store.list_jobs(3, None)
    assert [j.job_id for j in page] == [j.job_id for j in reversed(jobs)][:3]
    rest = await job_store.list_jobs(3, (page[-1].created_ms, page[-1].job_id))
    assert [j.job_id for j in rest] == [jobs[1].job_id, jobs[0].job_id]
    active = {j.job_id for j in await job_store.active_jobs()}
    assert active >= {j.job_id for j in jobs[1:]}
    assert jobs[0].job_id not in active


async def test_commit_step_is_conditional_and_atomic(job_store: JobStore) -> None:
    """Of two commits of the same step exactly one applies, with its tasks, chunk and
    counters; the loser writes nothing."""
    job = _job()
    await job_store.create_job(job, ROOT, {"tasks.0": 1})
    child = TaskRecord(
        task_id="r.0",
        level=1,
        parents=(1, 2),
        first=(),
        last=(),
        after=(),
        upto=(),
        seq=0,
        done=False,
        rows=0,
        started_ms=5,
        spawned=(),
    )
    winner = Step(
        task=replace(ROOT, after=(4,), seq=1, spawned=("r.0",)),
        new_tasks=[child],
        chunk=_chunk("r/0", 3),
        counters={"found.0": 3, "tasks.1": 1},
    )
    loser = Step(
        task=replace(ROOT, after=(9,), seq=1),
        new_tasks=[],
        chunk=_chunk("r/0-other", 9),
        counters={"found.0": 9},
    )
    results = await asyncio.gather(
        job_store.commit_step(job.job_id, winner, 0), job_store.commit_step(job.job_id, loser, 0)
    )
    assert sorted(results) == [False, True]
    won = winner if results[0] else loser
    assert await job_store.get_task(job.job_id, "r") == won.task
    counters = await job_store.counters(job.job_id)
    assert counters["found.0"] == (3 if won is winner else 9)
    ledger = await job_store.ledger(job.job_id, settled="delivered")
    assert (ledger.chunks, ledger.objects) == (1, 3 if won is winner else 9)
    assert ledger.tasks == (2 if won is winner else 1)
    assert await job_store.commit_step(job.job_id, winner, 0) is False


async def test_open_tasks_are_the_tasks_not_done(job_store: JobStore) -> None:
    """open_tasks lists the job's unfinished tasks at their current step, and only its own."""
    job, other = _job(), _job()
    await job_store.create_job(job, ROOT, {})
    await job_store.create_job(other, ROOT, {})
    assert await job_store.open_tasks(job.job_id) == [ROOT]
    children = [
        TaskRecord(
            task_id=f"r.{i}",
            level=1,
            parents=(i,),
            first=(),
            last=(),
            after=(),
            upto=(),
            seq=0,
            done=False,
            rows=0,
            started_ms=5,
            spawned=(),
        )
        for i in range(3)
    ]
    root_done = replace(ROOT, after=(9,), seq=1, done=True, spawned=("r.0", "r.1", "r.2"))
    assert await job_store.commit_step(
        job.job_id, Step(task=root_done, new_tasks=children, chunk=None, counters={}), 0
    )
    child_done = replace(children[1], seq=1, done=True)
    assert await job_store.commit_step(
        job.job_id, Step(task=child_done, new_tasks=[], chunk=None, counters={}), 0
    )
    child_on = replace(children[2], after=(7,), seq=1)
    assert await job_store.commit_step(
        job.job_id, Step(task=child_on, new_tasks=[], chunk=None, counters={}), 0
    )
    open_now = sorted(await job_store.open_tasks(job.job_id), key=lambda t: t.task_id)
    assert open_now == [children[0], child_on]
    assert await job_store.open_tasks(other.job_id) == [ROOT]
    assert await job_store.open_tasks("f" * 32) == []


async def test_chunks_lease_to_one_caller_and_settle_once(job_store: JobStore) -> None:
    """A ready chunk is leased by one caller; an expired lease makes it available again;
    settling counts each chunk once and ignores unknown ids."""
    job = _job()
    await job_store.create_job(job, ROOT, {})
    for i in range(3):
        step = Step(
            task=replace(ROOT, seq=i + 1),
            new_tasks=[],
            chunk=_chunk(f"r/{i}", 10),
            counters={"emitted_chunks": 1},
        )
        assert await job_store.commit_step(job.job_id, step, i)
    a, b = await asyncio.gather(
        job_store.lease_chunks(
            job.job_id, now_ms=100, lease_ms=1000, max_objects=25, max_chunks=10
        ),
        job_store.lease_chunks(
            job.job_id, now_ms=100, lease_ms=1000, max_objects=25, max_chunks=10
        ),
    )
    ids_a, ids_b = {c.chunk_id for c in a}, {c.chunk_id for c in b}
    assert not ids_a & ids_b
    assert ids_a | ids_b <= {"r/0", "r/1", "r/2"}
    assert all(c.sends == 1 and c.state == "leased" for c in a + b)
    everything = set()
    for _ in range(5):  # whatever was not leased above is still ready
        more = await job_store.lease_chunks(
            job.job_id, now_ms=200, lease_ms=1000, max_objects=100, max_chunks=10
        )
        everything |= {c.chunk_id for c in more}
    assert everything | ids_a | ids_b == {"r/0", "r/1", "r/2"}
    again = await job_store.lease_chunks(
        job.job_id, now_ms=5000, lease_ms=1000, max_objects=100, max_chunks=10
    )
    assert {c.chunk_id for c in again} == {"r/0", "r/1", "r/2"}
    assert all(c.sends == 2 for c in again)
    assert await job_store.settle_chunks(job.job_id, ["r/0", "r/1", "nope"], "acked") == (2, 20)
    assert await job_store.settle_chunks(job.job_id, ["r/0"], "acked") == (0, 0)
    counters = await job_store.counters(job.job_id)
    assert (counters["acked_chunks"], counters["acked_objects"]) == (2, 20)
    later = await job_store.lease_chunks(
        job.job_id, now_ms=99_000, lease_ms=1000, max_objects=100, max_chunks=10
    )
    assert [c.chunk_id for c in later] == ["r/2"]
    ledger = await job_store.ledger(job.job_id, settled="acked")
    assert (ledger.chunks, ledger.chunks_unsettled, ledger.objects) == (3, 1, 30)


async def test_settling_checks_the_counts_it_is_given(job_store: JobStore) -> None:
    """Counts passed from a lease spare a read, but a wrong one is never applied: the
    chunk is settled with its own count. Many chunks settle in one call."""
    job = _job()
    await job_store.create_job(job, ROOT, {})
    for i in range(150):
        step = Step(
            task=replace(ROOT, seq=i + 1),
            new_tasks=[],
            chunk=_chunk(f"r/{i}", 2),
            counters={"emitted_chunks": 1},
        )
        assert await job_store.commit_step(job.job_id, step, i)
    ids = [f"r/{i}" for i in range(150)]
    hints = {cid: 2 for cid in ids} | {"r/7": 999}
    assert await job_store.settle_chunks(job.job_id, ids, "delivered", hints) == (150, 300)
    assert await job_store.settle_chunks(job.job_id, ids, "delivered", hints) == (0, 0)
    counters = await job_store.counters(job.job_id)
    assert (counters["delivered_chunks"], counters["delivered_objects"]) == (150, 300)
    ledger = await job_store.ledger(job.job_id, settled="delivered")
    assert (ledger.chunks, ledger.chunks_unsettled) == (150, 0)


async def test_a_chunk_keeps_its_keys_through_every_lease(job_store: JobStore) -> None:
    """What a step committed is what every lease of its chunk hands out, byte for byte,
    the first time and after a lease ran out; a lease takes only as many chunks as its
    object budget allows."""
    job = _job()
    await job_store.create_job(job, ROOT, {})
    keys = {
        f"r/{i}": Positions.of(2, [(i, 10 * i + j) for j in range(50)]).tobytes() for i in range(3)
    }
    for i, (cid, data) in enumerate(keys.items()):
        chunk = replace(_chunk(cid, 50), width=2, keys=data)
        step = Step(task=replace(ROOT, seq=i + 1), new_tasks=[], chunk=chunk, counters={})
        assert await job_store.commit_step(job.job_id, step, i)
    first = await job_store.lease_chunks(
        job.job_id, now_ms=1, lease_ms=100, max_objects=100, max_chunks=10
    )
    assert len(first) == 2
    assert {c.chunk_id: c.keys for c in first} == {c.chunk_id: keys[c.chunk_id] for c in first}
    assert all(c.width == 2 for c in first)
    again = await job_store.lease_chunks(
        job.job_id, now_ms=1000, lease_ms=100, max_objects=1000, max_chunks=10
    )
    assert {c.chunk_id: c.keys for c in again} == keys
    (leased,) = [c for c in await job_store.leased_chunks(job.job_id, 10) if c.chunk_id == "r/2"]
    assert leased.keys == keys["r/2"]


async def test_partial_acks_are_versioned(job_store: JobStore) -> None:
    """Per-object acks of a leased chunk are saved by compare-and-set on its version."""
    job = _job()
    await job_store.create_job(job, ROOT, {})
    assert await job_store.commit_step(
        job.job_id,
        Step(task=replace(ROOT, seq=1), new_tasks=[], chunk=_chunk("r/0", 4), counters={}),
        0,
    )
    (leased,) = await job_store.lease_chunks(
        job.job_id, now_ms=1, lease_ms=10_000, max_objects=10, max_chunks=10
    )
    assert [c.chunk_id for c in await job_store.leased_chunks(job.job_id, 10)] == ["r/0"]
    assert await job_store.save_chunk_acks(
        job.job_id, replace(leased, acked_keys=b"x"), leased.version
    )
    assert not await job_store.save_chunk_acks(job.job_id, leased, leased.version)
    (stored,) = await job_store.leased_chunks(job.job_id, 10)
    assert stored.acked_keys == b"x"


async def test_the_pace_is_swapped_by_compare_and_set(job_store: JobStore) -> None:
    """A new job's pace is 0.0; set_pace writes only over the pace it expects, and a job
    that does not exist has no pace to read or set."""
    job = _job()
    await job_store.create_job(job, ROOT, {})
    assert await job_store.get_pace(job.job_id) == 0.0
    assert await job_store.set_pace(job.job_id, 11_000.5, expected_ms=0.0)
    assert not await job_store.set_pace(job.job_id, 12_000.0, expected_ms=0.0)
    assert await job_store.get_pace(job.job_id) == 11_000.5
    assert await job_store.set_pace(job.job_id, 1e12 / 3, expected_ms=11_000.5)
    assert await job_store.get_pace(job.job_id) == 1e12 / 3
    assert await job_store.get_pace("f" * 32) is None
    assert not await job_store.set_pace("f" * 32, 5.0, expected_ms=0.0)
    assert await job_store.get_pace("f" * 32) is None


async def test_rate_reservations_queue_up(job_store: JobStore) -> None:
    """Booking objects at a rate makes the next booking wait for the earlier ones."""
    job = _job()
    await job_store.create_job(job, ROOT, {})
    assert await reserve(job_store, job.job_id, objects=100, rate=100.0, now_ms=10_000) == 0.0
    assert await reserve(job_store, job.job_id, objects=50, rate=100.0, now_ms=10_000) == 1.0
    assert await reserve(job_store, job.job_id, objects=1, rate=100.0, now_ms=12_000) == 0.0
    await job_store.add_counters(job.job_id, {"ignored_acks": 2})
    await job_store.add_counters(job.job_id, {"ignored_acks": 3})
    assert (await job_store.counters(job.job_id))["ignored_acks"] == 5


async def test_concurrent_bookings_form_one_queue(job_store: JobStore) -> None:
    """Bookings racing from many workers each get their own slot: no two start together and
    none is lost, as the swaps that lost re-read the pace and book after the winner."""
    job = _job()
    await job_store.create_job(job, ROOT, {})
    waits = await asyncio.gather(
        *(reserve(job_store, job.job_id, objects=10, rate=100.0, now_ms=50_000) for _ in range(8))
    )
    assert sorted(waits) == [i / 10 for i in range(8)]
    assert await job_store.get_pace(job.job_id) == 50_800.0


async def test_delete_job_removes_every_record_of_it(job_store: JobStore) -> None:
    """delete_job removes the job, its tasks, counters, chunks (keys and acks) and pace;
    another job is untouched; a second delete and an unknown id remove nothing."""
    job, other = _job(created=2000), _job(created=2001)
    for j in (job, other):
        await job_store.create_job(j, ROOT, {"tasks.0": 1})
    chunks = [_chunk(f"r/{i}", 4) for i in range(30)]
    for seq, chunk in enumerate(chunks):
        step = Step(
            task=replace(ROOT, after=(seq,), seq=seq + 1),
            new_tasks=[replace(ROOT, task_id=f"r.{seq}", level=1)],
            chunk=chunk,
            counters={"found.0": 4},
        )
        assert await job_store.commit_step(job.job_id, step, seq)
    await job_store.lease_chunks(job.job_id, now_ms=10, lease_ms=10, max_objects=20, max_chunks=5)
    await job_store.settle_chunks(job.job_id, ["r/0", "r/1"], "delivered")
    assert await job_store.set_pace(job.job_id, 50.0, expected_ms=0.0)
    assert await job_store.update_job(replace(job, state="completed", finished_ms=3), 1)

    removed = await job_store.delete_job(job.job_id)
    # the job, 31 tasks, 30 chunks (with their keys: one record or two, by engine), counters
    assert removed >= 1 + 31 + 30 + 1
    assert await job_store.get_job(job.job_id) is None
    assert await job_store.get_task(job.job_id, "r") is None
    assert await job_store.open_tasks(job.job_id) == []
    assert await job_store.counters(job.job_id) == {}
    assert await job_store.get_pace(job.job_id) is None
    assert await job_store.leased_chunks(job.job_id, 100) == []
    leased = await job_store.lease_chunks(
        job.job_id, now_ms=10**12, lease_ms=10, max_objects=10**6, max_chunks=100
    )
    assert leased == []
    ledger = await job_store.ledger(job.job_id, settled="delivered")
    assert (ledger.tasks, ledger.chunks, ledger.objects) == (0, 0, 0)
    listed = [j.job_id for j in await job_store.list_jobs(1000, None)]
    assert job.job_id not in listed
    assert other.job_id in listed
    assert await job_store.get_task(other.job_id, "r") == ROOT
    assert await job_store.counters(other.job_id) == {"tasks.0": 1}
    assert await job_store.delete_job(job.job_id) == 0
    assert await job_store.delete_job("e" * 32) == 0


async def test_a_deleted_jobs_step_writes_nothing(job_store: JobStore) -> None:
    """A straggling worker's step of a deleted job is refused: its task is gone."""
    job = _job()
    await job_store.create_job(job, ROOT, {"tasks.0": 1})
    await job_store.delete_job(job.job_id)
    step = Step(
        task=replace(ROOT, after=(1,), seq=1), new_tasks=[], chunk=_chunk("r/0", 2), counters={}
    )
    assert await job_store.commit_step(job.job_id, step, 0) is False
    ledger = await job_store.ledger(job.job_id, settled="delivered")
    assert (ledger.tasks, ledger.chunks) == (0, 0)
    assert await job_store.get_job(job.job_id) is None
