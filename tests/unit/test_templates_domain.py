"""TemplateInduction's pure domain: fingerprints, values, UDCAs, both schemes, the cache."""

from __future__ import annotations

import random

import mmh3

from server.templates.cache import TtlLru
from server.templates.fingerprint import MAX_DEPTH, MINHASH_SEEDS, minhash, parse_structure
from server.templates.model import (
    ClusterEmail,
    TemplateValue,
    decode_cluster_email,
    decode_templates,
    encode_cluster_email,
    encode_templates,
    recipient_hash,
)
from server.templates.schemes import SchemeParams, form_templates, keys_for, match_template
from server.templates.tokens import email_hashes
from server.templates.udcas import Cluster, date_format, field_rules, fixed_text, vertical
from server.templates.values import classify, date_order, normalize
from tests.templates_corpus import NAMES, human, one_off_notice, receipt, reset

_TABLE = "<html><body><table><tr><td>Order</td><td>42</td></tr></table></body></html>"


class TestFingerprint:
    def test_xpaths_are_tag_names_with_same_tag_indices(self) -> None:
        """The paper's S: indexed tag paths, no attributes, no text."""
        s = parse_structure(
            '<table class="x"><tr><td>a</td></tr><tr><td>b</td><td id="c">c</td></tr></table>'
        )
        assert "/html[0]/body[0]/table[0]/tbody[0]/tr[1]/td[1]" in s.xpaths
        assert not any("class" in x or "id" in x for x in s.xpaths)
        assert "/html/body/table/tbody/tr/td" in s.plain_paths
        assert ("/html[0]/body[0]/table[0]/tbody[0]/tr[1]/td[1]", "c") in s.texts

    def test_three_minhash_values_are_pinned(self) -> None:
        """Same email, same values, in every process on every machine (mmh3, fixed seeds)."""
        assert MINHASH_SEEDS == (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D)
        expected = (1262771533175142054, 7768749385341590074, 1469259957201556649)
        assert minhash(parse_structure(_TABLE).xpaths) == expected

    def test_minhash_is_the_least_seeded_hash(self) -> None:
        """Each value is min over the set of mmh3.hash64(path, seed) (unsigned)."""
        items = frozenset({"/a[0]", "/a[0]/b[0]", "/a[0]/b[1]"})
        want = tuple(
            min(mmh3.hash64(i, seed, signed=False)[0] for i in items) for seed in MINHASH_SEEDS
        )
        assert minhash(items) == want

    def test_junk_and_deep_nesting_are_bounded(self) -> None:
        """Binary junk parses; 100,000 unclosed tags are cut to MAX_TAGS and MAX_DEPTH."""
        assert parse_structure(bytes(range(256)) * 10).xpaths
        deep = parse_structure("<div>" * 100_000)
        assert len(deep.xpaths) <= MAX_DEPTH + 1


class TestValues:
    def test_types(self) -> None:
        """Generic annotations: dates, money, ids, URLs, emails, names."""
        assert classify("12/03/2024") == "date"
        assert classify("$1,234.50") == "money"
        assert classify("AC123456") == "id"
        assert classify("https://x.example/a") == "url"
        assert classify("a@b.example") == "email"
        assert classify("Susan Calvin") == "name"
        assert classify("hello world") == "text"

    def test_ambiguous_dates_use_the_learned_order(self) -> None:
        """1/2/2025 is read with the template's order; unambiguous dates need none."""
        assert date_order(["13/02/2025", "1/2/2025", "25/12/2024"]) == "DMY"
        assert date_order(["02/13/2025"]) == "MDY"
        assert normalize("01/02/2025", "date", "DMY") == "2025-02-01"
        assert normalize("01/02/2025", "date", "MDY") == "2025-01-02"
        assert normalize("01/02/2025", "date", "") == ""
        assert normalize("25/12/2024", "date", "") == "2024-12-25"


def _cluster(emails: list[tuple[str, str]], users: list[str]) -> list[ClusterEmail]:
    out = []
    for (subject, html), user in zip(emails, users, strict=True):
        out.append(
            ClusterEmail(user, "orders@acme.example", subject, parse_structure(html).texts, 0)
        )
    return out


