"""The TemplateInduction workload's pure parts: the §6.2 generator and the quality metric."""

from __future__ import annotations

import statistics
from collections import Counter

from loadtest.corpora.synthetic_emails import ZipfStream
from loadtest.figures.templates_quality import pairwise_quality, per_source, worst_source


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


class TestPerSource:
    def test_each_source_alone_and_the_worst(self) -> None:
        """A source's figures count its own emails (and the human ones): one source's
        merged siblings do not lower another's precision; the worst is the lowest floor."""
        source_of = {"a/x": "A", "a/y": "A", "b/z": "B", "sa": "A", "sb": "B"}
        train = [("a/x", "t1", False), ("a/y", "t1", False), ("b/z", "t2", False)] * 3
        fresh = [
            ("a/x", "t1", False),
            ("a/x", "t1", False),
            ("a/y", "t1", False),
            ("a/y", "t1", False),
            ("b/z", "t2", False),
            ("b/z", "t2", False),
            ("h/1", "", True),
        ]
        formed = [("t1", 5, "sa"), ("t2", 6, "sb")]
        got = per_source(train, fresh, formed, set(), set(), source_of)
        assert got["B"].precision == 1.0
        assert got["A"].precision == 0.333  # x-x, y-y true of the six pairs predicted (rounded)
        assert got["A"].unformed == ["a/y"]
        assert got["A"].least_recipients == 5
        assert worst_source(got) == "A"
