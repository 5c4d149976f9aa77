"""DeleteJob and the retention of finished jobs through the real server, on the embedded
engines (SQLite source, queue and state) and on the distributed ones (PostgreSQL source,
SQS, DynamoDB): a deleted job is gone from every read, deleting is idempotent, a running job
is refused, and on SQLite no byte of the job stays in the files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc

from loadtest.corpora.iterator import CorpusShape, generate, private_database, write_url
from server import registry
from server.config import Settings
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
SHAPE = CorpusShape(enterprises=3, users_per_enterprise=20, large_users=1, large_user_files=1500)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "setup" in metafunc.fixturenames:
        wanted = []
        for name, (source, stores) in SETUPS.items():
            needed = {source, *stores.values()}
            if set(selected_engines(metafunc.config, tuple(needed))) == needed:
                wanted.append(name)
        metafunc.parametrize("setup", wanted, ids=wanted, scope="module")


def _settings(setup: str, data: Path, url: str, **iterator: float) -> Settings:
    source, stores = SETUPS[setup]
    settings = settings_for(source, data, **stores)
    return replace(
        settings,
        iterator=replace(
            settings.iterator,
            source_url=url,
            max_chunk=500,
            check_interval_s=0.1,
            **iterator,  # type: ignore[arg-type]
        ),
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def corpus(setup: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """The source database of this module, for each setup."""
    source, _ = SETUPS[setup]
    data = Path(tmp_path_factory.mktemp(f"itdel-src-{setup}"))
    async with private_database(source_url(source, data)) as url:
        await write_url(url, generate(SHAPE))
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def iterator(
    setup: str, corpus: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Running]:
    """A server over the corpus, keeping finished jobs (the default retention)."""
    data = Path(tmp_path_factory.mktemp(f"itdel-{setup}"))
    settings = _settings(setup, data, corpus)
    settings = replace(settings, server=replace(settings.server, metrics_port=free_port()))
    async with running_server(settings) as running:
        yield running


async def _finished(stub: iterator_pb2_grpc.IteratorStub, enterprise_id: int) -> str:
    """A job over one enterprise's files, streamed to the end and COMPLETED; its id."""
    job = await stub.StartIteration(
        pb.StartIterationRequest(level="file", enterprise_id=enterprise_id)
    )
    async for _ in stub.StreamObjects(pb.StreamObjectsRequest(job_id=job.job_id), timeout=120):
        pass

    async def state() -> int:
        return (await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).state

    await eventually(state, lambda s: s == pb.JOB_STATE_COMPLETED, timeout_s=60)
    return job.job_id


async def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    return err.value.code()


async def _gone(stub: iterator_pb2_grpc.IteratorStub, job_id: str) -> None:
    """Every read of `job_id` answers as if it never existed."""
    assert await _code(stub.GetJob(pb.GetJobRequest(job_id=job_id))) == grpc.StatusCode.NOT_FOUND
    ack = stub.AckObjects(pb.AckObjectsRequest(job_id=job_id, chunk_ids=["r/0"]))
    assert await _code(ack) == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.StreamObjects(pb.StreamObjectsRequest(job_id=job_id), timeout=10):
            pass
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    listed = await stub.ListJobs(pb.ListJobsRequest(page_size=1000))
    assert job_id not in {j.job_id for j in listed.jobs}


def _files_holding(settings: Settings, needle: str) -> list[str]:
    """The SQLite files (and WALs) of the data directory whose bytes contain `needle`."""
    found = []
    for path in sorted(Path(settings.sqlite.data_dir).glob("iterator-*.sqlite3*")):
        if path.name.startswith("iterator-source"):
            continue
        if needle.encode() in path.read_bytes():
            found.append(path.name)
    return found


