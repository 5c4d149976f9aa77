"""Exact percentiles and phase statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadtest.recorder import LatencyRecorder, nearest_rank


class TestNearestRank:
    @pytest.mark.parametrize("pct", [0.1, 1, 50, 95, 99, 99.9, 100], ids=str)
    def test_matches_numpy_inverted_cdf(self, pct: float) -> None:
        """On random samples every percentile equals numpy's exact inverted-CDF answer."""
        rng = np.random.default_rng(7)
        samples = np.sort(rng.lognormal(mean=1.0, sigma=1.5, size=12_345))
        expected = float(np.percentile(samples, pct, method="inverted_cdf"))
        assert expected == nearest_rank(samples, pct)

    def test_hand_case_one_to_thousand(self) -> None:
        """For 1..1000 ms the p50/p99/p999 are the 500th/990th/999th values (not the max)."""
        samples = np.arange(1, 1001, dtype=np.float64)
        assert tuple(nearest_rank(samples, p) for p in (50, 99, 99.9, 100)) == (
            500.0,
            990.0,
            999.0,
            1000.0,
        )

    def test_empty_is_nan(self) -> None:
        """No samples gives NaN rather than a made-up zero."""
        assert math.isnan(nearest_rank(np.empty(0), 50))


class TestLatencyRecorder:
    def test_stats_summarise_samples_errors_and_drops(self) -> None:
        """Stats report ms latencies, throughput over wall time and errors by code."""
        rec = LatencyRecorder()
        for ms in range(1, 101):
            rec.record(ms / 1000)
        rec.record_error("UNAVAILABLE")
        rec.record_error("UNAVAILABLE")
        rec.record_error("DEADLINE_EXCEEDED")
        rec.record_drop()
        stats = rec.stats(wall_s=2.0)
        assert stats.ok == 100
        assert stats.errors == {"DEADLINE_EXCEEDED": 1, "UNAVAILABLE": 2}
        assert stats.error_count == 3
        assert stats.dropped == 1
        assert stats.throughput == pytest.approx(50.0)
        assert stats.p50_ms == pytest.approx(50.0)
        assert stats.p99_ms == pytest.approx(99.0)
        assert stats.min_ms == pytest.approx(1.0)
        assert stats.max_ms == pytest.approx(100.0)
        assert stats.mean_ms == pytest.approx(50.5)
        assert stats.metric("p95") == stats.p95_ms

    def test_unknown_metric_is_rejected(self) -> None:
        """A typo in a ratio's metric name fails loudly instead of returning garbage."""
        stats = LatencyRecorder().stats(1.0)
        with pytest.raises(KeyError):
            stats.metric("p42")
