"""Chunks sized by time: each worker's LIMIT per level follows what reads and commits cost."""

from __future__ import annotations

from server.iterator.sizing import COMMITS_PER_TARGET, ChunkSizer


class TestChunkSizer:
    def test_limit_follows_the_time_target_within_bounds(self) -> None:
        """Slow reads shrink the LIMIT, fast ones grow it, both within the bounds."""
        sizer = ChunkSizer(target_s=0.05, minimum=100, maximum=5000, initial=1000)
        assert sizer.limit(1) == 1000
        sizer.observe(1, 1000, 0.5)  # 0.5 ms per row: 100 rows fit in 50 ms
        assert sizer.limit(1) == 100
        for _ in range(30):
            sizer.observe(1, 1000, 0.001)
        assert sizer.limit(1) == 5000
        assert sizer.limit(2) == 1000

    def test_chunks_read_for_several_commits(self) -> None:
        """When committing a chunk costs more than a share of the time target, chunks grow
        so the read takes COMMITS_PER_TARGET commits' time (fewer transactions per object),
        within the bounds."""
        sizer = ChunkSizer(target_s=0.01, minimum=100, maximum=50_000, initial=1000)
        sizer.observe(1, 1000, 0.01)  # 10 µs per row: 1,000 rows meet the 10 ms target
        assert 990 <= sizer.limit(1) <= 1000
        for _ in range(40):
            sizer.observe_commit(0.05)  # a 50 ms commit: read for 200 ms, 20,000 rows
        assert 19_800 <= sizer.limit(1) <= 20_000
        assert COMMITS_PER_TARGET == 4
        bounded = ChunkSizer(target_s=0.01, minimum=100, maximum=8000, initial=1000)
        bounded.observe(1, 1000, 0.01)
        for _ in range(40):
            bounded.observe_commit(0.05)
        assert bounded.limit(1) == 8000
