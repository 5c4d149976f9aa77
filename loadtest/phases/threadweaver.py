"""The ThreadWeaver workload's phases beside weaving and reading: the BFS baseline, read cost
vs chain length, raw conditional writes, and the check of every answer against the truth.

* BFS (`loadtest.baselines.bfs`): a team's breadth-first search from the same start threads
  GetUnifiedThread gets, closed loop, concurrency 1: what every read ratio is against.
* Chains (`loadtest.corpora.threadweaver.chain`): the same 80-thread conversation built as a
  chain of 5, 20 or 80 unified threads. GetUnifiedThread from random threads of each, timed
  per chain length and per store, beside the BFS baseline on the same chains: the figure
  that shows whether the read cost grows with the chain of merges.
* Raw conditional writes (`loadtest.baselines.conditional_writes`): as many bare
  insert-if-absent calls as the corpus has message copies, on the store's engine, from this
  process; WeaveMessages throughput is reported as a fraction of that rate.
* Verification, untimed: a sample of GetUnifiedThread answers against the BFS answer and the
  union-find truth (threads and stats), every thread's ResolveThreads against the truth's
  partition; each count of mismatches is a figure.
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Mapping, Sequence

from loom.v1 import threadweaver_pb2, threadweaver_pb2_grpc

from loadtest.baselines.bfs import BfsBaseline
from loadtest.baselines.conditional_writes import insert_if_absent, measure_raw_rate
from loadtest.corpora.threadweaver import Chain, GroundTruth, ThreadKey
from loadtest.figures.threadweaver_truth import ExpectedStats, partition_mismatches
from loadtest.harness import Harness
from loadtest.traffic.threadweaver_requests import thread_keys, weave_batches

__all__ = [
    "bfs_chain_phases",
    "bfs_phase",
    "chain_plot",
    "chain_read_phases",
    "raw_write_phase",
    "verify_answers",
]

_TIMEOUT_S = 120.0


def _chain_phase(store: str, length: int) -> str:
    return f"{store}.GetUnifiedThread-chain{length}"


async def bfs_phase(
    args: argparse.Namespace,
    harness: Harness,
    bfs: BfsBaseline,
    starts: Sequence[ThreadKey],
    team: Sequence[str],
    phase: str,
) -> None:
    """The baseline: a team's BFS from the same start threads GetUnifiedThread gets."""
    found: list[int] = []
    levels: list[int] = []

    async def search(i: int) -> None:
        result = await bfs.unified_threads_async(*starts[i % len(starts)], team)
        found.append(len(result.threads))
        levels.append(result.levels)

    for k in starts[: args.warmup]:
        await bfs.unified_threads_async(*k, team)
    await harness.closed_loop(phase, search, concurrency=1, count=args.bfs_queries)
    report = harness.report
    report.add_figure(f"{phase}.threads_per_result_mean", round(sum(found) / max(1, len(found)), 1))
    report.add_figure(f"{phase}.levels_mean", round(sum(levels) / max(1, len(levels)), 1))


async def bfs_chain_phases(
    args: argparse.Namespace, harness: Harness, bfs: BfsBaseline, chains: Sequence[Chain]
) -> None:
    """The BFS baseline from random threads of each chain (whose levels grow with it)."""
    for c in chains:
        rng = random.Random(args.seed + c.length)
        gids = sorted({gid for gid, _ in c.threads})

        async def search(
            _i: int, c: Chain = c, rng: random.Random = rng, gids: list[str] = gids
        ) -> None:
            await bfs.unified_threads_async(*rng.choice(c.threads), gids)

        await harness.closed_loop(
            _chain_phase("baseline-bfs", c.length), search, concurrency=1, count=args.chain_queries
        )
        # The BFS pays one SQL round trip per level: from the chain's first thread, ~length.
        first = await bfs.unified_threads_async(*c.threads[0], gids)
        harness.report.add_figure(f"baseline-bfs.chain{c.length}_levels", first.levels)


