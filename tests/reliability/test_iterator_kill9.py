"""`loom serve` killed with SIGKILL in the middle of an Iterator job, then restarted on the
same data: the job completes, every object was emitted at least once, none is missing,
and a consumer that acknowledges and de-duplicates by chunk id counts each object once.

Run on the embedded engines (SQLite source, queue and state) and on the distributed ones
(PostgreSQL source, SQS queues, DynamoDB job state): the same test, parametrized."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import grpc
import pytest
from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc

from loadtest.corpora.iterator import CorpusShape, generate, private_database, write_url
from tests.reliability.iterator_engines import (
    base_source_url,
    namespace,
    parametrize_setups,
    serve_env,
    truth,
)
from tests.serving import eventually, free_port, loom_process


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_setups(metafunc)


async def test_job_survives_sigkill(setup: str, tmp_path: Path) -> None:
    """Kill -9 mid-job, restart, finish: nothing missing, acks counted once."""
    async with private_database(base_source_url(setup, tmp_path)) as source:
        await write_url(
            source,
            generate(CorpusShape(enterprises=3, users_per_enterprise=40, large_user_files=6000)),
        )
        expected = await truth(source, 0, 3, 1, 3)
        env = serve_env(
            setup,
            source,
            namespace(),
            large_range_threshold=2000,
            visibility_timeout_s=2,
            max_chunk=500,
        )
        await _kill_and_finish(env, tmp_path, expected)


async def _kill_and_finish(env: dict[str, str], tmp_path: Path, expected: list[int]) -> None:
    port, data = free_port(), tmp_path / "data"
    args = ("--log-level", "warning")
    seen: dict[str, list[int]] = {}
    deliveries = 0

    async def consume(
        stub: iterator_pb2_grpc.IteratorStub, job_id: str, stop_after: int | None
    ) -> None:
        nonlocal deliveries
        async for batch in stub.StreamObjects(pb.StreamObjectsRequest(job_id=job_id)):
            for c in batch.chunks:
                deliveries += len(c.object_keys)
                seen.setdefault(c.chunk_id, list(c.object_keys))
            await stub.AckObjects(
                pb.AckObjectsRequest(job_id=job_id, chunk_ids=[c.chunk_id for c in batch.chunks])
            )
            if stop_after is not None and sum(map(len, seen.values())) >= stop_after:
                return

    async with (
        loom_process(tmp_path, *args, env=env, port=port, data_dir=data) as served,
        grpc.aio.insecure_channel(served.target) as channel,
    ):
        stub = iterator_pb2_grpc.IteratorStub(channel)
        job = await stub.StartIteration(
            pb.StartIterationRequest(
                enterprise_range=pb.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=3),
                level="version",
                require_ack=True,
                ack_timeout_s=2,
                rate_limit_per_second=20_000,
            )
        )
        await consume(stub, job.job_id, len(expected) // 3)
        served.process.send_signal(signal.SIGKILL)
        assert await asyncio.to_thread(served.process.wait, 30) == -signal.SIGKILL

    async with (
        loom_process(tmp_path, *args, env=env, port=port, data_dir=data) as again,
        grpc.aio.insecure_channel(again.target) as channel,
    ):
        stub = iterator_pb2_grpc.IteratorStub(channel)
        await consume(stub, job.job_id, None)

        async def state() -> pb.Job:
            return await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))

        final = await eventually(state, lambda j: j.state == pb.JOB_STATE_COMPLETED, timeout_s=60)
    once = sorted(k for keys in seen.values() for k in keys)
    assert once == expected, "with chunk-id de-duplication every object is seen exactly once"
    assert deliveries >= len(expected)
    assert final.objects_acked == len(expected)
    assert final.objects_emitted == len(expected)
    assert final.chunks_acked == final.chunks_emitted == len(seen)
