"""The BFS-over-SQL baseline agrees with union-find ground truth."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from loadtest.baselines.bfs import BfsBaseline
from loadtest.corpora.threadweaver import Corpus, CorpusParams, GroundTruth, generate


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return generate(
        CorpusParams(
            users=6,
            discussions=2,
            messages_per_discussion=420,
            automated_senders=2,
            automated_messages=50,
            short_threads=30,
            seed=11,
        )
    )


@pytest.fixture(scope="module")
def bfs(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> BfsBaseline:
    db = BfsBaseline(tmp_path_factory.mktemp("bfs") / "bfs.sqlite3")
    db.load(corpus)
    return db


class TestBfsBaseline:
    def test_matches_union_find_component_filtered_by_team(
        self, corpus: Corpus, bfs: BfsBaseline
    ) -> None:
        """For sampled team threads BFS finds exactly the team part of the true component."""
        truth = GroundTruth(corpus)
        team = set(corpus.team_gids)
        threads = sorted(k for k in corpus.thread_sizes() if k[0] in team)
        for gid, tid in random.Random(5).sample(threads, 40):
            expected = truth.team_component(gid, tid, corpus.team_gids)
            assert expected == bfs.unified_threads(gid, tid, corpus.team_gids).threads

    def test_discussion_needs_many_levels(self, corpus: Corpus, bfs: BfsBaseline) -> None:
        """Chained centi-threads make BFS walk level after level: the cost ThreadWeaver removes."""
        d = corpus.discussions[0]
        gid = next(g for g in d.threads if g in corpus.team_gids)
        result = bfs.unified_threads(gid, d.threads[gid][0], corpus.team_gids)
        assert result.levels >= 3
        assert len(result.threads) > len(d.threads[gid])

    def test_team_filter_excludes_outsiders(self, corpus: Corpus, bfs: BfsBaseline) -> None:
        """Threads of non-team mailboxes are never returned."""
        d = corpus.discussions[0]
        gid = next(g for g in d.threads if g in corpus.team_gids)
        found = bfs.unified_threads(gid, d.threads[gid][0], corpus.team_gids).threads
        assert {g for g, _ in found} <= set(corpus.team_gids)

    async def test_async_variant_runs_in_a_thread(self, corpus: Corpus, bfs: BfsBaseline) -> None:
        """The awaitable form (for the harness) returns what the blocking form does."""
        gid, tid = next(iter(corpus.thread_sizes()))
        sync = bfs.unified_threads(gid, tid, corpus.team_gids)
        assert sync == await bfs.unified_threads_async(gid, tid, corpus.team_gids)

    def test_query_plan_uses_both_indexes(self, bfs: BfsBaseline) -> None:
        """Every level is index lookups (frontier threads, then Message-IDs), never a scan."""
        plan = " | ".join(bfs.query_plan(frontier_size=3, team_size=4))
        assert "SEARCH m1 USING COVERING INDEX messages_by_thread" in plan
        assert "SEARCH m2 USING COVERING INDEX messages_by_rfc" in plan
        assert "SCAN m1" not in plan
        assert "SCAN m2" not in plan


def test_database_file_is_reusable(tmp_path: Path) -> None:
    """Opening an existing database keeps its rows (schema creation is idempotent)."""
    corpus = generate(
        CorpusParams(users=2, messages_per_discussion=10, short_threads=0, automated_senders=0)
    )
    BfsBaseline(tmp_path / "x.sqlite3").load(corpus)
    again = BfsBaseline(tmp_path / "x.sqlite3")
    gid, tid = corpus.messages[0].gid, corpus.messages[0].thread_id
    assert again.unified_threads(gid, tid, corpus.team_gids).threads
