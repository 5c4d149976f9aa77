"""Stored forms of emails and templates, and the keyed recipient hash."""

from __future__ import annotations

from server.templates.model import (
    ClusterEmail,
    TemplateValue,
    decode_cluster_email,
    decode_templates,
    encode_cluster_email,
    encode_templates,
    recipient_hash,
)


class TestModel:
    def test_round_trips_and_recipient_hash(self) -> None:
        """Stored forms decode to what was encoded; the recipient hash is keyed."""
        e = ClusterEmail("u", "s@x", "subj", (("/p[0]", "hi"),), 5)
        assert decode_cluster_email(encode_cluster_email(e)) == e
        t = TemplateValue("id", "s", (1,), 5, 6, "other", ("a",), "", (), 9, "loom", ("a",))
        assert decode_templates(encode_templates([t])) == [t]
        assert recipient_hash("bob", b"k1") != recipient_hash("bob", b"k2")
        assert "bob" not in recipient_hash("bob", b"k1")
