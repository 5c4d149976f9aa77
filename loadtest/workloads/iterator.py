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
source (a private database on LOOM_TEST_POSTGRES_URL's server), SQS (LOOM_TEST_SQS_ENDPOINT)
and DynamoDB Local (LOOM_TEST_DYNAMODB_ENDPOINT) from ``scripts/engines/up.sh``; there the
raw TransactWriteItems rate of DynamoDB Local is measured too (`loadtest/baselines/`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from loadtest.baselines.keyset_scan import floor_scan, sqlalchemy_scan
from loadtest.baselines.step_transactions import dynamodb_transactions_per_s
from loadtest.corpora.iterator import (
    Corpus,
    CorpusShape,
    expected_ids,
    generate,
    private_database,
    write_url,
)
from loadtest.harness import Harness

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Corpus size, mode and which phases run."""
    parser.add_argument("--mode", choices=["embedded", "distributed"], default="embedded")
    parser.add_argument("--enterprises", type=int, default=20)
    parser.add_argument("--users", type=int, default=250, help="users per enterprise")
    parser.add_argument(
        "--zipf",
        type=float,
        default=CorpusShape().zipf_s,
        help="exponent of files per user (2.0: most users own a handful, as Box's do)",
    )
    parser.add_argument("--large-user-files", type=int, default=1_000_000)
    parser.add_argument("--spread-users", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=1000, help="LIMIT of the raw scan")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-redelivery", action="store_true")
    parser.add_argument("--workers", type=int, default=4, help="[iterator] workers per server")
    parser.add_argument(
        "--large-workers", type=int, default=0, help="workers for the large user (0: --workers)"
    )
    parser.add_argument(
        "--server-workers",
        type=int,
        default=1,
        help="server processes (loom serve --workers N, sharing the port and the stores)",
    )
    parser.add_argument("--large-threshold", type=int, default=250_000)
    parser.add_argument(
        "--redelivery-visibility",
        type=float,
        default=0.05,
        help="visibility timeout (s) that forces redeliveries (SQS rounds it up to whole s)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds of throughput and large user (medians)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="an [iterator] setting for every server of the run, e.g. hold_steps=1",
    )


_SETTINGS: dict[str, str] = {}
"""``--set`` [iterator] settings, applied to every server of the run."""


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
                "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            }
        )
    env.update({f"LOOM_ITERATOR__{k.upper()}": str(v) for k, v in _SETTINGS.items()})
    env.update({f"LOOM_ITERATOR__{k.upper()}": str(v) for k, v in extra.items()})
    return env


def _processes(args: argparse.Namespace) -> list[str]:
    """``loom serve`` arguments for `--server-workers` processes."""
    return ["--workers", str(args.server_workers)] if args.server_workers > 1 else []


async def _job(
    harness: Harness, target: str, request: pb.StartIterationRequest
) -> tuple[list[int], float, pb.Job]:
    """Runs a job to completion into one consumer: (object ids, seconds, final job)."""
    async with harness.channel(
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


@contextlib.asynccontextmanager
async def _source(mode: str, tmp: Path) -> AsyncIterator[str]:
    """The source database of this run (a private one on the PostgreSQL server)."""
    if mode == "distributed":
        async with private_database(os.environ["LOOM_TEST_POSTGRES_URL"]) as url:
            yield url
    else:
        yield f"sqlite+aiosqlite:///{tmp / 'corpus.sqlite3'}"


async def _throughput(args: argparse.Namespace, harness: Harness, url: str) -> None:
    """Rounds of (raw scan, pipeline job[, DynamoDB raw]); each round's ratio is its own
    pipeline over its own baseline, and the headline is the median ratio."""
    report = harness.report
    shape = CorpusShape(
        enterprises=args.enterprises,
        users_per_enterprise=args.users,
        large_users=0,
        zipf_s=args.zipf,
    )
    corpus = generate(shape)
    await write_url(url, corpus)
    live_ents = {e for e, d in corpus.enterprise if not d}
    users = sorted(u for u, e, d in corpus.users if not d and e in live_ents)
    truth = await _truth(url, 0, 2, 1, args.enterprises)
    request = pb.StartIterationRequest(
        enterprise_range=pb.EnterpriseRange(
            first_enterprise_id=1, last_enterprise_id=args.enterprises
        ),
        level="file",
    )
    rounds: list[dict[str, float]] = []
    for _ in range(max(1, args.repeats)):
        floor_rows, floor_s = await floor_scan(url, users, args.chunk)
        orm_rows, orm_s = await sqlalchemy_scan(url, users, args.chunk)
        assert floor_rows == orm_rows == len(truth), (floor_rows, orm_rows, len(truth))
        async with harness.server(
            env=_env(args.mode, url, workers=args.workers),
            extra_args=_processes(args),
        ) as target:
            ids, seconds, final = await _job(harness, target, request)
        # The floor again after the pipeline: a neighbour only ever slows a run down, so the
        # faster of the two bracketing runs is the floor of this round.
        _, floor_after_s = await floor_scan(url, users, args.chunk)
        floor_s = min(floor_s, floor_after_s)
        per_chunk = round(len(ids) / max(1, final.chunks_emitted))
        pipeline = len(ids) / seconds
        found = {
            "floor_rows_per_s": round(floor_rows / floor_s),
            "sqlalchemy_scan_rows_per_s": round(orm_rows / orm_s),
            "pipeline_objects_per_s": round(pipeline),
            "objects_per_chunk": per_chunk,
            "vs_floor": round(pipeline * floor_s / floor_rows, 3),
            "vs_sqlalchemy_scan": round(pipeline * orm_s / orm_rows, 3),
        }
        if args.mode == "distributed":
            tx = await dynamodb_transactions_per_s(
                objects=per_chunk,
                width=2,
                concurrency=args.workers * args.server_workers,
                seconds=5.0,
            )
            found["dynamodb_step_transactions_per_s"] = round(tx, 1)
            found["vs_dynamodb_bound"] = round(
                found["pipeline_objects_per_s"] / (tx * per_chunk), 3
            )
        rounds.append(found)
        report.add_figure(
            f"{args.mode}.correctness.round{len(rounds)}",
            {
                "objects": len(ids),
                "expected": len(truth),
                "missing": len(set(truth) - set(ids)),
                "duplicates": len(ids) - len(set(ids)),
                "chunks": final.chunks_emitted,
            },
        )
    report.add_figure(
        f"{args.mode}.corpus",
        {
            "files": len(truth),
            "users": len(users),
            "files_per_user": round(len(truth) / len(users), 1),
        },
    )
    report.add_figure(f"{args.mode}.throughput_rounds", rounds)
    for key in rounds[0]:
        report.add_figure(f"{args.mode}.median.{key}", statistics.median(r[key] for r in rounds))


async def _large_user(args: argparse.Namespace, harness: Harness, url: str) -> None:
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
    await write_url(url, corpus)
    never = 10**12
    cases = {  # (request, large_range_threshold, steal_after_s)
        "unsplit": (pb.StartIterationRequest(user_id=1, level="file"), never, never),
        "split": (pb.StartIterationRequest(user_id=1, level="file"), args.large_threshold, 5.0),
        "spread": (
            pb.StartIterationRequest(enterprise_id=2, level="file"),
            args.large_threshold,
            5.0,
        ),
    }
    workers = args.large_workers or args.workers
    times: dict[str, list[float]] = {name: [] for name in cases}
    ranges: dict[str, int] = {}
    for _ in range(max(1, args.repeats)):  # rounds interleave the cases: drift hits all alike
        for name, (request, threshold, steal) in cases.items():
            env = _env(
                args.mode,
                url,
                workers=workers,
                large_range_threshold=threshold,
                steal_after_s=steal,
            )
            async with harness.server(env=env, extra_args=_processes(args)) as target:
                ids, seconds, final = await _job(harness, target, request)
            assert len(ids) == n, f"{name}: {len(ids)} of {n} files emitted"
            assert len(set(ids)) == n, f"{name}: duplicates"
            times[name].append(round(seconds, 2))
            ranges[name] = final.levels[-1].ranges
    median = {name: statistics.median(t) for name, t in times.items()}
    for name in cases:
        report.add_figure(
            f"{args.mode}.large_user.{name}",
            {
                "median_s": median[name],
                "runs_s": times[name],
                "ranges": ranges[name],
                "workers": workers,
            },
        )
    report.add_figure(
        f"{args.mode}.large_user.split_speedup", round(median["unsplit"] / median["split"], 2)
    )
    report.add_figure(
        f"{args.mode}.large_user.split_vs_spread", round(median["split"] / median["spread"], 2)
    )


async def _redelivery(args: argparse.Namespace, harness: Harness, url: str) -> None:
    report = harness.report
    await write_url(url, generate(CorpusShape(enterprises=4, users_per_enterprise=100)))
    visibility = args.redelivery_visibility
    env = _env(
        args.mode,
        url,
        workers=args.workers,
        visibility_timeout_s=visibility,
        max_chunk=2000,
    )
    request = pb.StartIterationRequest(
        enterprise_range=pb.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=4),
        level="version",
        require_ack=True,
    )
    async with harness.server(env=env, extra_args=_processes(args)) as target:
        ids, _, final = await _job(harness, target, request)
    truth = await _truth(url, 0, 3, 1, 4)
    steps = sum(lv.ranges for lv in final.levels)
    report.add_figure(
        f"{args.mode}.redelivery",
        {
            "visibility_timeout_s": visibility,
            "objects": len(truth),
            "delivered_to_consumer": len(ids),
            "emitted_twice_to_consumer": len(ids) - len(set(ids)),
            "missing": len(set(truth) - set(ids)),
            "chunks_emitted": final.chunks_emitted,
            "chunks_read_twice": final.chunks_reread,
            "chunks_resent": final.chunks_resent,
            "ranges": steps,
        },
    )


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Throughput vs raw scan, then the large user, then redelivery."""
    for item in args.set:
        field, _, value = item.partition("=")
        _SETTINGS[field.strip()] = value.strip()
    harness.report.add_figure(
        f"{args.mode}.settings",
        {**_SETTINGS, "server_workers": args.server_workers, "workers": args.workers},
    )
    if args.mode == "distributed":  # DynamoDB Local takes any credentials; botocore wants some
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "loadtest")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "loadtest")
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with tempfile.TemporaryDirectory(prefix="loom-iterator-") as tmp:
        async with _source(args.mode, Path(tmp)) as url:
            if not args.skip_throughput:
                await _throughput(args, harness, url)
            if not args.skip_large:
                await _large_user(args, harness, url)
            if not args.skip_redelivery:
                await _redelivery(args, harness, url)