class TestUdcas:
    def test_receipt_cluster(self) -> None:
        """Fixed text, DD/MM order, receipt vertical and typed varying fields."""
        rng = random.Random(5)
        emails = _cluster([receipt(rng, NAMES[i]) for i in range(6)], [f"u{i}" for i in range(6)])
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
            _cluster([reset(rng, NAMES[i]) for i in range(6)], [f"u{i}" for i in range(6)]), 5
        )
        assert vertical(c) == "account"


class TestSchemes:
    def _emails(self) -> list[ClusterEmail]:
        rng = random.Random(7)
        made = [receipt(rng, NAMES[i % 12]) for i in range(8)] + [
            reset(rng, NAMES[i % 12]) for i in range(8)
        ]
        return _cluster(made, [f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)])

    def test_paper_scheme_merges_a_shared_layout(self) -> None:
        """The baseline: one row, one template for both templates of the layout."""
        emails = self._emails()
        formed = form_templates(b"k", emails, 5, 0, SchemeParams(scheme="paper"))
        assert len(formed) == 1

    def test_loom_scheme_splits_by_k_anonymous_text(self) -> None:
        """Loom: the same row forms two templates; each email matches its own."""
        p = SchemeParams()
        emails = self._emails()
        formed = form_templates(b"k", emails, 5, 0, p)
        assert len(formed) == 2
        ids = {
            match_template(formed, email_hashes(e.subject, e.texts), p)[0].template_id
            for e in emails
        }  # type: ignore[union-attr]
        assert len(ids) == 2

    def test_a_layout_only_group_does_not_swallow_a_template(self) -> None:
        """Rare templates of one layout (text below k) may group on the layout's text, but a
        template whose own text is k-anonymous keeps its own template."""
        rng = random.Random(12)
        p = SchemeParams()
        made = [receipt(rng, NAMES[i % 12]) for i in range(8)]
        made += [one_off_notice(rng, i) for i in range(8)]
        emails = _cluster(made, [f"r{i}" for i in range(16)])
        formed = form_templates(b"k", emails, 5, 0, p)
        for e in emails[:8]:
            found, _ = match_template(formed, email_hashes(e.subject, e.texts), p)
            assert found is not None
            assert "Thanks for your order" in found.fixed_text

    def test_no_template_below_k_and_no_private_text(self) -> None:
        """Below k distinct recipients nothing forms; a name seen once is never fixed text."""
        p = SchemeParams()
        emails = self._emails()[:8]
        assert form_templates(b"k", emails[:4], 5, 0, p) == []
        (t,) = form_templates(b"k", emails, 5, 0, p)
        assert not any(n in " ".join(t.fixed_text + t.signature) for n in NAMES)

    def test_loom_keys_carry_the_sender(self) -> None:
        """Same structure from two senders: disjoint keys; the paper's ignore the sender."""
        s = parse_structure(human(random.Random(1))[1])
        fp = minhash(s.xpaths)
        assert not set(keys_for("a@x", s, fp, SchemeParams())) & set(
            keys_for("b@x", s, fp, SchemeParams())
        )
        paper = SchemeParams(scheme="paper")
        assert keys_for("a@x", s, fp, paper) == keys_for("b@x", s, fp, paper)


class TestModel:
    def test_round_trips_and_recipient_hash(self) -> None:
        """Stored forms decode to what was encoded; the recipient hash is keyed."""
        e = ClusterEmail("u", "s@x", "subj", (("/p[0]", "hi"),), 5)
        assert decode_cluster_email(encode_cluster_email(e)) == e
        t = TemplateValue("id", "s", (1,), 5, 6, "other", ("a",), "", (), 9, "loom", ("a",))
        assert decode_templates(encode_templates([t])) == [t]
        assert recipient_hash("bob", b"k1") != recipient_hash("bob", b"k2")
        assert "bob" not in recipient_hash("bob", b"k1")


class TestTtlLru:
    def test_bounded_and_expiring(self) -> None:
        """Least recently used goes first; entries expire at their TTL."""
        now = [0.0]
        cache = TtlLru[str, int](2, 10.0, clock=lambda: now[0])
        cache.put("a", 1)
        cache.put("b", 2)
        assert cache.get("a") == 1
        cache.put("c", 3)
        assert cache.get("b") is None
        now[0] = 11.0
        assert cache.get("a") is None
