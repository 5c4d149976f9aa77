"""UDCAs: what a formed cluster says about itself (fixed text, date format, vertical, fields)."""

from __future__ import annotations

import random

from server.templates.udcas import Cluster, date_format, field_rules, fixed_text, vertical
from tests.templates_corpus import NAMES, cluster_emails, receipt, reset


class TestUdcas:
    def test_receiptcluster_emails(self) -> None:
        """Fixed text, DD/MM order, receipt vertical and typed varying fields."""
        rng = random.Random(5)
        emails = cluster_emails(
            [receipt(rng, NAMES[i]) for i in range(6)], [f"u{i}" for i in range(6)]
        )
        c = Cluster(emails, 5)
        fixed = fixed_text(c)
        assert "Thanks for your order" in fixed
        assert not any(name in " ".join(fixed) for name in NAMES)
        assert date_format(c) == "DD/MM/YYYY"
        assert vertical(c) == "receipt"
        types = {r.type for r in field_rules(c)}
        assert {"id", "date", "money"} <= types

    def test_reset_is_account(self) -> None:
        """A password reset cluster is labelled account/security."""
        rng = random.Random(6)
        c = Cluster(
            cluster_emails([reset(rng, NAMES[i]) for i in range(6)], [f"u{i}" for i in range(6)]), 5
        )
        assert vertical(c) == "account"
