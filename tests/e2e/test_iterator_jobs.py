"""Whole Iterator jobs through the real server, on the embedded engines (SQLite source,
queue and state) and on the distributed ones (PostgreSQL source, SQS, DynamoDB): the
emitted set equals a plain SQL query of the same scope, nothing missing, nothing twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from loadtest.corpora.iterator import (
    CorpusShape,
    expected_ids,
    generate,
    private_database,
    write_url,
)
from tests.conftest import selected_engines
from tests.e2e.test_metrics import scrape, value
from tests.engines import settings_for, source_url
from tests.serving import Running, eventually, free_port, running_server, violations

SETUPS = {
    "sqlite": ("sqlite", {"iterator_queue": "sqlite", "iterator_state": "sqlite"}),
    "postgres-sqs-dynamodb": (
        "postgres",
        {"iterator_queue": "sqs", "iterator_state": "dynamodb"},
    ),
}
SHAPE = CorpusShape(enterprises=4, users_per_enterprise=30, large_users=1, large_user_files=3000)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "setup" in metafunc.fixturenames:
        wanted = []
        for name, (source, stores) in SETUPS.items():
            needed = {source, *stores.values()}
            if set(selected_engines(metafunc.config, tuple(needed))) == needed:
                wanted.append(name)
        metafunc.parametrize("setup", wanted, ids=wanted, scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def iterator(setup: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """A server iterating a Box-like corpus (large users split at 1,000 files), in a
    database of its own, with its metrics served."""
    source, stores = SETUPS[setup]
    data = Path(tmp_path_factory.mktemp(f"it-{setup}"))
    async with private_database(source_url(source, data)) as url:
        await write_url(url, generate(SHAPE))
        settings = settings_for(source, data, **stores)
        settings = replace(
            settings,
            server=replace(settings.server, metrics_port=free_port()),
            iterator=replace(
                settings.iterator,
                source_url=url,
                large_range_threshold=1000,
                max_chunk=700,
                check_interval_s=0.1,
            ),
        )
        async with running_server(settings) as running:
            running.source_url = url  # type: ignore[attr-defined]
            yield running


async def _truth(url: str, scope_level: int, emit_level: int, first: int, last: int) -> list[int]:
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(expected_ids(scope_level, emit_level)), {"first": first, "last": last}
        )
        ids = [r[0] for r in rows]
    await engine.dispose()
    return ids


async def _drain(
    stub: iterator_pb2_grpc.IteratorStub, job_id: str, ack: bool = False
) -> list[pb.ObjectChunk]:
    chunks = []
    async for batch in stub.StreamObjects(pb.StreamObjectsRequest(job_id=job_id), timeout=120):
        chunks.extend(batch.chunks)
        if ack:
            await stub.AckObjects(
                pb.AckObjectsRequest(job_id=job_id, chunk_ids=[c.chunk_id for c in batch.chunks])
            )
    return chunks


@pytest.mark.parametrize(
    ("scope", "scope_level", "emit", "emit_level", "first", "last"),
    [
        (
            {"enterprise_range": pb.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=4)},
            0,
            "file",
            2,
            1,
            4,
        ),
        ({"enterprise_id": 2}, 0, "version", 3, 2, 2),
        (
            {"level_scope": pb.LevelScope(level="user", first_key=[1], last_key=[60])},
            1,
            "version",
            3,
            1,
            60,
        ),
        (
            {"enterprise_range": pb.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=4)},
            0,
            "user",
            1,
            1,
            4,
        ),
    ],
    ids=["range-files", "enterprise-versions", "users-versions", "range-users"],
)
async def test_job_emits_exactly_the_scope(
    iterator: Running,
    scope: dict[str, Any],
    scope_level: int,
    emit: str,
    emit_level: int,
    first: int,
    last: int,
) -> None:
    """Every valid object of the scope is emitted once; the job completes with counters
    and per-level progress that add up."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    job = await stub.StartIteration(pb.StartIterationRequest(level=emit, **scope))
    chunks = await _drain(stub, job.job_id)
    emitted = [k for c in chunks for k in c.object_keys]
    truth = await _truth(iterator.source_url, scope_level, emit_level, first, last)  # type: ignore[attr-defined]
    assert sorted(emitted) == sorted(truth)
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    final = await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))
    assert final.state == pb.JOB_STATE_COMPLETED
    assert final.objects_emitted == len(truth)
    assert final.iteration_complete
    for level in final.levels:
        assert level.all_discovered
        assert level.ranges == level.ranges_closed
        assert level.completed == level.discovered


