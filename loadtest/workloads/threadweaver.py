"""ThreadWeaver against Streak's old BFS, on the multi-centi-thread corpus, per engine.

One run, one corpus, one machine: the baseline and every store are measured side by side so
the headline figures are ratios, not bare numbers (these machines are noisy).

1. Generate the synthetic corpus (:mod:`loadtest.corpora.threadweaver`) and its union-find
   ground truth; load the same messages into the BFS baseline's ``messages`` table.
2. ``baseline-bfs``: the pre-threadweaver unification (iterative SQL BFS for a team) from
   random team threads of the long discussions — closed loop, concurrency 1.
3. For each ``--store``: start a real ``loom serve --threadweaver-store <store>`` on a fresh
   data directory (a fresh Bigtable table prefix / Cassandra keyspace), then

   * ``<store>.WeaveMessages``: the whole corpus in batches of 1,000, closed loop with a few
     concurrent clients; the figure ``<store>.weave_messages_per_s`` is message copies woven
     per second of wall time;
   * ``<store>.GetUnifiedThread``: the same start threads as the baseline (same seed, same
     order), closed loop concurrency 1 for latency; ``<store>.GetUnifiedThread-cN`` at
     concurrency N for throughput;
   * ``<store>.ResolveThreads``: inbox pages of 100 threads;
   * correctness: a sample of GetUnifiedThread answers against the BFS answer and the
     union-find truth (threads and stats), and every thread's ResolveThreads answer against
     the truth's partition. Any mismatch is a figure and makes the run exit non-zero.

Requests are built before the clock starts so the load generator (which shares the two
cores with the server) spends its time on the wire, not on building protobufs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from loom.v1 import threadweaver_pb2, threadweaver_pb2_grpc

from loadtest.baselines.bfs import BfsBaseline
from loadtest.baselines.conditional_writes import raw_keys
from loadtest.corpora.threadweaver import (
    Chain,
    Corpus,
    CorpusParams,
    GroundTruth,
    ThreadKey,
    chain,
    generate,
    shuffled,
)
from loadtest.figures.threadweaver_truth import ExpectedStats, expected_stats
from loadtest.harness import Harness
from loadtest.phases.threadweaver import (
    bfs_chain_phases,
    bfs_phase,
    chain_plot,
    chain_read_phases,
    raw_write_phase,
    verify_answers,
)
from loadtest.stores import parse_stores, store_env
from loadtest.traffic.threadweaver_requests import (
    discussion_starts,
    get_requests,
    resolve_pages,
    weave_batches,
)
from server.threadweaver.model import default_ut
from storage.ports import ThreadKey as StoredThread

__all__ = ["CHANNEL_OPTIONS", "add_arguments", "run"]

CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
)
"""A 1,000-message batch is ~150 KB and a unified thread a few hundred refs, but a spam-sized
unified thread (10,000 refs) must not trip the 4 MB default."""

_RPC_TIMEOUT_S = 120.0


@dataclass(slots=True)
class _Inputs:
    """Everything prebuilt before any clock starts, shared by every store."""

    corpus: Corpus
    truth: GroundTruth
    stats: dict[frozenset[ThreadKey], ExpectedStats]
    weave: list[threadweaver_pb2.WeaveMessagesRequest]
    query_starts: list[ThreadKey]
    queries: list[threadweaver_pb2.GetUnifiedThreadRequest]
    verify_starts: list[ThreadKey]
    bfs_answers: dict[ThreadKey, frozenset[ThreadKey]]
    pages: list[threadweaver_pb2.ResolveThreadsRequest]
    all_threads: list[ThreadKey]
    chains: list[Chain]
    raw_items: list[tuple[bytes, str]]
    """One (Message-ID key, value) per message copy, in weave order: the raw-write baseline."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Corpus shape, stores, and how much of each phase to run."""
    parser.add_argument(
        "--store",
        type=parse_stores,
        default=["sqlite"],
        metavar="S[,S...]",
        help="engines to measure, comma-separated: sqlite, bigtable, cassandra",
    )
    parser.add_argument("--users", type=int, default=20, help="team size")
    parser.add_argument(
        "--discussions",
        type=int,
        default=3,
        help="2,000-message discussions; 3 give ~130K message copies to weave",
    )
    parser.add_argument("--messages-per-discussion", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--weave-order",
        choices=["sent", "shuffled"],
        default="sent",
        help="sent: messages woven as they are delivered (steady state); shuffled: random "
        "order, as a backfill of whole mailboxes would weave them (most unified threads)",
    )
    parser.add_argument("--batch", type=int, default=1000, help="messages per WeaveMessages")
    parser.add_argument("--weave-concurrency", type=int, default=4, help="concurrent weavers")
    parser.add_argument("--bfs-queries", type=int, default=100, help="timed BFS searches")
    parser.add_argument("--queries", type=int, default=1000, help="timed GetUnifiedThread calls")
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="untimed BFS searches and GetUnifiedThread calls before each timed phase",
    )
    parser.add_argument(
        "--throughput-concurrency",
        type=int,
        default=8,
        help="GetUnifiedThread callers of the throughput phase (0 skips it)",
    )
    parser.add_argument("--throughput-seconds", type=float, default=5.0)
    parser.add_argument("--resolve-pages", type=int, default=200, help="ResolveThreads calls")
    parser.add_argument(
        "--chain-lengths",
        type=lambda text: [int(x) for x in text.split(",") if x.strip()],
        default=[5, 20, 80],
        metavar="N[,N...]",
        help="unified threads per chain of the read-cost-vs-chain-length phases (empty: none)",
    )
    parser.add_argument(
        "--chain-threads", type=int, default=80, help="threads of every chain (same answer size)"
    )
    parser.add_argument(
        "--chain-queries", type=int, default=200, help="timed reads per chain length and store"
    )
    parser.add_argument(
        "--no-raw-writes",
        action="store_true",
        help="skip the engines' raw insert-if-absent baseline (needs engine access)",
    )
    parser.add_argument(
        "--verify-sample",
        type=int,
        default=100,
        help="start threads whose GetUnifiedThread is checked against BFS and ground truth",
    )


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Baseline, then every store; exits non-zero after writing the report on a mismatch."""
    report = harness.report
    # The machine is shared: its load beside the figures says how far to trust absolutes.
    report.add_figure("load_average_1m_at_start", round(os.getloadavg()[0], 2))
    with tempfile.TemporaryDirectory(prefix="loom-tw-bfs-") as tmp:
        bfs = BfsBaseline(Path(tmp) / "bfs.sqlite3")
        inputs = await _prepare(args, harness, bfs)
        # Everything prebuilt lives forever: keep the client's collector from rescanning it,
        # so a gen-2 pause in the load generator never lands in a server latency.
        gc.collect()
        gc.freeze()
        for store in args.store:
            await _measure_store(args, harness, store, inputs)
        # The load on a shared machine drifts over minutes: measure the baseline again at
        # the end, so each store's ratio is bracketed by a baseline before and after it.
        await bfs_phase(
            args, harness, bfs, inputs.query_starts, inputs.corpus.team_gids, "baseline-bfs-end"
        )
        for store in args.store:
            for metric in ("p50", "p99"):
                harness.report.ratio(f"{store}.GetUnifiedThread", "baseline-bfs-end", metric)
        if inputs.chains:
            chain_plot(harness, args.store, inputs.chains)
    report.add_figure("load_average_1m_at_end", round(os.getloadavg()[0], 2))
    mismatches = {k: v for k, v in report.figures.items() if k.endswith("_mismatches") and v != 0}
    if mismatches:
        print(report.table())
        if args.json is not None:
            report.write_json(args.json)
        if args.png is not None:
            from loadtest.plots import render_png  # matplotlib loads only when a PNG is asked for

            render_png(report, args.png)
        print(f"threadweaver: CORRECTNESS FAILURE {mismatches}", file=sys.stderr)
        raise SystemExit(1)


async def _prepare(args: argparse.Namespace, harness: Harness, bfs: BfsBaseline) -> _Inputs:
    report = harness.report
    t0 = time.perf_counter()
    corpus = generate(
        CorpusParams(
            users=args.users,
            discussions=args.discussions,
            messages_per_discussion=args.messages_per_discussion,
            seed=args.seed,
        )
    )
    truth = corpus.ground_truth()
    stats = expected_stats(corpus.messages, truth)
    sizes = corpus.thread_sizes()
    comps = truth.components()
    report.add_figure("corpus_messages", len(corpus))
    report.add_figure("corpus_threads", len(sizes))
    report.add_figure("corpus_components", len(comps))
    report.add_figure("largest_component_threads", len(comps[0]) if comps else 0)
    report.add_figure("generate_s", round(time.perf_counter() - t0, 3))

    t0 = time.perf_counter()
    order = (
        shuffled(corpus.messages, args.seed) if args.weave_order == "shuffled" else corpus.messages
    )
    weave = weave_batches(order, args.batch)
    rng = random.Random(args.seed)
    starts = discussion_starts(corpus)
    query_starts = [rng.choice(starts) for _ in range(max(args.queries, args.bfs_queries))]
    queries = get_requests(query_starts, corpus.team_gids)
    team = set(corpus.team_gids)
    team_threads = sorted(k for k in sizes if k[0] in team)
    half = args.verify_sample // 2
    verify_starts = list(
        dict.fromkeys(
            rng.sample(starts, min(half, len(starts)))
            + rng.sample(team_threads, min(args.verify_sample - half, len(team_threads)))
        )
    )
    all_threads = list(sizes)
    rng.shuffle(all_threads)
    pages = resolve_pages(all_threads, 100)
    chains = [chain(n, threads=args.chain_threads, seed=args.seed) for n in args.chain_lengths]
    raw_items = raw_keys(
        [m.rfc_message_id for m in order],
        [default_ut(StoredThread(m.gid, m.thread_id)) for m in order],
    )
    report.add_figure("prebuild_requests_s", round(time.perf_counter() - t0, 3))

    t0 = time.perf_counter()
    bfs.load(corpus)
    for c in chains:
        bfs.load(c.messages)
    report.add_figure("bfs_load_s", round(time.perf_counter() - t0, 3))
    inputs = _Inputs(
        corpus,
        truth,
        stats,
        weave,
        query_starts,
        queries,
        verify_starts,
        {},
        pages,
        all_threads,
        chains,
        raw_items,
    )
    await bfs_phase(
        args, harness, bfs, inputs.query_starts, inputs.corpus.team_gids, "baseline-bfs"
    )
    await bfs_chain_phases(args, harness, bfs, chains)

    # The baseline's answers for the verification sample, computed once for every store.
    bfs_answers = {
        k: (await bfs.unified_threads_async(*k, corpus.team_gids)).threads for k in verify_starts
    }
    bad = sum(
        1 for k, got in bfs_answers.items() if got != truth.team_component(*k, corpus.team_gids)
    )
    report.add_figure("bfs_vs_truth_mismatches", bad)
    inputs.bfs_answers = bfs_answers
    return inputs


async def _measure_store(
    args: argparse.Namespace, harness: Harness, store: str, inputs: _Inputs
) -> None:
    run_id = f"{int(time.time()):x}{os.getpid():x}"
    env = store_env(store, run_id, os.environ) if harness.target is None else {}
    if harness.target is None and not args.no_raw_writes:
        await raw_write_phase(args, harness, store, run_id, inputs.raw_items)
    async with contextlib.AsyncExitStack() as stack:
        target = await stack.enter_async_context(
            harness.server(extra_args=["--threadweaver-store", store], env=env)
        )
        channel = await stack.enter_async_context(harness.channel(target, options=CHANNEL_OPTIONS))
        stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
        await _weave(args, harness, store, stub, inputs)
        await _read(args, harness, store, stub, inputs)
        await verify_answers(
            harness,
            store,
            stub,
            truth=inputs.truth,
            team=inputs.corpus.team_gids,
            bfs_answers=inputs.bfs_answers,
            stats=inputs.stats,
            pages=inputs.pages,
        )
        await chain_read_phases(args, harness, store, stub, inputs.chains)


async def _weave(
    args: argparse.Namespace,
    harness: Harness,
    store: str,
    stub: threadweaver_pb2_grpc.ThreadWeaverStub,
    inputs: _Inputs,
) -> None:
    merged = 0

    async def weave(i: int) -> None:
        nonlocal merged
        resp = await stub.WeaveMessages(inputs.weave[i], timeout=_RPC_TIMEOUT_S)
        merged += sum(1 for r in resp.results if r.merged)

    stats = await harness.closed_loop(
        f"{store}.WeaveMessages",
        weave,
        concurrency=args.weave_concurrency,
        count=len(inputs.weave),
    )
    woven = sum(len(inputs.weave[i].messages) for i in range(len(inputs.weave)))
    report = harness.report
    report.add_figure(f"{store}.weave_messages_per_s", round(woven / stats.wall_s))
    raw = report.figures.get(f"{store}.raw_insert_if_absent_per_s")
    if isinstance(raw, int) and raw > 0:
        # Message copies woven per second over bare insert-if-absent calls per second.
        report.add_figure(
            f"{store}.weave_vs_raw_insert_if_absent", round(woven / stats.wall_s / raw, 2)
        )
    # Results flagged ``merged``: a message whose thread and Message-ID mapped to different
    # unified threads (the merge row is idempotent, so this counts re-recordings too).
    report.add_figure(f"{store}.weave_results_merged", merged)
    # A failed batch leaves messages unwoven: every later check would be meaningless.
    report.add_figure(f"{store}.weave_failed_batch_mismatches", stats.error_count)


async def _read(
    args: argparse.Namespace,
    harness: Harness,
    store: str,
    stub: threadweaver_pb2_grpc.ThreadWeaverStub,
    inputs: _Inputs,
) -> None:
    queries = inputs.queries

    async def get(i: int) -> None:
        await stub.GetUnifiedThread(queries[i % len(queries)], timeout=_RPC_TIMEOUT_S)

    for i in range(args.warmup):
        await get(i)
    await harness.closed_loop(f"{store}.GetUnifiedThread", get, concurrency=1, count=args.queries)
    report = harness.report
    for metric in ("p50", "p99"):
        ratio = report.ratio(f"{store}.GetUnifiedThread", "baseline-bfs", metric)
        report.add_figure(f"{store}.speedup_vs_bfs_{metric}", round(1.0 / ratio, 1))
    if args.throughput_concurrency > 0:
        await harness.closed_loop(
            f"{store}.GetUnifiedThread-c{args.throughput_concurrency}",
            get,
            concurrency=args.throughput_concurrency,
            duration_s=args.throughput_seconds,
        )
    pages = inputs.pages

    async def resolve(i: int) -> None:
        await stub.ResolveThreads(pages[i % len(pages)], timeout=_RPC_TIMEOUT_S)

    if args.resolve_pages > 0 and pages:
        await harness.closed_loop(
            f"{store}.ResolveThreads", resolve, concurrency=1, count=args.resolve_pages
        )
