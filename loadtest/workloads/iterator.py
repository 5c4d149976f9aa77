"""Iterator: objects/s to a StreamObjects consumer against the raw keyset scan of the same
database, a large user split vs unsplit vs spread over many users, duplicates under
forced redelivery.

``python -m loadtest iterator [--mode embedded|distributed] --json OUT.json``

Per run: a Box-like corpus (`loadtest/corpora/iterator.py`) is written to the source; the
**baseline** is a single loop of ``SELECT id FROM file WHERE user_id = ? AND id > ? ORDER BY
id LIMIT n`` over every user of the scope, no pipeline, measured in the same run on the same
database; the **pipeline** figure is a real ``loom serve`` iterating the same scope's files
into one StreamObjects consumer (counting objects, checking the set against plain SQL). The
headline is the ratio. Embedded = SQLite source, queue and state; distributed = PostgreSQL
source (LOOM_TEST_POSTGRES_URL), SQS (LOOM_TEST_SQS_ENDPOINT) and DynamoDB Local
(LOOM_TEST_DYNAMODB_ENDPOINT) from ``scripts/engines/up.sh``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

import grpc
from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from loadtest.corpora.iterator import Corpus, CorpusShape, expected_ids, generate, write_url
from loadtest.harness import Harness

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Corpus size, mode and which phases run."""
    parser.add_argument("--mode", choices=["embedded", "distributed"], default="embedded")
    parser.add_argument("--enterprises", type=int, default=20)
    parser.add_argument("--users", type=int, default=250, help="users per enterprise")
    parser.add_argument("--large-user-files", type=int, default=1_000_000)
    parser.add_argument("--spread-users", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=1000, help="LIMIT of the raw scan")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-redelivery", action="store_true")
    parser.add_argument("--workers", type=int, default=4)


def _env(mode: str, url: str, **extra: object) -> dict[str, str]:
    ns = f"lt{uuid.uuid4().hex[:8]}"
    env = {"LOOM_ITERATOR__SOURCE_URL": url, "LOOM_SQLITE__SYNCHRONOUS": "NORMAL"}
    if mode == "distributed":
        env.update(
            {
                "LOOM_STORAGE__ITERATOR_QUEUE": "sqs",
                "LOOM_STORAGE__ITERATOR_STATE": "dynamodb",
                "LOOM_SQS__ENDPOINT_URL": os.environ["LOOM_TEST_SQS_ENDPOINT"],
                "LOOM_SQS__QUEUE_PREFIX": f"{ns}-",
                "LOOM_SQS__CREATE_QUEUES": "true",
                "LOOM_DYNAMODB__ENDPOINT_URL": os.environ["LOOM_TEST_DYNAMODB_ENDPOINT"],
                "LOOM_DYNAMODB__TABLE_PREFIX": f"{ns}-",
                "LOOM_DYNAMODB__CREATE_TABLES": "true",
                "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "loadtest"),
                "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "loadtest"),
                "AWS_DEFAULT_REGION": "us-east-1",
            }
        )
    env.update({f"LOOM_ITERATOR__{k.upper()}": str(v) for k, v in extra.items()})
    return env


async def _raw_scan(url: str, users: list[int], chunk: int) -> tuple[int, float]:
    """The baseline: one keyset loop per user, no pipeline. (rows, seconds)"""
    engine = create_async_engine(url)
    sql = text(
        "SELECT id FROM file WHERE user_id = :u AND id > :m AND deleted = 0 ORDER BY id LIMIT :n"
    )
    rows = 0
    started = time.perf_counter()
    async with engine.connect() as conn:
        for user in users:
            marker = -1
            while True:
                got = (await conn.execute(sql, {"u": user, "m": marker, "n": chunk})).all()
                rows += len(got)
                if len(got) < chunk:
                    break
                marker = got[-1][0]
    seconds = time.perf_counter() - started
    await engine.dispose()
    return rows, seconds


async def _job(target: str, request: pb.StartIterationRequest) -> tuple[list[int], float, pb.Job]:
    """Runs a job to completion into one consumer: (object ids, seconds, final job)."""
    async with grpc.aio.insecure_channel(
        target, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    ) as channel:
        stub = iterator_pb2_grpc.IteratorStub(channel)
        started = time.perf_counter()
        job = await stub.StartIteration(request)
        ids: list[int] = []
        async for batch in stub.StreamObjects(pb.StreamObjectsRequest(job_id=job.job_id)):
            acks = []
            for c in batch.chunks:
                ids.extend(c.object_keys)
                acks.append(c.chunk_id)
            if request.require_ack:
                await stub.AckObjects(pb.AckObjectsRequest(job_id=job.job_id, chunk_ids=acks))
        seconds = time.perf_counter() - started
        final = await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))
    return ids, seconds, final


async def _truth(url: str, scope_level: int, emit_level: int, first: int, last: int) -> list[int]:
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        got = await conn.execute(
            text(expected_ids(scope_level, emit_level)), {"first": first, "last": last}
        )
        ids = [r[0] for r in got]
    await engine.dispose()
    return ids


