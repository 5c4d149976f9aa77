"""Two `loom serve` replicas against the same PostgreSQL, SQS queues and DynamoDB job state,
with consumers on both: they share one job's work, the job completes exactly once, and the
objects acknowledged are exactly what a plain SQL query of the scope gives, each once."""

from __future__ import annotations

import asyncio
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
from tests.serving import eventually, free_port, loom_process, scrape_metrics


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_setups(metafunc, distributed_only=True)


def _metric(port: int, name: str, **labels: str) -> float:
    return scrape_metrics(port).get((name, frozenset(labels.items())), 0.0)


async def test_two_replicas_share_a_job_and_complete_it_once(setup: str, tmp_path: Path) -> None:
    """Work on both, consumers on both, COMPLETED once, every object acked once."""
    async with private_database(base_source_url(setup, tmp_path)) as source:
        await write_url(
            source,
            generate(CorpusShape(enterprises=4, users_per_enterprise=40, large_user_files=4000)),
        )
        expected = await truth(source, 0, 3, 1, 4)
        env = serve_env(
            setup, source, namespace(), large_range_threshold=1000, max_chunk=300, workers=2
        )
        ports = [free_port(), free_port()]
        async with (
            loom_process(tmp_path, env={**env, "LOOM_SERVER__METRICS_PORT": str(ports[0])}) as a,
            loom_process(tmp_path, env={**env, "LOOM_SERVER__METRICS_PORT": str(ports[1])}) as b,
            grpc.aio.insecure_channel(a.target) as channel_a,
            grpc.aio.insecure_channel(b.target) as channel_b,
        ):
            stubs = [iterator_pb2_grpc.IteratorStub(c) for c in (channel_a, channel_b)]
            job = await stubs[0].StartIteration(
                pb.StartIterationRequest(
                    enterprise_range=pb.EnterpriseRange(
                        first_enterprise_id=1, last_enterprise_id=4
                    ),
                    level="version",
                    require_ack=True,
                    ack_timeout_s=10,
                    rate_limit_per_second=max(1000, len(expected) // 8),
                )
            )
            seen: dict[str, list[int]] = {}
            received = [0, 0]
            acked = [0, 0]  # (objects, chunks) newly acknowledged, as AckObjects answered
            acked_chunks = [0, 0]

            async def consume(replica: int) -> None:
                stub = stubs[replica]
                async for batch in stub.StreamObjects(
                    pb.StreamObjectsRequest(job_id=job.job_id, max_batch_size=600), timeout=300
                ):
                    received[replica] += len(batch.chunks)
                    for c in batch.chunks:
                        seen.setdefault(c.chunk_id, list(c.object_keys))
                    reply = await stub.AckObjects(
                        pb.AckObjectsRequest(
                            job_id=job.job_id, chunk_ids=[c.chunk_id for c in batch.chunks]
                        )
                    )
                    acked[replica] += reply.acked
                    acked_chunks[replica] += reply.chunks_acked

            await asyncio.gather(*(consume(r) for r in (0, 1, 0, 1)))

            async def get() -> pb.Job:
                return await stubs[1].GetJob(pb.GetJobRequest(job_id=job.job_id))

            final = await eventually(get, lambda j: j.state == pb.JOB_STATE_COMPLETED)
            emitted_by = [_metric(p, "loom_iterator_chunks_emitted_total") for p in ports]
            completed = [
                _metric(p, "loom_iterator_jobs_finished_total", state="completed") for p in ports
            ]
            failed = [
                _metric(p, "loom_iterator_jobs_finished_total", state="failed") for p in ports
            ]

    assert all(n > 0 for n in emitted_by), f"both replicas emit: {emitted_by}"
    assert sum(emitted_by) == final.chunks_emitted, "each chunk emitted by one replica"
    assert all(n > 0 for n in received), f"consumers on both replicas: {received}"
    assert sum(completed) == 1, f"COMPLETED exactly once: {completed}"
    assert sum(failed) == 0
    assert sorted(k for keys in seen.values() for k in keys) == expected
    assert sum(acked) == final.objects_acked == len(expected), "each object acked once"
    assert sum(acked_chunks) == final.chunks_acked == final.chunks_emitted == len(seen)