async def test_user_job_splits_the_large_user(iterator: Running) -> None:
    """A user with more files than the threshold is read as several ranges."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    truth = await _truth(iterator.source_url, 1, 2, 1, 10_000)  # type: ignore[attr-defined]
    engine = create_async_engine(iterator.source_url)  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        big = (
            await conn.execute(
                text("SELECT user_id FROM file GROUP BY user_id ORDER BY count(*) DESC LIMIT 1")
            )
        ).scalar_one()
    await engine.dispose()
    job = await stub.StartIteration(pb.StartIterationRequest(user_id=big, level="file"))
    emitted = [k for c in await _drain(stub, job.job_id) for k in c.object_keys]
    assert sorted(emitted) == sorted(await _truth(iterator.source_url, 1, 2, big, big))  # type: ignore[attr-defined]
    assert set(emitted) <= set(truth)
    final = await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))
    assert final.levels[-1].ranges > 2  # cut into ranges of 1,000


async def test_acked_job_shared_by_two_consumers(iterator: Running) -> None:
    """Two consumers share a require_ack job: each chunk goes to one of them, unacked chunks
    come back under the same id, and the job completes once every chunk is acked."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    job = await stub.StartIteration(
        pb.StartIterationRequest(enterprise_id=1, level="file", require_ack=True, ack_timeout_s=1)
    )
    seen: dict[str, list[int]] = {}
    dropped: set[str] = set()

    async def consumer(flaky: bool) -> None:
        async for batch in stub.StreamObjects(
            pb.StreamObjectsRequest(job_id=job.job_id, max_batch_size=500), timeout=120
        ):
            ids = []
            for c in batch.chunks:
                if flaky and c.chunk_id not in dropped and len(dropped) < 3:
                    dropped.add(c.chunk_id)  # "crash" before acking this one
                    continue
                seen.setdefault(c.chunk_id, list(c.object_keys))
                ids.append(c.chunk_id)
            if ids:
                await stub.AckObjects(pb.AckObjectsRequest(job_id=job.job_id, chunk_ids=ids))

    await asyncio.gather(consumer(False), consumer(True))
    truth = await _truth(iterator.source_url, 0, 2, 1, 1)  # type: ignore[attr-defined]
    assert sorted(k for ks in seen.values() for k in ks) == sorted(truth)
    assert dropped <= set(seen)
    final = await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))
    assert final.state == pb.JOB_STATE_COMPLETED
    assert final.objects_acked == len(truth)
    assert final.chunks_acked == final.chunks_emitted
    assert final.chunks_resent >= len(dropped)
    again = await stub.AckObjects(
        pb.AckObjectsRequest(job_id=job.job_id, chunk_ids=[next(iter(seen)), "never/0"])
    )
    assert (again.chunks_acked, again.ignored) == (0, 2)