def _source_url(mode: str, tmp: Path, name: str) -> str:
    if mode == "distributed":
        return os.environ["LOOM_TEST_POSTGRES_URL"]
    return f"sqlite+aiosqlite:///{tmp / name}"


async def _throughput(args: argparse.Namespace, harness: Harness, tmp: Path) -> None:
    report = harness.report
    url = _source_url(args.mode, tmp, "corpus.sqlite3")
    shape = CorpusShape(
        enterprises=args.enterprises, users_per_enterprise=args.users, large_users=0
    )
    corpus = generate(shape)
    await write_url(url, corpus)
    users = sorted({u for u, _, d in corpus.users if not d})
    live_ents = {e for e, d in corpus.enterprise if not d}
    users = sorted(u for u, e, d in corpus.users if not d and e in live_ents)
    raw_rows, raw_s = await _raw_scan(url, users, args.chunk)
    report.add_figure(f"{args.mode}.raw_keyset_rows_per_s", round(raw_rows / raw_s))
    request = pb.StartIterationRequest(
        enterprise_range=pb.EnterpriseRange(
            first_enterprise_id=1, last_enterprise_id=args.enterprises
        ),
        level="file",
    )
    async with harness.server(env=_env(args.mode, url, workers=args.workers)) as target:
        ids, seconds, final = await _job(target, request)
    truth = await _truth(url, 0, 2, 1, args.enterprises)
    rate = len(ids) / seconds
    report.add_figure(f"{args.mode}.pipeline_objects_per_s", round(rate))
    report.add_figure(f"{args.mode}.pipeline_vs_raw", round(rate / (raw_rows / raw_s), 3))
    report.add_figure(
        f"{args.mode}.correctness",
        {
            "objects": len(ids),
            "expected": len(truth),
            "missing": len(set(truth) - set(ids)),
            "duplicates": len(ids) - len(set(ids)),
            "chunks": final.chunks_emitted,
            "objects_per_chunk": round(len(ids) / max(1, final.chunks_emitted)),
        },
    )


async def _large_user(args: argparse.Namespace, harness: Harness, tmp: Path) -> None:
    report = harness.report
    n = args.large_user_files
    spread = args.spread_users
    corpus = Corpus(
        enterprise=[(1, 0), (2, 0)],
        users=[(1, 1, 0)] + [(10 + i, 2, 0) for i in range(spread)],
    )
    # user 1 owns n files; users 10.. own the same number spread over `spread` users,
    # interleaved with user 1's ids as rows created over years would be.
    corpus.file = [(2 * i + 1, 1, 0) for i in range(n)] + [
        (2 * i + 2, 10 + i % spread, 0) for i in range(n)
    ]
    url = _source_url(args.mode, tmp, "large.sqlite3")
    await write_url(url, corpus)
    cases = {
        "unsplit": (pb.StartIterationRequest(user_id=1, level="file"), 10**12),
        "split": (pb.StartIterationRequest(user_id=1, level="file"), 250_000),
        "spread": (pb.StartIterationRequest(enterprise_id=2, level="file"), 250_000),
    }
    times = {}
    for name, (request, threshold) in cases.items():
        env = _env(args.mode, url, workers=args.workers, large_range_threshold=threshold)
        async with harness.server(env=env) as target:
            ids, seconds, final = await _job(target, request)
        assert len(ids) == n, f"{name}: {len(ids)} of {n} files emitted"
        times[name] = seconds
        report.add_figure(
            f"{args.mode}.large_user.{name}",
            {"seconds": round(seconds, 2), "ranges": final.levels[-1].ranges},
        )
    report.add_figure(
        f"{args.mode}.large_user.split_speedup", round(times["unsplit"] / times["split"], 2)
    )
    report.add_figure(
        f"{args.mode}.large_user.split_vs_spread", round(times["split"] / times["spread"], 2)
    )


async def _redelivery(args: argparse.Namespace, harness: Harness, tmp: Path) -> None:
    report = harness.report
    url = _source_url(args.mode, tmp, "redelivery.sqlite3")
    await write_url(url, generate(CorpusShape(enterprises=4, users_per_enterprise=100)))
    env = _env(args.mode, url, workers=args.workers, visibility_timeout_s=0.05, max_chunk=2000)
    request = pb.StartIterationRequest(
        enterprise_range=pb.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=4),
        level="version",
        require_ack=True,
    )
    async with harness.server(env=env) as target:
        ids, _, final = await _job(target, request)
    truth = await _truth(url, 0, 3, 1, 4)
    report.add_figure(
        f"{args.mode}.redelivery",
        {
            "visibility_timeout_s": 0.05,
            "objects": len(truth),
            "emitted_twice_to_consumer": len(ids) - len(set(ids)),
            "missing": len(set(truth) - set(ids)),
            "chunks_emitted": final.chunks_emitted,
            "chunks_resent": final.chunks_resent,
        },
    )


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Throughput vs raw scan, then the large user, then redelivery."""
    with tempfile.TemporaryDirectory(prefix="loom-iterator-") as tmp:
        await _throughput(args, harness, Path(tmp))
        if not args.skip_large:
            await _large_user(args, harness, Path(tmp))
        if not args.skip_redelivery:
            await _redelivery(args, harness, Path(tmp))