async def chain_read_phases(
    args: argparse.Namespace,
    harness: Harness,
    store: str,
    stub: threadweaver_pb2_grpc.ThreadWeaverStub,
    chains: Sequence[Chain],
) -> None:
    """Weaves each chain (untimed), then times GetUnifiedThread on it and checks one answer."""
    report = harness.report
    bad = 0
    for c in chains:
        for group in c.groups:
            await stub.WeaveMessages(weave_batches(group, len(group))[0], timeout=_TIMEOUT_S)
        for link in c.links:
            await stub.WeaveMessages(weave_batches(link, len(link))[0], timeout=_TIMEOUT_S)
        rng = random.Random(args.seed + c.length)
        requests = [
            threadweaver_pb2.GetUnifiedThreadRequest(gid=gid, thread_id=tid)
            for gid, tid in (rng.choice(c.threads) for _ in range(args.chain_queries))
        ]

        async def get(
            i: int, requests: list[threadweaver_pb2.GetUnifiedThreadRequest] = requests
        ) -> None:
            await stub.GetUnifiedThread(requests[i % len(requests)], timeout=_TIMEOUT_S)

        for i in range(args.warmup):
            await get(i)
        await harness.closed_loop(
            _chain_phase(store, c.length), get, concurrency=1, count=args.chain_queries
        )
        view = await stub.GetUnifiedThread(requests[0], timeout=_TIMEOUT_S)
        bad += (
            thread_keys(view.threads) != frozenset(c.threads)
            or len(view.unified_thread_ids) != c.length
            or view.stats.message_count != len(c.groups) + len(c.links)
        )
    report.add_figure(f"{store}.chain_mismatches", bad)
    if len(chains) > 1:
        first, last = _chain_phase(store, chains[0].length), _chain_phase(store, chains[-1].length)
        for metric in ("p50", "p99"):
            report.add_figure(
                f"{store}.chain{chains[-1].length}_vs_chain{chains[0].length}_{metric}",
                round(report.ratio(last, first, metric), 2),
            )


def chain_plot(harness: Harness, stores: Sequence[str], chains: Sequence[Chain]) -> None:
    """p50 and p99 of GetUnifiedThread against the chain length, per store and for the BFS."""
    report = harness.report
    xs = [float(c.length) for c in chains]
    series: dict[str, list[float]] = {}
    for name in ("baseline-bfs", *stores):
        for metric in ("p50", "p99"):
            series[f"{name} {metric}"] = [
                report.phase(_chain_phase(name, c.length)).metric(metric) for c in chains
            ]
    report.add_line_plot(
        "GetUnifiedThread vs chain length",
        xs,
        series,
        "unified threads chained by merges (same 80 threads)",
        "latency (ms)",
        logy=True,
    )


async def raw_write_phase(
    args: argparse.Namespace,
    harness: Harness,
    store: str,
    run_id: str,
    items: Sequence[tuple[bytes, str]],
) -> None:
    """Bare insert-if-absent calls on `store`'s engine, one per message copy."""
    async with insert_if_absent(store, run_id, os.environ) as insert:
        calls, seconds = await measure_raw_rate(
            insert, items, batch=args.batch, callers=args.weave_concurrency
        )
    harness.report.add_figure(f"{store}.raw_insert_if_absent_per_s", round(calls / seconds))


async def verify_answers(
    harness: Harness,
    store: str,
    stub: threadweaver_pb2_grpc.ThreadWeaverStub,
    *,
    truth: GroundTruth,
    team: Sequence[str],
    bfs_answers: Mapping[ThreadKey, frozenset[ThreadKey]],
    stats: Mapping[frozenset[ThreadKey], ExpectedStats],
    pages: Sequence[threadweaver_pb2.ResolveThreadsRequest],
) -> None:
    """Untimed: GetUnifiedThread of each of `bfs_answers`' threads vs BFS and truth; every
    thread's ResolveThreads (`pages`) vs the truth's partition."""
    team = list(team)
    vs_bfs = vs_truth = vs_stats = 0
    for key, bfs_answer in bfs_answers.items():
        resp = await stub.GetUnifiedThread(
            threadweaver_pb2.GetUnifiedThreadRequest(gid=key[0], thread_id=key[1], team_gids=team),
            timeout=_TIMEOUT_S,
        )
        got = thread_keys(resp.threads)
        vs_bfs += got != bfs_answer or resp.oversized
        vs_truth += got != truth.team_component(*key, team)
        want = stats[truth.component(*key)]
        last_ms = (
            resp.stats.last_message_at.seconds * 1000
            + resp.stats.last_message_at.nanos // 1_000_000
        )
        vs_stats += (resp.stats.message_count, last_ms) != (
            want.message_count,
            want.last_message_at_ms,
        )
    resolved: dict[ThreadKey, str | None] = {}
    for page in pages:
        resp_r = await stub.ResolveThreads(page, timeout=_TIMEOUT_S)
        for r in resp_r.threads:
            resolved[(r.thread.gid, r.thread.thread_id)] = r.unified_thread_id if r.found else None
    report = harness.report
    report.add_figure(f"{store}.verified_threads", len(bfs_answers))
    report.add_figure(f"{store}.get_vs_bfs_mismatches", vs_bfs)
    report.add_figure(f"{store}.get_vs_truth_mismatches", vs_truth)
    report.add_figure(f"{store}.stats_mismatches", vs_stats)
    report.add_figure(f"{store}.resolved_threads", len(resolved))
    report.add_figure(
        f"{store}.resolve_partition_mismatches", partition_mismatches(resolved, truth)
    )
