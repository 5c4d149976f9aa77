"""The TemplateInduction workload's pure parts: the §6.2 generator and the quality metric."""

from __future__ import annotations

import statistics
from collections import Counter

from loadtest.corpora.synthetic_emails import ZipfStream
from loadtest.figures.templates_quality import pairwise_quality


class TestZipfStream:
    def test_sizes_skew_and_cap(self) -> None:
        """Bodies ~N(10 KB, 2 KB) capped at 30 KB; Zipf skew; never more than T per template."""
        emails = ZipfStream(alpha=1.1, templates=2000, max_per_template=50, seed=2).take(3000)
        sizes = [len(e.html) for e in emails]
        assert 9_000 < statistics.mean(sizes) < 11_500
        assert max(sizes) <= 30 * 1024 + 200
        counts = Counter(e.template for e in emails)
        assert max(counts.values()) == 50
        assert counts.most_common(1)[0][0] < 20
        assert len({e.recipient for e in emails}) > 2990


class TestPairwiseQuality:
    def test_known_values(self) -> None:
        """Precision and recall over pairs; noise with a template is counted."""
        rows = [
            ("a", "t1", False),
            ("a", "t1", False),
            ("a", "t2", False),
            ("b", "t2", False),
            ("n", "t2", True),
        ]
        q = pairwise_quality(rows)
        # true pairs: a-a x3 -> 1 predicted together (the two t1); predicted pairs: t1 1, t2 3.
        assert q.precision == 1 / 4
        assert q.recall == 1 / 3
        assert q.noise_templated == 1
        assert q.templates == 2