async def test_acks_by_object_id_settle_chunks(iterator: Running) -> None:
    """Acking objects one id at a time (each chunk in two halves) settles every chunk once
    its last object is acked; ids acked twice or never emitted are ignored and counted."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    job = await stub.StartIteration(
        pb.StartIterationRequest(enterprise_id=2, level="file", require_ack=True, ack_timeout_s=60)
    )
    acked = chunks_acked = ignored = chunks = repeats = 0
    seen: list[int] = []
    async for batch in stub.StreamObjects(pb.StreamObjectsRequest(job_id=job.job_id), timeout=120):
        for c in batch.chunks:
            ids = list(c.object_keys)
            seen.extend(ids)
            chunks += 1
            half = len(ids) // 2
            repeats += 1 if half else 0  # ids[0] again in the second call (not twice in one)
            for part in (ids[:half], [*ids[half:], ids[0]]):
                if not part:
                    continue
                reply = await stub.AckObjects(
                    pb.AckObjectsRequest(job_id=job.job_id, object_ids=part)
                )
                acked += reply.acked
                chunks_acked += reply.chunks_acked
                ignored += reply.ignored
    truth = await _truth(iterator.source_url, 0, 2, 2, 2)  # type: ignore[attr-defined]
    assert sorted(seen) == sorted(truth)
    assert acked == len(truth)
    assert chunks_acked == chunks
    assert ignored == repeats
    never = await stub.AckObjects(pb.AckObjectsRequest(job_id=job.job_id, object_ids=[-5]))
    assert (never.acked, never.ignored) == (0, 1)
    final = await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))
    assert final.state == pb.JOB_STATE_COMPLETED
    assert final.objects_acked == len(truth)
    assert final.chunks_acked == final.chunks_emitted == chunks
    assert final.ignored_acks == repeats + 1


async def test_pause_resume_rate_and_cancel(iterator: Running) -> None:
    """A paused job emits nothing until resumed; a rate change shows at once; a cancelled
    job ends its streams; ListJobs lists the newest first, a page at a time."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    for _ in range(2):  # older jobs, so a page of two is not the whole list on its own
        older = await stub.StartIteration(
            pb.StartIterationRequest(enterprise_id=3, level="version", rate_limit_per_second=1)
        )
        await stub.CancelJob(pb.CancelJobRequest(job_id=older.job_id))
    job = await stub.StartIteration(
        pb.StartIterationRequest(enterprise_id=3, level="version", rate_limit_per_second=300)
    )
    paused = await stub.PauseJob(pb.PauseJobRequest(job_id=job.job_id))
    assert paused.state == pb.JOB_STATE_PAUSED
    await asyncio.sleep(0.6)
    before = (await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).objects_emitted
    await asyncio.sleep(1.0)
    assert (await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).objects_emitted == before
    resumed = await stub.ResumeJob(pb.ResumeJobRequest(job_id=job.job_id))
    assert resumed.state == pb.JOB_STATE_RUNNING
    updated = await stub.UpdateJob(pb.UpdateJobRequest(job_id=job.job_id, rate_limit_per_second=50))
    assert updated.rate_limit_per_second == 50

    async def emitted() -> int:
        return (await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).objects_emitted

    await eventually(emitted, lambda n: n > before, timeout_s=30)
    cancelled = await stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id))
    assert cancelled.state == pb.JOB_STATE_CANCELLED
    await _drain(stub, job.job_id)  # the stream ends instead of waiting forever
    listed = await stub.ListJobs(pb.ListJobsRequest(page_size=2))
    assert listed.jobs[0].job_id == job.job_id
    assert listed.next_page_token
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.ResumeJob(pb.ResumeJobRequest(job_id=job.job_id))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_step_waiting_for_its_pace_is_not_taken_once_the_job_stops(
    iterator: Running,
) -> None:
    """At 40 objects/s each step reads a chunk of 40 and then waits about a second for the
    pace to allow it, so a PauseJob or a CancelJob almost always lands during some step's
    wait. Once a commit already under way when either answered has landed (half a second),
    the job's counts stay as they are: a step that was waiting is not committed into a
    stopped job (it is read again after a resume)."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)

    async def get(job_id: str) -> pb.Job:
        return await stub.GetJob(pb.GetJobRequest(job_id=job_id))

    for stop in ("pause", "cancel"):
        job = await stub.StartIteration(
            pb.StartIterationRequest(enterprise_id=3, level="version", rate_limit_per_second=40)
        )
        await eventually(partial(get, job.job_id), lambda j: j.objects_emitted > 0, timeout_s=30)
        if stop == "pause":
            await stub.PauseJob(pb.PauseJobRequest(job_id=job.job_id))
        else:
            await stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id))
        await asyncio.sleep(0.5)  # a commit that was under way (a step's wait is ~1 s)
        at_stop = (await get(job.job_id)).objects_emitted
        await asyncio.sleep(2.5)  # two and a half paced steps
        assert (await get(job.job_id)).objects_emitted == at_stop, stop
        if stop == "pause":
            await stub.UpdateJob(pb.UpdateJobRequest(job_id=job.job_id, rate_limit_per_second=0))
            await stub.ResumeJob(pb.ResumeJobRequest(job_id=job.job_id))
            chunks = await _drain(stub, job.job_id)
            emitted = [k for c in chunks for k in c.object_keys]
            truth = await _truth(iterator.source_url, 0, 3, 3, 3)  # type: ignore[attr-defined]
            assert sorted(emitted) == sorted(truth)  # nothing skipped, nothing twice


async def test_queues_and_work_show_in_metrics(iterator: Running) -> None:
    """A paused job's waiting work shows as queue depth; resumed and drained, the depth
    returns to zero and the counters moved by what the job emitted, finished once."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    levels = [lv.name for lv in iterator.settings.iterator.levels]
    before = scrape(iterator)
    job = await stub.StartIteration(
        pb.StartIterationRequest(enterprise_id=4, level="version", rate_limit_per_second=200)
    )
    await stub.PauseJob(pb.PauseJobRequest(job_id=job.job_id))

    def waiting(samples: dict) -> float:  # type: ignore[type-arg]
        return sum(value(samples, "loom_queue_depth", queue=f"iterator_{n}") for n in levels)

    async def sample() -> dict:  # type: ignore[type-arg]
        return scrape(iterator)

    paused = await eventually(sample, lambda s: waiting(s) > 0, timeout_s=30)
    for name in levels:
        assert value(paused, "loom_queue_capacity", queue=f"iterator_{name}") == 0
        assert ("loom_queue_dropped_total", frozenset({("queue", f"iterator_{name}")})) in paused
    await stub.UpdateJob(pb.UpdateJobRequest(job_id=job.job_id, rate_limit_per_second=0))
    await stub.ResumeJob(pb.ResumeJobRequest(job_id=job.job_id))
    chunks = await _drain(stub, job.job_id)
    final = await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))
    assert final.state == pb.JOB_STATE_COMPLETED
    after = await eventually(sample, lambda s: waiting(s) == 0, timeout_s=30)
    assert value(after, "loom_queue_depth", queue="iterator_chunks") == 0

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("loom_iterator_chunks_emitted_total") >= final.chunks_emitted == len(chunks)
    assert delta("loom_iterator_steps_total") >= final.chunks_emitted
    assert delta("loom_iterator_jobs_finished_total", state="completed") >= 1


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (pb.StartIterationRequest(enterprise_id=1, level="folder"), "INVALID_ARGUMENT", "level"),
        (pb.StartIterationRequest(enterprise_id=424242, level="file"), "NOT_FOUND", None),
        (
            pb.StartIterationRequest(
                enterprise_range=pb.EnterpriseRange(first_enterprise_id=5, last_enterprise_id=2),
                level="file",
            ),
            "INVALID_ARGUMENT",
            "enterprise_range",
        ),
        (
            pb.StartIterationRequest(enterprise_id=1, level="file", rate_limit_per_second=-1),
            "INVALID_ARGUMENT",
            "rate_limit_per_second",
        ),
        (
            pb.StartIterationRequest(
                level_scope=pb.LevelScope(level="nope", first_key=[1]), level="file"
            ),
            "INVALID_ARGUMENT",
            "level_scope.level",
        ),
        (pb.StartIterationRequest(user_id=1, level="enterprise"), "INVALID_ARGUMENT", "level"),
    ],
    ids=[
        "unknown-level",
        "missing-scope",
        "first-after-last",
        "negative-rate",
        "unknown-scope-level",
        "level-above-scope",
    ],
)
async def test_bad_start_requests(
    iterator: Running, request_: pb.StartIterationRequest, code: str, field: str | None
) -> None:
    """Each bad StartIteration gets its own clear status, naming the field."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.StartIteration(request_)
    assert err.value.code().name == code
    if field:
        assert field in violations(err.value)


async def test_bad_job_requests(iterator: Running) -> None:
    """Unknown jobs are NOT_FOUND; malformed ids and batch sizes are INVALID_ARGUMENT."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetJob(pb.GetJobRequest(job_id="0" * 32))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetJob(pb.GetJobRequest(job_id="x"))
    assert "job_id" in violations(err.value)
    job = await stub.StartIteration(pb.StartIterationRequest(enterprise_id=1, level="user"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.StreamObjects(
            pb.StreamObjectsRequest(job_id=job.job_id, max_batch_size=10**6)
        ):
            pass
    assert "max_batch_size" in violations(err.value)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.AckObjects(pb.AckObjectsRequest(job_id=job.job_id, chunk_ids=["r/0"]))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.ListJobs(pb.ListJobsRequest(page_token="garbage!"))
    assert "page_token" in violations(err.value)
