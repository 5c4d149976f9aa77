"""Where an Iterator job's time goes on the distributed engines: round trips per chunk.

``python -m loadtest.benches.iterator_round_trips [--enterprises 4 --users 100] [--profile N]``

Runs one real server in this process (PostgreSQL source from LOOM_TEST_POSTGRES_URL, in a
private database; SQS and DynamoDB Local from LOOM_TEST_SQS_ENDPOINT /
LOOM_TEST_DYNAMODB_ENDPOINT), iterates a Box-like corpus's files into one StreamObjects
consumer, and counts every request the server made: each SQS and DynamoDB API call (at
aiobotocore's ``_make_api_call``, one HTTP round trip each) and each SQL statement
(SQLAlchemy's ``before_cursor_execute``, and asyncpg's ``fetch``, which the PostgreSQL
source reads through). Prints calls per operation, per emitted chunk and
per 1,000 objects, and with ``--profile N`` the N functions of most cumulative time.

Counting wraps the real calls and changes nothing they do; it is a bench, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from aiobotocore.client import AioBaseClient
from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc
from sqlalchemy import event
from sqlalchemy.engine import Engine

from loadtest.corpora.iterator import CorpusShape, generate, private_database, write_url
from server.app import build_server
from server.config import load_settings

__all__ = ["CALLS", "SECONDS", "main"]

CALLS: Counter[str] = Counter()
SECONDS: defaultdict[str, float] = defaultdict(float)
"""Wall seconds spent inside each operation's calls (overlapping calls add up)."""


def _count_aws() -> None:
    original: Callable[..., Any] = AioBaseClient._make_api_call

    async def counted(self: AioBaseClient, operation: str, params: Any) -> Any:
        name = f"{self.meta.service_model.service_name}.{operation}"
        CALLS[name] += 1
        started = time.perf_counter()
        try:
            return await original(self, operation, params)
        finally:
            SECONDS[name] += time.perf_counter() - started

    AioBaseClient._make_api_call = counted


def _verb(statement: str) -> str:
    return statement.split(None, 1)[0].upper() if statement.strip() else "?"


def _count_sql() -> None:
    """Statements through SQLAlchemy (start-up, the corpus) and through asyncpg (the
    PostgreSQL source's reads)."""

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        CALLS[f"sql.{_verb(statement)}"] += 1

    event.listen(Engine, "before_cursor_execute", before)
    original: Callable[..., Any] = asyncpg.Connection.fetch

    async def fetch(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        name = f"sql.{_verb(query)}"
        CALLS[name] += 1
        started = time.perf_counter()
        try:
            return await original(self, query, *args, **kwargs)
        finally:
            SECONDS[name] += time.perf_counter() - started

    asyncpg.Connection.fetch = fetch


def _env(url: str, workers: int) -> dict[str, str]:
    ns = f"rt{os.getpid()}{int(time.time()) % 100000}"
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return {
        "LOOM_ITERATOR__SOURCE_URL": url,
        "LOOM_ITERATOR__WORKERS": str(workers),
        "LOOM_STORAGE__ITERATOR_QUEUE": "sqs",
        "LOOM_STORAGE__ITERATOR_STATE": "dynamodb",
        "LOOM_SQS__ENDPOINT_URL": os.environ["LOOM_TEST_SQS_ENDPOINT"],
        "LOOM_SQS__QUEUE_PREFIX": f"{ns}-",
        "LOOM_SQS__CREATE_QUEUES": "true",
        "LOOM_DYNAMODB__ENDPOINT_URL": os.environ["LOOM_TEST_DYNAMODB_ENDPOINT"],
        "LOOM_DYNAMODB__TABLE_PREFIX": f"{ns}-",
        "LOOM_DYNAMODB__CREATE_TABLES": "true",
    }


async def _run(args: argparse.Namespace) -> None:
    _count_aws()
    _count_sql()
    base = os.environ["LOOM_TEST_POSTGRES_URL"]
    async with private_database(base) as url:
        shape = CorpusShape(
            enterprises=args.enterprises, users_per_enterprise=args.users, large_users=0
        )
        await write_url(url, generate(shape))
        with tempfile.TemporaryDirectory(prefix="loom-rt-") as tmp:
            settings = load_settings(env=_env(url, args.workers))
            settings = replace(
                settings,
                server=replace(settings.server, port=0, use_uvloop=False),
                sqlite=replace(settings.sqlite, data_dir=str(Path(tmp))),
            )
            loom = await build_server(settings)
            try:
                CALLS.clear()
                profiler = cProfile.Profile() if args.profile else None
                if profiler:
                    profiler.enable()
                started = time.perf_counter()
                cpu = time.process_time()
                objects, final = await _job(f"127.0.0.1:{loom.port}", args.enterprises)
                seconds = time.perf_counter() - started
                cpu = time.process_time() - cpu
                if profiler:
                    profiler.disable()
            finally:
                await loom.stop()
    chunks = max(1, final.chunks_emitted)
    print(f"{objects} objects, {final.chunks_emitted} chunks, {seconds:.2f} s, "
          f"{objects / seconds:,.0f} objects/s, {objects / chunks:,.0f} objects/chunk, "
          f"CPU of this process {cpu:.2f} s ({cpu / seconds:.0%} of one core)")  # fmt: skip
    print(f"{'operation':40} {'calls':>7} {'per chunk':>10} {'per 1k obj':>11} {'ms/call':>8}")
    for name, n in sorted(CALLS.items(), key=lambda kv: -kv[1]):
        ms = 1000 * SECONDS[name] / n if name in SECONDS else float("nan")
        print(f"{name:40} {n:7} {n / chunks:10.2f} {1000 * n / max(1, objects):11.2f} {ms:8.1f}")
    for prefix in ("sqs.", "dynamodb.", "sql."):
        n = sum(v for k, v in CALLS.items() if k.startswith(prefix))
        print(f"{prefix + '*':40} {n:7} {n / chunks:10.2f} {1000 * n / max(1, objects):11.2f}")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


async def _job(target: str, enterprises: int) -> tuple[int, pb.Job]:
    async with grpc.aio.insecure_channel(
        target, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    ) as channel:
        stub = iterator_pb2_grpc.IteratorStub(channel)
        job = await stub.StartIteration(
            pb.StartIterationRequest(
                enterprise_range=pb.EnterpriseRange(
                    first_enterprise_id=1, last_enterprise_id=enterprises
                ),
                level="file",
            )
        )
        objects = 0
        started = time.perf_counter()
        first = last = 0.0
        async for batch in stub.StreamObjects(pb.StreamObjectsRequest(job_id=job.job_id)):
            objects += sum(len(c.object_keys) for c in batch.chunks)
            last = time.perf_counter() - started
            first = first or last
        ended = time.perf_counter() - started
        final = await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))
        print(f"first objects after {first:.2f} s, last after {last:.2f} s, "
              f"stream ended (job completed) after {ended:.2f} s")  # fmt: skip
    return objects, final


def main() -> None:
    """Parses arguments and runs the bench."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--enterprises", type=int, default=4)
    parser.add_argument("--users", type=int, default=100, help="users per enterprise")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions")
    asyncio.run(_run(parser.parse_args()))


if __name__ == "__main__":
    main()
