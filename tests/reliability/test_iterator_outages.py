"""The Iterator's engines go down mid-job and come back: nothing is lost, nothing twice.

**The source database** (PostgreSQL, MariaDB): while it is down, calls that need it
(StartIteration checks its scope there) fail UNAVAILABLE, answered by the open circuit
breaker once it has seen enough faults; calls that do not (GetJob) still answer; the
Iterator's health is NOT_SERVING; and the job pauses itself, naming the source. Once the
database is back the job resumes by itself and completes.

**The work queues** (ElasticMQ for SQS, in memory: a restart comes back *empty*, without
the queues or the messages naming the ranges in progress — harsher than SQS itself, which
keeps them): while it is down, StartIteration fails UNAVAILABLE (the job it wrote is marked
FAILED, saying why, never left to run behind the caller's back) and the Iterator is
NOT_SERVING. Once it is back, the queues are created again, the stalled job's open ranges
are sent again by the completion checker, and the job completes.

Either way the objects emitted are exactly what a plain SQL query of the scope gives. The
engine stopped here is this test's own instance (`scripts/engines/<engine>.sh` with its own
state directory and port), never the shared one; the job state is on DynamoDB.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc

from loadtest.corpora.iterator import CorpusShape, generate, write_url
from server.config import BreakerSettings, Settings
from storage.settings import SqsSettings
from tests.engines import settings_for
from tests.reliability.iterator_engines import truth
from tests.reliability.own_engine import OwnEngine, own_engine
from tests.serving import Running, eventually, running_server

pytestmark = [pytest.mark.engine("sqs"), pytest.mark.engine("dynamodb")]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_URL = {
    "postgres": "postgresql+asyncpg://postgres@127.0.0.1:{port}/loom",
    "mariadb": "mysql+aiomysql://root@127.0.0.1:{port}/loom",
    "sqs": "http://127.0.0.1:{port}",
}


@pytest.fixture
def own(request: pytest.FixtureRequest) -> Iterator[OwnEngine]:
    """The engine named by the test's parameter, started before it and stopped and deleted
    after it, whatever happened."""
    with own_engine(request.param) as engine:
        yield engine


def _url(own: OwnEngine) -> str:
    return _URL[own.engine].format(port=own.port)


def _settings(tmp_path: Path, source_url: str, **iterator: Any) -> Settings:
    settings = settings_for("dynamodb", tmp_path, iterator_queue="sqs", iterator_state="dynamodb")
    return replace(
        settings,
        breaker=BreakerSettings(failure_threshold=3, reset_timeout_s=0.5),
        iterator=replace(
            settings.iterator,
            source_url=source_url,
            max_chunk=300,
            initial_chunk=300,
            source_probe_s=0.2,
            pause_poll_s=0.3,
            check_interval_s=0.1,
            **iterator,
        ),
    )


@pytest_asyncio.fixture
async def source_server(own: OwnEngine, tmp_path: Path) -> AsyncIterator[Running]:
    """A server iterating a corpus in the test's own source database."""
    await write_url(_url(own), generate(CorpusShape(enterprises=4, large_users=0)))
    async with running_server(_settings(tmp_path, _url(own))) as running:
        yield running


