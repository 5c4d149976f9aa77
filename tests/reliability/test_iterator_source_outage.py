"""The Iterator's source database goes down mid-job and comes back: nothing is lost.

While PostgreSQL is down, calls that need it (StartIteration checks its scope there) fail
UNAVAILABLE, answered by the open circuit breaker once it has seen enough faults; calls that
do not (GetJob) still answer; the Iterator's health is NOT_SERVING; and the job pauses
itself, naming the source. Once the database is back the job resumes by itself and
completes, and the objects emitted are exactly what a plain SQL query of the scope gives.

The PostgreSQL stopped here is this test's own instance (`scripts/engines/postgres.sh`
with its own state directory and port), never the shared test server. Queues and job state
are SQS and DynamoDB, as in a real deployment.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc

from loadtest.corpora.iterator import CorpusShape, generate, write_url
from server.config import BreakerSettings
from tests.engines import settings_for
from tests.reliability.iterator_engines import parametrize_setups, truth
from tests.serving import Running, eventually, free_port, running_server

pytestmark = pytest.mark.engine("postgres")

REPO = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_setups(metafunc, distributed_only=True)


class OwnPostgres:
    """A PostgreSQL of this test alone: its own state directory, port and data."""

    def __init__(self) -> None:
        # The server runs as user postgres: its directory must be reachable by it.
        self.root = Path(tempfile.mkdtemp(prefix="loom-pg-outage-"))
        self.root.chmod(0o755)
        self.port = free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/loom"

    def run(self, command: str) -> None:
        """`scripts/engines/postgres.sh <command>` on this instance (start waits for SQL)."""
        env = {**os.environ, "LOOM_ENGINES_DIR": str(self.root)}
        env["LOOM_POSTGRES_PORT"] = str(self.port)
        subprocess.run(
            [str(REPO / "scripts/engines/postgres.sh"), command],
            check=True, capture_output=True, timeout=180, env=env,
        )  # fmt: skip


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    """Started before the test, stopped and deleted after it, whatever happened."""
    pg = OwnPostgres()
    try:
        pg.run("start")
        yield pg
    finally:
        pg.run("stop")
        shutil.rmtree(pg.root, ignore_errors=True)


@pytest_asyncio.fixture
async def server(setup: str, own_postgres: OwnPostgres, tmp_path: Path) -> AsyncIterator[Running]:
    """A server iterating a corpus in `own_postgres`, on SQS queues and DynamoDB state."""
    assert setup == "postgres-sqs-dynamodb"
    await write_url(own_postgres.url, generate(CorpusShape(enterprises=4, large_users=0)))
    settings = settings_for("dynamodb", tmp_path, iterator_queue="sqs", iterator_state="dynamodb")
    settings = replace(
        settings,
        breaker=BreakerSettings(failure_threshold=3, reset_timeout_s=0.5),
        iterator=replace(
            settings.iterator,
            source_url=own_postgres.url,
            max_chunk=300,
            initial_chunk=300,
            source_probe_s=0.2,
            pause_poll_s=0.3,
            check_interval_s=0.1,
        ),
    )
    async with running_server(settings) as running:
        yield running


async def _health(running: Running) -> int:
    reply = await health_pb2_grpc.HealthStub(running.channel).Check(
        health_pb2.HealthCheckRequest(service="loom.v1.Iterator"), timeout=10
    )
    return int(reply.status)


async def test_job_pauses_while_the_source_is_down_and_completes_after(
    server: Running, own_postgres: OwnPostgres
) -> None:
    """Stop PostgreSQL mid-job, start it again: UNAVAILABLE through the breaker, the job
    pauses itself and resumes, and the emitted set equals the SQL query's."""
    stub = iterator_pb2_grpc.IteratorStub(server.channel)
    expected = await truth(own_postgres.url, 0, 3, 1, 4)
    job = await stub.StartIteration(
        pb.StartIterationRequest(
            enterprise_range=pb.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=4),
            level="version",
            rate_limit_per_second=max(500, len(expected) // 10),
        )
    )
    chunks: list[pb.ObjectChunk] = []

    async def consume() -> None:
        async for batch in stub.StreamObjects(
            pb.StreamObjectsRequest(job_id=job.job_id), timeout=300
        ):
            chunks.extend(batch.chunks)

    consumer = asyncio.create_task(consume())

    async def get() -> pb.Job:
        return await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))

    await eventually(get, lambda j: j.objects_emitted > 0, timeout_s=60)
    own_postgres.run("stop")

    paused = await eventually(get, lambda j: j.state == pb.JOB_STATE_PAUSED, timeout_s=60)
    assert "source" in paused.error
    assert paused.objects_emitted < len(expected)

    answers = []
    for _ in range(8):  # a scope check needs the source
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.StartIteration(pb.StartIterationRequest(enterprise_id=1, level="file"))
        answers.append((err.value.code(), err.value.details() or ""))
    assert {code for code, _ in answers} == {grpc.StatusCode.UNAVAILABLE}
    assert any("circuit" in details for _, details in answers), answers
    assert (await get()).state == pb.JOB_STATE_PAUSED  # what needs no source still answers
    await eventually(lambda: _health(server), lambda s: s == NOT_SERVING, timeout_s=30)

    own_postgres.run("start")
    await eventually(get, lambda j: j.state != pb.JOB_STATE_PAUSED, timeout_s=60)
    await asyncio.wait_for(consumer, timeout=300)
    final = await get()
    assert final.state == pb.JOB_STATE_COMPLETED
    assert final.error == ""
    emitted = sorted(k for c in chunks for k in c.object_keys)
    assert emitted == expected, "nothing missing, nothing twice"
    assert len({c.chunk_id for c in chunks}) == len(chunks) == final.chunks_emitted
    assert await _health(server) == SERVING