async def test_a_deleted_job_is_gone_from_every_read(iterator: Running) -> None:
    """DeleteJob of a completed job removes it (and its records) at once; every read
    answers NOT_FOUND; another job is untouched; deleting again deletes nothing."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    job_id = await _finished(stub, enterprise_id=1)
    other = await _finished(stub, enterprise_id=2)
    done = await stub.DeleteJob(pb.DeleteJobRequest(job_id=job_id))
    assert done.deleted
    assert done.records_removed > 3  # the job, its counters, its ranges and chunks
    await _gone(stub, job_id)
    assert (await stub.GetJob(pb.GetJobRequest(job_id=other))).state == pb.JOB_STATE_COMPLETED
    again = await stub.DeleteJob(pb.DeleteJobRequest(job_id=job_id))
    assert (again.deleted, again.records_removed) == (False, 0)
    assert value(scrape(iterator), "loom_iterator_jobs_deleted_total") >= 1
    if iterator.settings.storage.iterator_state == "sqlite":
        assert _files_holding(iterator.settings, job_id) == []
        assert _files_holding(iterator.settings, other) != []  # the check can see a job


async def test_a_running_job_is_refused_until_cancelled(iterator: Running) -> None:
    """A running or paused job: FAILED_PRECONDITION naming CancelJob; once cancelled, it is
    deleted with the work it still had queued (no byte of it left on SQLite)."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    job = await stub.StartIteration(
        pb.StartIterationRequest(enterprise_id=3, level="version", rate_limit_per_second=50)
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.DeleteJob(pb.DeleteJobRequest(job_id=job.job_id))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "CancelJob" in (err.value.details() or "")
    await stub.PauseJob(pb.PauseJobRequest(job_id=job.job_id))
    refused = stub.DeleteJob(pb.DeleteJobRequest(job_id=job.job_id))
    assert await _code(refused) == grpc.StatusCode.FAILED_PRECONDITION
    await stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id))
    done = await stub.DeleteJob(pb.DeleteJobRequest(job_id=job.job_id))
    assert done.deleted
    await _gone(stub, job.job_id)
    await asyncio.sleep(0.5)  # a worker that held one of its messages drops it meanwhile
    if iterator.settings.storage.iterator_state == "sqlite":
        assert _files_holding(iterator.settings, job.job_id) == []


async def test_unknown_and_malformed_ids(iterator: Running) -> None:
    """An unknown job id is not an error (nothing deleted); a malformed one is
    INVALID_ARGUMENT with a field violation on job_id."""
    stub = iterator_pb2_grpc.IteratorStub(iterator.channel)
    unknown = await stub.DeleteJob(pb.DeleteJobRequest(job_id="0" * 32))
    assert (unknown.deleted, unknown.records_removed) == (False, 0)
    for bad in ("", "x", "A" * 32, "0" * 33):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.DeleteJob(pb.DeleteJobRequest(job_id=bad))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "job_id" in violations(err.value)


async def test_finished_jobs_expire_after_their_retention(
    setup: str, corpus: str, tmp_path: Path
) -> None:
    """With a one-second retention, a finished job is deleted by the server's sweep (every
    read NOT_FOUND) while a running one is kept."""
    settings = _settings(
        setup, tmp_path, corpus, finished_job_retention_s=1.0, retention_sweep_s=0.2
    )
    async with running_server(settings) as running:
        stub = iterator_pb2_grpc.IteratorStub(running.channel)
        job_id = await _finished(stub, enterprise_id=1)
        slow = await stub.StartIteration(
            pb.StartIterationRequest(enterprise_id=3, level="version", rate_limit_per_second=20)
        )

        async def listed() -> set[str]:
            return {j.job_id for j in (await stub.ListJobs(pb.ListJobsRequest())).jobs}

        await eventually(listed, lambda ids: job_id not in ids, timeout_s=30)
        await _gone(stub, job_id)
        kept = await stub.GetJob(pb.GetJobRequest(job_id=slow.job_id))
        assert kept.state == pb.JOB_STATE_RUNNING
        await stub.CancelJob(pb.CancelJobRequest(job_id=slow.job_id))
        await eventually(listed, lambda ids: slow.job_id not in ids, timeout_s=30)


async def test_a_deleted_job_does_not_come_back_through_dump_and_load(
    setup: str, corpus: str, tmp_path: Path
) -> None:
    """The dump of a store after a deletion (the records `loom dump` writes), loaded into a
    fresh embedded store as `loom load` does: the kept job is there, the deleted one is not."""
    settings = _settings(setup, tmp_path / "a", corpus)
    async with running_server(settings) as running:
        stub = iterator_pb2_grpc.IteratorStub(running.channel)
        deleted = await _finished(stub, enterprise_id=1)
        kept = await _finished(stub, enterprise_id=2)
        await stub.DeleteJob(pb.DeleteJobRequest(job_id=deleted))
    portable = registry.by_name("iterator").data
    fresh = settings_for("sqlite", tmp_path / "fresh")
    source, target = await portable.open(settings), await portable.open(fresh)
    try:
        dumped: list[str] = []
        async for kind, page in source.scan():
            dumped += [r.job_id for r in page]  # type: ignore[attr-defined]
            await target.load(kind, page)
        assert kept in dumped
        assert deleted not in dumped
    finally:
        await source.close()
        await target.close()
    target_settings = replace(fresh, iterator=replace(fresh.iterator, source_url=corpus))
    async with running_server(target_settings) as running:
        stub = iterator_pb2_grpc.IteratorStub(running.channel)
        got = await stub.GetJob(pb.GetJobRequest(job_id=kept))
        assert got.state == pb.JOB_STATE_COMPLETED
        await _gone(stub, deleted)
