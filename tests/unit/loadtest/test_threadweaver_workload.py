"""Pure helpers of the ThreadWeaver workload: request building, sampling, expected answers."""

from __future__ import annotations

import pytest
from loom.v1 import common_pb2

from loadtest.corpora.threadweaver import Corpus, CorpusParams, ThreadKey, WovenMessage, generate
from loadtest.figures.threadweaver_truth import expected_stats, partition_mismatches
from loadtest.stores import store_env
from loadtest.traffic.threadweaver_requests import (
    discussion_starts,
    get_requests,
    resolve_pages,
    thread_keys,
    weave_batches,
)


def _small() -> Corpus:
    return generate(
        CorpusParams(users=4, messages_per_discussion=250, short_threads=5, automated_messages=10)
    )


def test_weave_batches_cover_every_message_in_order_with_exact_timestamps() -> None:
    """Batches keep every message in order with its millisecond timestamp; size 0 is refused."""
    msgs = [WovenMessage("g", f"t{i}", f"<{i}@x>", 1_700_000_000_123 + i) for i in range(5)]
    batches = weave_batches(msgs, 2)
    assert [len(b.messages) for b in batches] == [2, 2, 1]
    flat = [m for b in batches for m in b.messages]
    assert [(m.gid, m.thread_id, m.rfc_message_id) for m in flat] == [
        (m.gid, m.thread_id, m.rfc_message_id) for m in msgs
    ]
    assert flat[4].sent_at.seconds == 1_700_000_000
    assert flat[4].sent_at.nanos == 127_000_000
    with pytest.raises(ValueError, match="batch_size"):
        weave_batches(msgs, 0)


def test_discussion_starts_are_team_centi_threads_only() -> None:
    """Start threads are distinct team threads of the split discussions."""
    corpus = _small()
    starts = discussion_starts(corpus)
    team = set(corpus.team_gids)
    assert starts
    assert all(gid in team for gid, _ in starts)
    assert len(starts) == len(set(starts))
    assert all(len(corpus.discussions[0].threads[gid]) >= 2 for gid, _ in starts)


def test_get_requests_carry_the_team_and_resolve_pages_split_by_100() -> None:
    """Reads carry the team filter; ResolveThreads pages hold at most 100 threads."""
    reqs = get_requests([("a", "1"), ("b", "2")], ["a", "b", "c"])
    assert [(r.gid, r.thread_id, list(r.team_gids)) for r in reqs] == [
        ("a", "1", ["a", "b", "c"]),
        ("b", "2", ["a", "b", "c"]),
    ]
    threads = [("g", str(i)) for i in range(250)]
    pages = resolve_pages(threads)
    assert [len(p.threads) for p in pages] == [100, 100, 50]
    assert thread_keys(list(pages[2].threads)) == frozenset(threads[200:])


def test_expected_stats_count_distinct_message_ids_and_latest_time() -> None:
    """A component's expected stats: distinct Message-IDs and the latest sent time."""
    corpus = _small()
    truth = corpus.ground_truth()
    stats = expected_stats(corpus.messages, truth)
    assert set(stats) == set(truth.components())
    biggest = truth.components()[0]
    members = [m for m in corpus.messages if (m.gid, m.thread_id) in biggest]
    assert stats[biggest].message_count == len({m.rfc_message_id for m in members})
    assert stats[biggest].last_message_at_ms == max(m.sent_at_ms for m in members)


def test_partition_mismatches_zero_for_truth_and_counts_splits_merges_and_misses() -> None:
    """The truth's own partition has no mismatch; a split, a merge and an unresolved thread each
    count."""
    corpus = _small()
    truth = corpus.ground_truth()
    comps = truth.components()
    perfect = {key: f"ut{i}" for i, comp in enumerate(comps) for key in comp}
    assert partition_mismatches(perfect, truth) == 0

    split = dict(perfect)
    a, b = sorted(comps[0])[:2]
    split[a] = "lonely"  # a torn off its component: a and its old group both disagree
    assert partition_mismatches(split, truth) == len(comps[0])

    glued = dict(perfect)
    for key in comps[1]:
        glued[key] = "ut0"  # two components reported as one
    assert partition_mismatches(glued, truth) == len(comps[0]) + len(comps[1])

    missing: dict[ThreadKey, str | None] = dict(perfect)
    missing[b] = None
    assert partition_mismatches(missing, truth) == 1 + len(comps[0]) - 1


def test_store_env_gives_fresh_namespaces_and_needs_the_engine_address() -> None:
    """Each engine gets a fresh namespace for the run; a missing engine address is an error."""
    assert store_env("sqlite", "r1", {}) == {}
    bt = store_env("bigtable", "r1", {"BIGTABLE_EMULATOR_HOST": "127.0.0.1:1"})
    assert bt["LOOM_BIGTABLE__CREATE_TABLES"] == "true"
    assert bt["LOOM_BIGTABLE__TABLE_PREFIX"] == "ltr1-"
    cs = store_env(
        "cassandra",
        "r1",
        {"LOOM_TEST_CASSANDRA_CONTACT_POINTS": "127.0.0.1", "LOOM_TEST_CASSANDRA_PORT": "19042"},
    )
    assert cs["LOOM_CASSANDRA__KEYSPACE"] == "loadtest_r1"
    assert cs["LOOM_CASSANDRA__PORT"] == "19042"
    assert cs["LOOM_CASSANDRA__CREATE_SCHEMA"] == "true"
    for store in ("bigtable", "cassandra"):
        with pytest.raises(ValueError, match="engines/env"):
            store_env(store, "r1", {})
    with pytest.raises(ValueError, match="unknown store"):
        store_env("dynamo", "r1", {})


def test_thread_keys_of_refs() -> None:
    """Thread refs become (gid, thread) keys."""
    refs = [
        common_pb2.ThreadRef(gid="g", thread_id="t"),
        common_pb2.ThreadRef(gid="g", thread_id="u"),
    ]
    assert thread_keys(refs) == frozenset({("g", "t"), ("g", "u")})
