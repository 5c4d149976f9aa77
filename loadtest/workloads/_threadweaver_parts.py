"""Pure pieces of the ThreadWeaver workload: options, request building, expectations, checks.

Kept apart from the workload's orchestration (`loadtest/workloads/threadweaver.py`) so they
are unit-tested without a server and the workload module stays readable.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import common_pb2, threadweaver_pb2

from loadtest.corpora.threadweaver import Corpus, GroundTruth, ThreadKey, WovenMessage

STORES = ("sqlite", "bigtable", "cassandra")


class CorrectnessError(RuntimeError):
    """The server's unified threads disagree with the BFS baseline or the ground truth."""


# ---------------------------------------------------------------------------------------------
# Pure helpers (unit-tested): request building, sampling, expected answers, comparisons.


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def weave_batches(
    messages: Sequence[WovenMessage], batch_size: int
) -> list[threadweaver_pb2.WeaveMessagesRequest]:
    """``WeaveMessagesRequest``s of ``batch_size`` messages each (the last may be shorter)."""
    if batch_size < 1:
        raise ValueError("batch_size must be ≥ 1")
    out: list[threadweaver_pb2.WeaveMessagesRequest] = []
    for start in range(0, len(messages), batch_size):
        req = threadweaver_pb2.WeaveMessagesRequest()
        for m in messages[start : start + batch_size]:
            item = req.messages.add(
                gid=m.gid, thread_id=m.thread_id, rfc_message_id=m.rfc_message_id
            )
            item.sent_at.CopyFrom(_timestamp(m.sent_at_ms))
        out.append(req)
    return out


def discussion_starts(corpus: Corpus) -> list[ThreadKey]:
    """Team members' centi-threads of the long discussions: the slow case for the BFS."""
    team = set(corpus.team_gids)
    return [
        (gid, tid)
        for d in corpus.discussions
        for gid, tids in d.threads.items()
        if gid in team
        for tid in tids
    ]


def get_requests(
    starts: Sequence[ThreadKey], team_gids: Sequence[str]
) -> list[threadweaver_pb2.GetUnifiedThreadRequest]:
    """One ``GetUnifiedThreadRequest`` per start thread, team-filtered."""
    team = list(team_gids)
    return [
        threadweaver_pb2.GetUnifiedThreadRequest(gid=g, thread_id=t, team_gids=team)
        for g, t in starts
    ]


def resolve_pages(
    threads: Sequence[ThreadKey], page_size: int = 100
) -> list[threadweaver_pb2.ResolveThreadsRequest]:
    """Inbox pages: ``ResolveThreadsRequest``s of ``page_size`` threads each."""
    if page_size < 1:
        raise ValueError("page_size must be ≥ 1")
    return [
        threadweaver_pb2.ResolveThreadsRequest(
            threads=[
                common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in threads[i : i + page_size]
            ]
        )
        for i in range(0, len(threads), page_size)
    ]


def thread_keys(refs: Sequence[common_pb2.ThreadRef]) -> frozenset[ThreadKey]:
    """The (gid, thread_id) set of a response's thread refs."""
    return frozenset((r.gid, r.thread_id) for r in refs)


@dataclass(frozen=True, slots=True)
class ExpectedStats:
    """What ``UnifiedThreadStats`` must say for a component of the ground truth."""

    message_count: int
    last_message_at_ms: int


def expected_stats(
    messages: Sequence[WovenMessage], truth: GroundTruth
) -> dict[frozenset[ThreadKey], ExpectedStats]:
    """Distinct Message-IDs and latest ``sent_at`` of every component (whoever holds them).

    Every copy of a Message-ID carries the same ``sent_at`` in the corpus, and the first
    writer of the Message-ID wins, so the expected last time is simply the maximum.
    """
    rfcs: dict[frozenset[ThreadKey], set[str]] = {}
    last: dict[frozenset[ThreadKey], int] = {}
    component_of: dict[ThreadKey, frozenset[ThreadKey]] = {}
    for m in messages:
        key = (m.gid, m.thread_id)
        comp = component_of.get(key)
        if comp is None:
            comp = component_of[key] = truth.component(m.gid, m.thread_id)
        rfcs.setdefault(comp, set()).add(m.rfc_message_id)
        last[comp] = max(last.get(comp, m.sent_at_ms), m.sent_at_ms)
    return {c: ExpectedStats(len(ids), last[c]) for c, ids in rfcs.items()}


def partition_mismatches(resolved: Mapping[ThreadKey, str | None], truth: GroundTruth) -> int:
    """Threads whose group of same-unified-id threads differs from their true component.

    The server's unified ids are opaque; what must hold is that two threads share an id
    exactly when the union-find puts them together. Compared only over ``resolved``'s
    threads, so pass every thread of the corpus for a full check. Unresolved (None) counts.
    """
    groups: dict[str, set[ThreadKey]] = {}
    bad = 0
    for key, ut in resolved.items():
        if ut is None:
            bad += 1
        else:
            groups.setdefault(ut, set()).add(key)
    asked = set(resolved)
    for members in groups.values():
        for key in members:
            if truth.component(*key) & asked != members:
                bad += 1
    return bad


def store_env(store: str, run_id: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Environment for a ``loom serve`` on ``store``: fresh tables, engine from ``environ``.

    Engine addresses come from what ``scripts/engines/up.sh`` exported (``.engines/env``);
    a missing one is an error here rather than a server that hangs connecting to nothing.
    """
    if store == "sqlite":
        return {}
    if store == "bigtable":
        if not environ.get("BIGTABLE_EMULATOR_HOST"):
            raise ValueError("bigtable: BIGTABLE_EMULATOR_HOST is unset (source .engines/env)")
        return {
            "BIGTABLE_EMULATOR_HOST": environ["BIGTABLE_EMULATOR_HOST"],
            "LOOM_BIGTABLE__CREATE_TABLES": "true",
            "LOOM_BIGTABLE__TABLE_PREFIX": f"lt{run_id}-",
        }
    if store == "cassandra":
        points = environ.get("LOOM_TEST_CASSANDRA_CONTACT_POINTS")
        if not points:
            raise ValueError(
                "cassandra: LOOM_TEST_CASSANDRA_CONTACT_POINTS is unset (source .engines/env)"
            )
        return {
            "LOOM_CASSANDRA__CONTACT_POINTS": points,
            "LOOM_CASSANDRA__PORT": environ.get("LOOM_TEST_CASSANDRA_PORT", "9042"),
            "LOOM_CASSANDRA__KEYSPACE": f"loadtest_{run_id}",
            "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
        }
    raise ValueError(f"unknown store {store!r}; expected one of {', '.join(STORES)}")


def parse_stores(text: str) -> list[str]:
    stores = [s.strip() for s in text.split(",") if s.strip()]
    for s in stores:
        if s not in STORES:
            raise argparse.ArgumentTypeError(f"unknown store {s!r}; choose from {STORES}")
    if len(set(stores)) != len(stores) or not stores:
        raise argparse.ArgumentTypeError("give each store once")
    return stores


# ---------------------------------------------------------------------------------------------
# The run.


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