@pytest_asyncio.fixture
async def queue_server(own: OwnEngine, tmp_path: Path) -> AsyncIterator[Running]:
    """A server whose work queues are the test's own ElasticMQ (source: a SQLite file)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'source.sqlite3'}"
    await write_url(url, generate(CorpusShape(enterprises=4, large_users=0)))
    settings = _settings(tmp_path, url, resend_after_s=2.0, visibility_timeout_s=3.0)
    sqs = SqsSettings(endpoint_url=_url(own), queue_prefix="outage-", create_queues=True)
    async with running_server(replace(settings, sqs=sqs)) as running:
        yield running


async def _health(running: Running) -> int:
    reply = await health_pb2_grpc.HealthStub(running.channel).Check(
        health_pb2.HealthCheckRequest(service="loom.v1.Iterator"), timeout=10
    )
    return int(reply.status)


class Job:
    """A job of versions over enterprises 1..4 and a consumer streaming its objects."""

    def __init__(self, running: Running) -> None:
        self.stub = iterator_pb2_grpc.IteratorStub(running.channel)
        self.chunks: list[pb.ObjectChunk] = []
        self.job_id = ""
        self._consumer: asyncio.Task[None] | None = None

    async def start(self, rate: int) -> None:
        job = await self.stub.StartIteration(
            pb.StartIterationRequest(
                enterprise_range=pb.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=4),
                level="version",
                rate_limit_per_second=rate,
            )
        )
        self.job_id = job.job_id
        self._consumer = asyncio.create_task(self._consume())

    async def _consume(self) -> None:
        request = pb.StreamObjectsRequest(job_id=self.job_id)
        async for batch in self.stub.StreamObjects(request, timeout=300):
            self.chunks.extend(batch.chunks)

    async def get(self) -> pb.Job:
        return await self.stub.GetJob(pb.GetJobRequest(job_id=self.job_id), timeout=10)

    async def finish(self, expected: list[int]) -> None:
        """The stream ends, the job is COMPLETED, and it emitted `expected` exactly once."""
        assert self._consumer is not None
        await asyncio.wait_for(self._consumer, timeout=300)
        final = await self.get()
        assert final.state == pb.JOB_STATE_COMPLETED
        assert final.error == ""
        emitted = sorted(k for c in self.chunks for k in c.object_keys)
        assert emitted == expected, "nothing missing, nothing twice"
        assert len({c.chunk_id for c in self.chunks}) == len(self.chunks) == final.chunks_emitted


@pytest.mark.parametrize(
    "own",
    [
        pytest.param("postgres", marks=pytest.mark.engine("postgres")),
        pytest.param("mariadb", marks=pytest.mark.engine("mariadb")),
    ],
    indirect=True,
)
async def test_job_pauses_while_the_source_is_down_and_completes_after(
    source_server: Running, own: OwnEngine
) -> None:
    """Stop the source database mid-job, start it again: UNAVAILABLE through the breaker,
    the job pauses itself and resumes, and the emitted set equals the SQL query's."""
    expected = await truth(_url(own), 0, 3, 1, 4)
    job = Job(source_server)
    await job.start(rate=max(500, len(expected) // 10))
    await eventually(job.get, lambda j: j.objects_emitted > 0, timeout_s=60)
    own.run("stop")

    paused = await eventually(job.get, lambda j: j.state == pb.JOB_STATE_PAUSED, timeout_s=60)
    assert "source" in paused.error
    assert paused.objects_emitted < len(expected)

    answers = []
    for _ in range(8):  # a scope check needs the source
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await job.stub.StartIteration(pb.StartIterationRequest(enterprise_id=1, level="file"))
        answers.append((err.value.code(), err.value.details() or ""))
    assert {code for code, _ in answers} == {grpc.StatusCode.UNAVAILABLE}
    assert any("circuit" in details for _, details in answers), answers
    assert (await job.get()).state == pb.JOB_STATE_PAUSED  # what needs no source still answers
    await eventually(lambda: _health(source_server), lambda s: s == NOT_SERVING, timeout_s=30)

    own.run("start")
    await eventually(job.get, lambda j: j.state != pb.JOB_STATE_PAUSED, timeout_s=60)
    await job.finish(expected)
    assert await _health(source_server) == SERVING


@pytest.mark.parametrize("own", ["sqs"], indirect=True)
async def test_a_queue_that_restarts_empty_loses_no_range(
    queue_server: Running, own: OwnEngine, tmp_path: Path
) -> None:
    """Stop ElasticMQ mid-job and start it again empty: the job completes exactly, and so
    does a job started while it was down."""
    expected = await truth(f"sqlite+aiosqlite:///{tmp_path / 'source.sqlite3'}", 0, 3, 1, 4)
    job = Job(queue_server)
    await job.start(rate=max(500, len(expected) // 10))
    await eventually(job.get, lambda j: j.objects_emitted > 0, timeout_s=60)
    own.run("stop")

    late = Job(queue_server)
    answers = []
    for _ in range(6):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await late.start(rate=0)
        answers.append(err.value.code())
    assert set(answers) == {grpc.StatusCode.UNAVAILABLE}
    await eventually(lambda: _health(queue_server), lambda s: s == NOT_SERVING, timeout_s=30)
    during = await job.get()
    assert during.state == pb.JOB_STATE_RUNNING
    assert during.objects_emitted < len(expected)

    own.run("start")
    await job.finish(expected)
    await eventually(lambda: _health(queue_server), lambda s: s == SERVING, timeout_s=30)
    # A StartIteration answered UNAVAILABLE wrote its job before the queue send failed: the
    # job is marked FAILED, saying why, rather than left to run behind the caller's back.
    listed = await job.stub.ListJobs(pb.ListJobsRequest(page_size=50), timeout=10)
    others = [j for j in listed.jobs if j.job_id != job.job_id]
    assert len(others) == len(answers)
    assert {j.state for j in others} == {pb.JOB_STATE_FAILED}
    assert all("work queue was unavailable" in j.error for j in others)
