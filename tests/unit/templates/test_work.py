"""The CPU stage's worker functions: the store path agrees with the annotation path."""

from __future__ import annotations

from server.templates.model import EmailIn, decode_cluster_email
from server.templates.schemes import SchemeParams
from server.templates.tokens import email_hashes, text_hashes
from server.templates.work import fingerprint_batch, fingerprint_for_store

KEY = b"test-key"
BODIES = (
    "<html><body><table><tr><td><p>Hi Ava,\n your   order 1234</p><p>has shipped</p>"
    "</td></tr></table><div>Total: <b>$12.00</b></div></body></html>",
    "<html><body><p>one</p></body></html>",
    "<p>\u00e9t\u00e9 \u2014 caf\u00e9</p>\u2028<p>x\r\ny</p>",
    "",
)


class TestFingerprintForStore:
    def test_agrees_with_fingerprint_batch(self) -> None:
        """Same keys, recipient hash, stored form and texts as the annotation path's values."""
        params = SchemeParams()
        emails = [
            EmailIn(f"e{i}", f"s{i}@x.example", f"r{i}", f"Order {i}", body, 1000 + i)
            for i, body in enumerate(BODIES)
        ]
        items = [
            (e.sender, e.recipient_id, e.subject, e.html_body, e.received_at_ms) for e in emails
        ]
        stored = fingerprint_for_store(items, params, KEY)
        parsed = fingerprint_batch(emails, params, KEY)
        for e, s, p in zip(emails, stored, parsed, strict=True):
            assert s is not None
            assert p is not None
            assert s.keys == p.keys
            assert s.user == p.user.encode()
            assert decode_cluster_email(s.payload) == decode_cluster_email(p.payload)
            assert s.text_list() == [text for _, text in p.texts]
            assert text_hashes(e.subject, s.text_list()) == email_hashes(e.subject, p.texts)

    def test_texts_survive_the_one_string_form(self) -> None:
        """Text nodes never hold a line break (whitespace is collapsed), so one string with a
        line per text loses nothing; an email without text has no texts."""
        (stored,) = fingerprint_for_store([("s", "r", "", BODIES[0], 0)], SchemeParams(), KEY)
        assert stored is not None
        assert stored.text_list() == ["Hi Ava, your order 1234", "has shipped", "Total:", "$12.00"]
        (empty,) = fingerprint_for_store([("s", "r", "", "<br>", 0)], SchemeParams(), KEY)
        assert empty is not None
        assert empty.text_list() == []
