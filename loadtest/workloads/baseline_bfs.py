"""The pre-threadweaver BFS unification on SQLite, alone: no server needed.

Generates the multi-centi-thread corpus, loads it into SQLite and times
``GetUnifiedThread``-equivalent searches from random team threads of the long discussions
(the worst case the Streak write-up describes). The ThreadWeaver workload runs the same
phase as its in-run baseline; this one exists to size the baseline and check the harness.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from loadtest.baselines.bfs import BfsBaseline
from loadtest.corpora.threadweaver import CorpusParams, ThreadKey, generate
from loadtest.harness import Harness

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Corpus shape and how many searches to time."""
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--discussions", type=int, default=1)
    parser.add_argument("--messages-per-discussion", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries", type=int, default=20, help="searches to time")
    parser.add_argument("--concurrency", type=int, default=1)


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Build, load, then time BFS searches in closed loop as phase ``baseline-bfs``."""
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
    report.add_figure("corpus_messages", len(corpus))
    report.add_figure("corpus_threads", len(corpus.thread_sizes()))
    report.add_figure("generate_s", round(time.perf_counter() - t0, 3))
    team = set(corpus.team_gids)
    starts: list[ThreadKey] = [
        (gid, tid)
        for d in corpus.discussions
        for gid, tids in d.threads.items()
        if gid in team
        for tid in tids
    ]
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="loom-bfs-") as tmp:
        bfs = BfsBaseline(Path(tmp) / "bfs.sqlite3")
        t0 = time.perf_counter()
        bfs.load(corpus)
        report.add_figure("sqlite_load_s", round(time.perf_counter() - t0, 3))
        sizes: list[int] = []

        async def search(_i: int) -> None:
            gid, tid = rng.choice(starts)
            result = await bfs.unified_threads_async(gid, tid, corpus.team_gids)
            sizes.append(len(result.threads))

        await harness.closed_loop(
            "baseline-bfs", search, concurrency=args.concurrency, count=args.queries
        )
        report.add_figure("threads_per_result_max", max(sizes, default=0))
        gid, tid = starts[0]
        report.add_figure("bfs_levels", bfs.unified_threads(gid, tid, corpus.team_gids).levels)
