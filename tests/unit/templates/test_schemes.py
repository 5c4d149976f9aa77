"""Both schemes: the paper's rows and formation against Loom's, and Loom's row keys."""

from __future__ import annotations

import random
from dataclasses import replace

from server.templates.extraction import MAX_FORM_EMAILS, form_field_rules
from server.templates.fingerprint import minhash, parse_structure
from server.templates.model import ClusterEmail, TemplateValue
from server.templates.schemes import (
    SchemeParams,
    _ids,
    busy_sample,
    form_templates,
    keys_for,
    match_template,
)
from server.templates.tokens import email_hashes, signature_hashes
from tests.templates_corpus import NAMES, cluster_emails, human, one_off_notice, receipt, reset

P = SchemeParams()


class TestSchemes:
    def _emails(self) -> list[ClusterEmail]:
        rng = random.Random(7)
        made = [receipt(rng, NAMES[i % 12]) for i in range(8)] + [
            reset(rng, NAMES[i % 12]) for i in range(8)
        ]
        return cluster_emails(made, [f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)])

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
        matched = [match_template(formed, email_hashes(e.subject, e.texts), p)[0] for e in emails]
        assert None not in matched
        ids = {m.template_id for m in matched if m is not None}
        assert len(ids) == 2

    def test_a_layout_only_group_does_not_swallow_a_template(self) -> None:
        """Rare templates of one layout (text below k) may group on the layout's text, but a
        template whose own text is k-anonymous keeps its own template."""
        rng = random.Random(12)
        p = SchemeParams()
        made = [receipt(rng, NAMES[i % 12]) for i in range(8)]
        made += [one_off_notice(rng, i) for i in range(8)]
        emails = cluster_emails(made, [f"r{i}" for i in range(16)])
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

    def test_settled_rules_carry_over_only_when_nothing_changed(self) -> None:
        """A re-formation keeps a template's field rules only when this process formed them,
        from more than half of the sample it would read now, and the template continues
        with the same signature."""
        rng = random.Random(5)
        made = [receipt(rng, NAMES[i % 12]) for i in range(MAX_FORM_EMAILS + 12)]
        emails = cluster_emails(made, [f"u{i}" for i in range(len(made))])
        (first,) = form_templates(b"k", emails[:MAX_FORM_EMAILS], 5, 0, P)
        assert first.email_count == MAX_FORM_EMAILS
        assert first.field_rules
        marked = replace(first, field_rules=first.field_rules[:1])  # tell kept from re-formed

        def reformed(previous: TemplateValue, settled: dict[str, int]) -> TemplateValue:
            read: dict[str, int] = {}
            (again,) = form_templates(b"k", emails, 5, 0, P, None, [previous], settled, read)
            assert again.template_id == first.template_id
            kept = again.field_rules == previous.field_rules
            assert read == {first.template_id: settled[first.template_id] if kept else 48}
            return again

        mine = {first.template_id: MAX_FORM_EMAILS}
        assert reformed(marked, mine).field_rules == marked.field_rules
        assert reformed(marked, {}).field_rules == first.field_rules
        half = {first.template_id: MAX_FORM_EMAILS // 2}  # read from half: re-formed
        assert reformed(marked, half).field_rules == first.field_rules
        more = {first.template_id: MAX_FORM_EMAILS // 2 + 1}
        assert reformed(marked, more).field_rules == marked.field_rules
        moved = replace(marked, signature=marked.signature[1:])
        assert reformed(moved, mine).field_rules == first.field_rules

    def test_kept_rules_re_form_once_their_sample_doubles_however_the_row_grew(self) -> None:
        """Rules kept through several growths of their template (each under twice the size)
        still re-form once the template holds twice the emails they were read from. Before,
        a kept template's email count stood for its rules' sample, so rules read from 6
        emails were kept at 10, at 18 and at every later growth by 1.5, for good."""
        rng = random.Random(6)
        made = [receipt(rng, NAMES[i % 12]) for i in range(30)]
        emails = cluster_emails(made, [f"u{i}" for i in range(len(made))])
        read: dict[str, int] = {}
        previous = form_templates(b"k", emails[:6], 5, 0, P, None, (), {}, read)
        assert list(read.values()) == [6]
        sizes = []
        for n in (9, 13, 19, 28):
            settled, read = read, {}
            previous = form_templates(b"k", emails[:n], 5, 0, P, None, previous, settled, read)
            sizes.append(next(iter(read.values())))
        assert sizes == [6, 13, 13, 28]
        # deferred (a backlogged CPU stage): kept whatever their sample, their count theirs
        (tid,) = read
        small = {tid: 6}
        for defer, kept in ((False, False), (True, True)):
            read = {}
            (again,) = form_templates(
                b"k", emails, 5, 0, P, None, previous, small, read, defer_rules=defer
            )
            assert (again.field_rules is previous[0].field_rules) == kept
            assert read == ({tid: 6} if kept else {tid: 30})

    def test_rules_formed_on_a_busy_stage_read_a_short_sample_then_re_form(self) -> None:
        """With emails queued for the CPU stage, a new template's field rules read at most
        `busy_sample(k)` emails and count as read from none, so the next formation on an idle
        stage re-forms them from the full sample whatever the row's size; a formation still
        on a busy stage keeps them. A template no larger than the short sample is read
        whole and is final."""
        rng = random.Random(8)
        made = [receipt(rng, NAMES[i % 12]) for i in range(30)]
        emails = cluster_emails(made, [f"u{i}" for i in range(len(made))])
        (idle,) = form_templates(b"k", emails, 5, 0, P)
        read: dict[str, int] = {}
        (busy,) = form_templates(b"k", emails, 5, 0, P, None, (), {}, read, defer_rules=True)
        assert busy.template_id == idle.template_id
        assert read == {busy.template_id: 0}
        assert busy.field_rules == form_field_rules(emails, 5, busy_sample(5))
        assert busy.field_rules != idle.field_rules
        for defer, rules, count in ((True, busy.field_rules, 0), (False, idle.field_rules, 30)):
            again: dict[str, int] = {}
            (t,) = form_templates(
                b"k", emails, 5, 0, P, None, [busy], read, again, defer_rules=defer
            )
            assert t.field_rules == rules
            assert again == {busy.template_id: count}
        small: dict[str, int] = {}
        (t,) = form_templates(
            b"k", emails[: busy_sample(5)], 5, 0, P, None, (), {}, small, defer_rules=True
        )
        assert small == {t.template_id: busy_sample(5)}

    def test_loom_keys_carry_the_sender(self) -> None:
        """Same structure from two senders: disjoint keys; the paper's ignore the sender."""
        s = parse_structure(human(random.Random(1))[1])
        fp = minhash(s.xpaths)
        assert not set(keys_for("a@x", s, fp, SchemeParams())) & set(
            keys_for("b@x", s, fp, SchemeParams())
        )
        paper = SchemeParams(scheme="paper")
        assert keys_for("a@x", s, fp, paper) == keys_for("b@x", s, fp, paper)


class TestKeys:
    def test_content_blocks_keep_the_row(self) -> None:
        """Line items, an optional block, a nested optional table: one key for all."""
        rng = random.Random(3)
        keys = {
            keys_for("a@x", s, minhash(s.xpaths), P)
            for s in (parse_structure(receipt(rng, NAMES[i % 12])[1]) for i in range(30))
        }
        assert len(keys) == 1
        layout = receipt(rng, NAMES[0])[1]
        deep = layout.replace(
            "<p>Total</p>",
            "<table><tr><td><table><tr><td><div><p>promo</p></div></td></tr></table></td></tr>"
            "</table><p>Total</p>",
        )
        s1, s2 = parse_structure(layout), parse_structure(deep)
        assert keys_for("a@x", s1, (), P) == keys_for("a@x", s2, (), P)

    def test_another_layout_or_sender_is_another_row(self) -> None:
        """A different frame, or the same frame from another sender: other keys."""
        mail = parse_structure(receipt(random.Random(1), NAMES[0])[1])
        webmail = parse_structure(human(random.Random(1))[1])
        assert keys_for("a@x", mail, (), P) != keys_for("a@x", webmail, (), P)
        assert keys_for("a@x", mail, (), P) != keys_for("b@x", mail, (), P)
        assert len(keys_for("a@x", mail, (), P)) == 1


class TestTemplateIds:
    def _layout_only(self, sig: tuple[str, ...], template_id: str) -> TemplateValue:
        return TemplateValue(
            template_id, "s", (1,), 5, 5, "other", (), "", (), 0, "loom", signature=sig
        )

    def test_a_recurring_signature_never_shares_an_id(self) -> None:
        """A row first formed as one template of its shared layout: that id moves on to the
        template continuing it, and when a later formation again leaves a group whose
        signature is the layout's alone, it gets an id of its own. Online formation once
        gave five sibling templates one id this way."""
        layout = ("^ Hello, $", "^ Thanks, $")
        first = _ids(b"k", [layout], [])
        grown = (*layout, "Use to reset", "to reset your")
        second = _ids(b"k", [grown], [self._layout_only(layout, first[0])])
        assert second == first  # the id moved on with the template that grew
        third = _ids(b"k", [grown, layout], [self._layout_only(grown, second[0])])
        assert third[0] == first[0]
        assert len(set(third)) == 2  # the layout's own hash is taken: another id

    def test_a_stored_repeated_id_heals(self) -> None:
        """Two stored templates sharing an id (written before the fix) hand it on once."""
        a, b = ("x y z", "a b c"), ("x y z", "d e f")
        previous = [self._layout_only(a, "k-1"), self._layout_only(b, "k-1")]
        assert len(set(_ids(b"k", [a, b], previous))) == 2


class TestMatching:
    def test_the_template_with_most_evidence_wins(self) -> None:
        """An email holding 90 % of its own template's 20 tokens and all 3 of the row's
        layout-only template matches its own: more of it is in the email."""
        p = SchemeParams()
        own = tuple(f"w{i} v{i} u{i}" for i in range(20))
        layout = own[:3]
        templates = [
            TemplateValue("own", "s", (1,), 5, 5, "other", (), "", (), 0, "loom", signature=own),
            TemplateValue("lay", "s", (1,), 5, 5, "other", (), "", (), 0, "loom", signature=layout),
        ]
        email = signature_hashes(own[:18])
        found, score = match_template(templates, email, p)
        assert found is not None
        assert found.template_id == "own"
        assert score == 0.9

    def test_a_sibling_matched_on_the_layout_alone_loses(self) -> None:
        """A sibling whose signature is mostly the shared layout reaches the threshold on an
        email of the other template (32 of its 40 tokens); the email's own template, smaller,
        holds its own sentences and wins."""
        p = SchemeParams()
        layout = tuple(f"l{i} m{i} n{i}" for i in range(32))
        mine = (*layout[:16], *(f"x{i} y{i} z{i}" for i in range(4)))
        sibling = (*layout, *(f"s{i} t{i} u{i}" for i in range(8)))
        templates = [
            TemplateValue(
                "sib", "s", (1,), 5, 5, "other", (), "", (), 0, "loom", signature=sibling
            ),
            TemplateValue("own", "s", (1,), 5, 5, "other", (), "", (), 0, "loom", signature=mine),
        ]
        found, _ = match_template(templates, signature_hashes((*layout, *mine)), p)
        assert found is not None
        assert found.template_id == "own"
