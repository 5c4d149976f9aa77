"""The ThreadWeaver workload's extra phases: read cost vs chain length, raw conditional writes.

* Chains (`loadtest.corpora.threadweaver.chain`): the same 80-thread conversation built as a
  chain of 5, 20 or 80 unified threads. GetUnifiedThread from random threads of each, timed
  per chain length and per store, beside the BFS baseline on the same chains: the figure
  that shows whether the read cost grows with the chain of merges.
* Raw conditional writes (`loadtest.baselines.conditional_writes`): as many bare
  insert-if-absent calls as the corpus has message copies, on the store's engine, from this
  process; WeaveMessages throughput is reported as a fraction of that rate.
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence

from loom.v1 import threadweaver_pb2, threadweaver_pb2_grpc

from loadtest.baselines.bfs import BfsBaseline
from loadtest.baselines.conditional_writes import insert_if_absent, measure_raw_rate
from loadtest.corpora.threadweaver import Chain
from loadtest.harness import Harness
from loadtest.workloads._threadweaver_parts import thread_keys, weave_batches

__all__ = ["bfs_chain_phases", "chain_plot", "chain_read_phases", "raw_write_phase"]

_TIMEOUT_S = 120.0


def _chain_phase(store: str, length: int) -> str:
    return f"{store}.GetUnifiedThread-chain{length}"


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
