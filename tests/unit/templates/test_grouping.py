"""Loom's scheme: the split of a row into templates (pure, no engine).

The emails are written here: a vendor whose receipt (1-10 line items, an optional gift
block, a personal subject suffix) and password reset share one layout, and one-off notices
in that layout. What the user checks: one template forms one template whatever its repeats
and optional blocks, templates sharing a layout stay apart, and nothing below k forms.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from server.templates.grouping import GroupingParams, group_emails
from server.templates.model import ClusterEmail
from server.templates.schemes import SchemeParams, form_templates, match_template
from server.templates.tokens import (
    email_hashes,
    tokens_of,
)
from tests.templates_corpus import NAMES, cluster_emails, one_off_notice, receipt, reset

K = 5
P = SchemeParams()


def _receipts(rng: random.Random, n: int, tag: str = "r") -> list[ClusterEmail]:
    return cluster_emails(
        [receipt(rng, NAMES[i % 12]) for i in range(n)], [f"{tag}{i}" for i in range(n)]
    )


def _resets(rng: random.Random, n: int, tag: str = "p") -> list[ClusterEmail]:
    return cluster_emails(
        [reset(rng, NAMES[i % 12]) for i in range(n)], [f"{tag}{i}" for i in range(n)]
    )


def _matched(templates: list, e: ClusterEmail) -> str:  # type: ignore[type-arg]
    found, _ = match_template(templates, email_hashes(e.subject, e.texts), P)
    return found.template_id if found is not None else ""


def _assert_each_notice_whole(notice: Callable[[int, int], tuple[str, list[str]]]) -> None:
    """Twenty emails of each of three notices (`notice(t, n)`: the subject and body of notice
    t's n-th email, each to its own recipient) group as the three notices, each whole."""
    sigs = []
    for t in range(3):
        for n in range(20):
            subject, body = notice(t, n)
            sigs.append(frozenset(tokens_of(subject, [("/p", x) for x in body])))
    groups = group_emails(sigs, [f"u{i}" for i in range(60)], K)
    assert sorted(sorted(g) for g in groups) == [list(range(t * 20, t * 20 + 20)) for t in range(3)]


class TestForming:
    def test_repeats_and_optional_blocks_form_one_template(self) -> None:
        """1-8 line items and a gift block in 40 %: one receipt template, every email in it."""
        emails = _receipts(random.Random(7), 30)
        (t,) = form_templates(b"k", emails, K, 0, P)
        assert {_matched([t], e) for e in emails} == {t.template_id}
        assert t.distinct_recipients == 30

    def test_two_templates_of_one_layout_stay_apart(self) -> None:
        """Receipts and resets share the layout and its footer: two templates, each email
        annotated with its own; fresh emails of each too."""
        rng = random.Random(8)
        emails = _receipts(rng, 12) + _resets(rng, 12)
        formed = form_templates(b"k", emails, K, 0, P)
        assert len(formed) == 2
        receipts = {_matched(formed, e) for e in emails[:12]}
        resets = {_matched(formed, e) for e in emails[12:]}
        assert len(receipts) == len(resets) == 1
        assert receipts != resets
        assert _matched(formed, _receipts(rng, 1, "new")[0]) in receipts
        assert _matched(formed, _resets(rng, 1, "new")[0]) in resets

    def test_a_template_not_yet_k_anonymous_is_left_out(self) -> None:
        """Resets from 3 recipients beside 12 receipts: one template, the receipts'; the
        resets are in no template, and a fresh reset is not annotated as a receipt."""
        rng = random.Random(9)
        emails = _receipts(rng, 12) + _resets(rng, 3)
        left: list[int] = []
        (t,) = form_templates(b"k", emails, K, 0, P, left)
        assert sorted(left) == [12, 13, 14]
        assert not any("Reset" in x for x in t.fixed_text)
        assert _matched([t], _resets(rng, 1, "new")[0]) == ""

    def test_nothing_below_k_and_only_k_anonymous_text(self) -> None:
        """Four recipients: no template, however many emails; the fifth forms it, and its
        signature holds nothing fewer than k recipients saw."""
        rng = random.Random(10)
        made = [receipt(rng, NAMES[i % 12]) for i in range(20)]
        few = cluster_emails(made, [f"u{i % 4}" for i in range(20)])
        assert form_templates(b"k", few, K, 0, P) == []
        (t,) = form_templates(b"k", [*few, *_receipts(rng, 1, "fifth")], K, 0, P)
        assert not any(name.split()[0] in " ".join(t.signature) for name in NAMES)

    def test_rare_notices_never_take_the_layout(self) -> None:
        """One-off notices in the layout (own text below k) never form a template of the
        layout's text that would annotate the receipts."""
        rng = random.Random(12)
        emails = _receipts(rng, 8) + cluster_emails(
            [one_off_notice(rng, i) for i in range(8)], [f"n{i}" for i in range(8)]
        )
        formed = form_templates(b"k", emails, K, 0, P)
        for e in emails[:8]:
            found, _ = match_template(formed, email_hashes(e.subject, e.texts), P)
            assert found is not None
            assert "Thanks for your order" in found.fixed_text

    def test_a_reformed_template_keeps_its_id(self) -> None:
        """Formed from 6 receipts, re-formed from 30: the id callers hold stays."""
        rng = random.Random(11)
        emails = _receipts(rng, 30)
        (first,) = form_templates(b"k", emails[:6], K, 0, P)
        (again,) = form_templates(b"k", emails, K, 1, P, previous=[first])
        assert again.template_id == first.template_id


class TestSplitRules:
    def _sigs(self, texts: list[tuple[str, list[str]]]) -> list[frozenset[str]]:
        return [frozenset(tokens_of(subject, [("/p", t) for t in body])) for subject, body in texts]

    def test_a_one_word_alternative_does_not_split(self) -> None:
        """``1 day`` / ``2 days`` inside a long shared text: one group."""
        shared = [f"sentence number {i} of the notice that stays the same" for i in range(6)]
        texts = [
            ("Notice", [*shared, "expires in a day" if i % 2 else "expires in days"])
            for i in range(20)
        ]
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(20)], K)
        assert len(groups) == 1

    def test_two_own_sentences_split_even_with_one_subject(self) -> None:
        """Each side owns a sentence the other lacks: two groups, whatever the subject."""
        shared = ["the footer that every email of this vendor carries at the end"]
        a = [("Update", [*shared, "your invoice for this month is ready to download"])] * 10
        b = [("Update", [*shared, "your subscription renews next week at the same price"])] * 10
        groups = group_emails(self._sigs(a + b), [f"u{i}" for i in range(20)], K)
        assert sorted(len(g) for g in groups) == [10, 10]

    def test_two_own_sentences_split_under_a_subject_the_row_does_not_share(self) -> None:
        """As above, ``Update`` on both beside a third template whose subject differs: one
        subject that not all of the row has asks each side for a sentence of its own
        (`own_share_cap` tokens), and these have one: still three groups."""
        shared = ["the footer that every email of this vendor carries at the end"]
        a = [("Update", [*shared, "your invoice for this month is ready to download"])] * 10
        b = [("Update", [*shared, "your subscription renews next week at the same price"])] * 10
        c = [("Welcome aboard", [*shared, "thank you for joining us you can sign in now"])] * 10
        groups = group_emails(self._sigs(a + b + c), [f"u{i}" for i in range(30)], K)
        assert sorted(sorted(g) for g in groups) == [
            list(range(0, 10)),
            list(range(10, 20)),
            list(range(20, 30)),
        ]

    def test_subjects_that_only_extend_with_values_do_not_split(self) -> None:
        """``Your order`` / ``Your order for`` + a name: one template's variants."""
        body = ["thank you for shopping with us this week at the store"]
        texts = [("Your order", body)] * 8 + [(f"Your order for {n}", body) for n in NAMES[:10]]
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(18)], K)
        assert len(groups) == 1

    def test_subjects_that_go_on_alike_split(self) -> None:
        """``Invoice`` / ``Invoice paid``, each alone or ``for`` a name: two templates, even
        when one's body is the other's plus a block."""
        body = ["the summary of your account with all the details below"]
        extra = ["and the receipt for the payment we received today"]
        a = [("Invoice", body)] * 6 + [(f"Invoice for {n}", body) for n in NAMES[:6]]
        b = [("Invoice paid", body + extra)] * 6 + [
            (f"Invoice paid for {n}", body + extra) for n in NAMES[6:12]
        ]
        groups = group_emails(self._sigs(a + b), [f"u{i}" for i in range(24)], K)
        assert sorted(len(g) for g in groups) == [12, 12]

    def test_a_subject_variant_among_several_templates_does_not_split(self) -> None:
        """``Welcome`` / ``Welcome for`` + a name beside a template whose subject is all
        values: the rest of a group of several shares no subject prefix, and the welcomes in
        it that begin as ``Welcome for`` does stand for it. Two groups, the welcomes whole
        (Flask-Security's welcome came back as three templates this way)."""
        body = ["thank you for joining us you can sign in at any time"]
        welcome = [("Welcome", body)] * 8 + [(f"Welcome for {n}", body) for n in NAMES[:10]]
        other = [(f"{n} {1000 + i}", body) for i, n in enumerate(NAMES[:10])]
        texts = welcome + other
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(len(texts))], K)
        assert sorted(sorted(g) for g in groups) == [list(range(18)), list(range(18, 28))]

    def test_subjects_that_go_on_alike_split_among_several_templates(self) -> None:
        """``Invoice`` / ``Invoice paid`` (as above) beside a third template whose subject is
        all values: still three templates."""
        body = ["the summary of your account with all the details below"]
        extra = ["and the receipt for the payment we received today"]
        a = [("Invoice", body)] * 6 + [(f"Invoice for {n}", body) for n in NAMES[:6]]
        b = [("Invoice paid", body + extra)] * 6 + [
            (f"Invoice paid for {n}", body + extra) for n in NAMES[6:12]
        ]
        c = [(f"{n} {1000 + i}", body) for i, n in enumerate(NAMES[:10])]
        texts = a + b + c
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(len(texts))], K)
        assert sorted(sorted(g) for g in groups) == [
            list(range(12)),
            list(range(12, 24)),
            list(range(24, 34)),
        ]

    def test_subjects_that_differ_only_at_their_end_split(self) -> None:
        """A ticket system's ``<title> (Closed)`` / ``(Resolved)`` / ``(Updated)``: each
        subject begins with a value, the long body is one text but for two words of each
        event's own (too few for rule 1). Three templates, told apart by their end."""
        shared = [
            f"sentence number {i} of the ticket notice that stays the same" for i in range(12)
        ]
        texts = [
            (
                f"{NAMES[i % 12].split()[0]} cannot print {100 + i} ({event.title()})",
                [*shared, f"It is now {event}."],
            )
            for event in ("closed", "resolved", "updated")
            for i in range(10)
        ]
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(30)], K)
        assert sorted(sorted(g) for g in groups) == [
            list(range(10)),
            list(range(10, 20)),
            list(range(20, 30)),
        ]

    def test_a_value_ending_every_subject_splits_nothing(self) -> None:
        """``Notification for`` + a name whose surname comes from a short list: each surname
        ends >= k subjects, but its emails own no body text. One group."""
        body = [f"sentence number {i} of the notice that stays the same" for i in range(6)]
        surnames = ("Lopez", "Garcia", "Smith")
        texts = [
            (f"Notification for {NAMES[i % 12].split()[0]} {surnames[i % 3]}", body)
            for i in range(30)
        ]
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(30)], K)
        assert len(groups) == 1

    def test_a_brand_on_every_subject_hides_no_template(self) -> None:
        """A notification system's three templates share one body and differ by their
        subject's fixed start, after the sender's name (``[Acme] …``) or before it at the end
        (``… | Acme``, events told apart by their own body words as a ticket's are): three
        templates either way, as without the name."""
        body = [f"sentence number {i} of the notification body all events share" for i in range(6)]
        starts = ("Component", "Parse error in", "New comment in")
        branded = [(f"[Acme] {starts[i // 10]} {NAMES[i % 10]}", body) for i in range(30)]
        events = ("closed", "resolved", "updated")
        tickets = [
            (
                f"{NAMES[i % 10].split()[0]} cannot print {100 + i} ({events[i // 10].title()}) | Acme",
                [*body, f"It is now {events[i // 10]}."],
            )
            for i in range(30)
        ]
        for texts in (branded, tickets):
            groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(30)], K)
            assert sorted(sorted(g) for g in groups) == [
                list(range(10)),
                list(range(10, 20)),
                list(range(20, 30)),
            ], texts[0][0]

    def test_a_value_after_a_brand_splits_nothing(self) -> None:
        """``[Acme] Your order`` / ``[Acme] Your order for`` + a name, the names each in
        fewer than k emails: one template's variants, one group."""
        body = ["thank you for shopping with us this week at the store"]
        texts = [("[Acme] Your order", body)] * 8 + [
            (f"[Acme] Your order for {n}", body) for n in NAMES[:10]
        ]
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(18)], K)
        assert len(groups) == 1

    def test_a_first_name_in_k_emails_of_one_template_splits_nothing(self) -> None:
        """``Lena, confirm your new email address``: one template, the recipient's first
        name before its subject. Six emails go to a Lena (k recipients: the name's prefix
        is k-anonymous) and the others to names each fewer than k hold; the two sides share
        the rest of the subject, so the name is a value before it: one group."""
        body = ["open the link below to confirm the address you gave us"]
        names = ["Lena"] * 6 + [NAMES[i % 12].split()[0] + str(i) for i in range(19)]
        texts = [(f"{n}, confirm your new email address", body) for n in names]
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(25)], K)
        assert len(groups) == 1

    def test_subjects_sharing_a_middle_still_split(self) -> None:
        """``Confirm`` / ``Activate`` / ``Close your Acme account now``: three templates of
        one body whose subjects share all but their first word, each start held by k
        emails: three groups (unlike a name, the starts are k-anonymous words of their
        own)."""
        body = ["the account team of the store writes to you about your account"]
        starts = ("Confirm", "Activate", "Close")
        texts = [(f"{starts[i // 10]} your Acme account now", body) for i in range(30)]
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(30)], K)
        assert sorted(sorted(g) for g in groups) == [
            list(range(10)),
            list(range(10, 20)),
            list(range(20, 30)),
        ]

    def test_a_sentence_each_splits_however_long_the_shared_text(self) -> None:
        """A trial *expiring* and a trial *expired* notice: 30 shared sentences and one
        sentence of each's own (a tenth of the shared text would ask for ~20 tokens, the cap
        asks for 8). Without the cap they are one group."""
        shared = [f"sentence number {i} of the long body both notices carry" for i in range(30)]
        a = [("Trial", [*shared, "your trial has recently expired so what would you like"])] * 10
        b = [("Trial", [*shared, "your trial ends in three days can we help you decide"])] * 10
        sigs = self._sigs(a + b)
        users = [f"u{i}" for i in range(20)]
        assert sorted(len(g) for g in group_emails(sigs, users, K)) == [10, 10]
        uncapped = GroupingParams(own_share_cap=0)
        assert len(group_emails(sigs, users, K, uncapped)) == 1

    def test_thresholds_are_settings(self) -> None:
        """The one-word alternative splits once the own-text bar is dropped to nothing."""
        shared = [f"sentence number {i} of the notice that stays the same" for i in range(6)]
        texts = [
            (
                "Notice",
                [*shared, "it expires in one day" if i % 2 else "it will expire in two days"],
            )
            for i in range(20)
        ]
        loose = GroupingParams(min_own=1, min_own_share=0.0)
        groups = group_emails(self._sigs(texts), [f"u{i}" for i in range(20)], K, loose)
        assert len(groups) == 2


class TestTextOnOneSide:
    """Rule 3: a template whose text is all values beside a sibling with text of its own."""

    FOOTER = "sent by the vendor to you because you have an account with it"

    def _sigs(self, bodies: list[list[str]]) -> list[frozenset[str]]:
        return [frozenset(tokens_of("News", [("/p", t) for t in body])) for body in bodies]

    def test_a_sibling_of_values_only_splits_from_one_with_text(self) -> None:
        """A release note (three sentences of its own) and a workflow notice (one generated
        sentence, nothing k recipients share) behind one footer: two groups. Ghost's
        password reset and its notification were one template this way."""
        release = [
            "a new release of the project is out and ready for you",
            "the source code is attached as a zip and as a tarball",
            "read the notes below to see what changed since the last one",
        ]
        a = [[*release, self.FOOTER] for _ in range(10)]
        b = [[f"{n} ran job {i} on branch {n} in {i} s", self.FOOTER] for i, n in enumerate(NAMES)]
        sigs = self._sigs(a + b[:10])
        groups = group_emails(sigs, [f"u{i}" for i in range(20)], K)
        assert sorted(groups) == [list(range(10)), list(range(10, 20))]
        off = GroupingParams(own_over_shared=0.0)
        assert len(group_emails(sigs, [f"u{i}" for i in range(20)], K, off)) == 1

    def test_an_optional_block_in_a_minority_of_the_text_does_not_split(self) -> None:
        """The same own text as an optional block of a template whose other text outweighs
        it (each email without the block still shares that text): one group."""
        shared = [f"sentence number {i} of the notice that stays the same" for i in range(6)]
        block = ["the source code is attached as a zip and as a tarball"]
        bodies = [[*shared, *(block if i % 2 else []), self.FOOTER] for i in range(20)]
        groups = group_emails(self._sigs(bodies), [f"u{i}" for i in range(20)], K)
        assert len(groups) == 1

    def test_a_rest_below_k_recipients_waits_with_the_template(self) -> None:
        """Fewer than k recipients without the text: nothing is judged on them."""
        release = [
            "a new release of the project is out and ready for you",
            "the source code is attached as a zip and as a tarball",
            "read the notes below to see what changed since the last one",
        ]
        a = [[*release, self.FOOTER] for _ in range(10)]
        b = [
            [f"{n} ran job {i} on branch {n} in {i} s", self.FOOTER]
            for i, n in enumerate(NAMES[:4])
        ]
        groups = group_emails(self._sigs(a + b), [f"u{i}" for i in range(14)], K)
        assert len(groups) == 1


class TestWiderText:
    def test_a_footer_most_siblings_share_keeps_none_together(self) -> None:
        """Four siblings end with a footer line the fifth lacks, and the fifth holds no text
        of its own that k recipients share. The footer splits nothing off by itself (two
        tokens, less than a tenth of the layout), so it must not hold the four siblings it
        covers together: each of them still splits from the rest. Gitea's notifications were
        one template this way."""
        layout = [f"layout {i} words" for i in range(40)]
        footer = ["^ --- .", "--- . $"]
        sigs: list[frozenset[str]] = []
        users: list[str] = []
        labels: list[int] = []
        for t in range(5):
            for n in range(10):
                own = [f"own{t} sentence {i}" for i in range(5)]
                if t == 4:  # the fifth's text is personal: no token k recipients share
                    own = []
                sigs.append(frozenset(layout + own + (footer if t < 4 else [])))
                users.append(f"u{t}-{n}")
                labels.append(t)
        groups = group_emails(sigs, users, K)
        # No group holds two of the four siblings (the fifth, with no text of its own to
        # tell it by, may stay with one of them).
        assert all(len({labels[i] for i in g} - {4}) == 1 for g in groups)
        assert len(groups) >= 4


class TestAcrossTemplates:
    """Rule 4: a block several templates share in some of their emails cuts across them."""

    def test_a_footer_across_templates_splits_none(self) -> None:
        """Five notifications of one layout, each with two sentences of its own; the first
        three share a paragraph too (a family: each of them waits for it). The first four
        carry an optional two-sentence footer in half of their emails. The footer side
        splits from the rest (the fifth never has it) as strongly as a template does, and
        it cuts across four templates and the family: taken first, each of them would come
        back twice, with and without it. Weblate's notifications and their "turn off this
        notification" footer were split this way."""
        layout = [f"layout line {i} of the vendor" for i in range(8)]
        family = ["a paragraph three of the notices share"]
        footer = [
            "turn off this notification in your settings",
            "manage every notification of your account there",
        ]
        words = ["receipt", "reset", "invite", "digest", "alert"]
        bodies: list[list[str]] = []
        labels: list[int] = []
        for t, word in enumerate(words):
            own = [
                f"your {word} is ready and waiting for you now",
                f"open the {word} page to read every {word} detail",
            ]
            for n in range(10):
                with_footer = t < 4 and n % 2 == 0
                bodies.append(
                    [*layout, *own, *(family if t < 3 else []), *(footer if with_footer else [])]
                )
                labels.append(t)
        sigs = [frozenset(tokens_of("News", [("/p", x) for x in b])) for b in bodies]
        users = [f"u{i}" for i in range(len(bodies))]
        groups = group_emails(sigs, users, K)  # the default: rule 4 on, ratio 2
        assert sorted(sorted({labels[i] for i in g}) for g in groups) == [[t] for t in range(5)]
        assert all(len(g) == 10 for g in groups)
        off = group_emails(sigs, users, K, GroupingParams(cut_ratio=0.0))
        assert len(off) > 5  # the rule is what keeps them whole

    def test_a_first_name_on_every_subject_splits_no_template(self) -> None:
        """Four templates of one layout and one subject greet the recipient by first name
        at its start (``Ava, news from the Acme store``), names from a list of ten: each
        name starts the subjects of k emails or more of the row, two or so of each
        template. A name side owns its subject start, and the rest of the row shares no
        subject start; but it cuts across every template's text, fewer than k emails in
        each, so it waits for the templates, and each forms whole."""
        layout = [f"layout line {i} of the vendor" for i in range(4)]
        words = ["receipt", "reset", "invite", "digest"]
        bodies: list[list[str]] = []
        subjects: list[str] = []
        for t, word in enumerate(words):
            own = [f"the {word} notice number {t}"]  # less own text than a name's subject
            for n in range(20):
                bodies.append([*layout, *own])
                subjects.append(f"{NAMES[(n + t) % 10].split()[0]}, news from the Acme store")
        sigs = [
            frozenset(tokens_of(s, [("/p", x) for x in b]))
            for s, b in zip(subjects, bodies, strict=True)
        ]
        groups = group_emails(sigs, [f"u{i}" for i in range(80)], K)
        assert sorted(sorted(g) for g in groups) == [
            list(range(t * 20, t * 20 + 20)) for t in range(4)
        ]

    def test_alternative_panels_under_one_subject_split_no_template(self) -> None:
        """A translation site's notices (Weblate's) show one of two info panels, a heading
        and a line each (``Project information`` / ``Translation info``), under a subject
        the template keeps (``New contributor in`` + a project). The panels own a few words
        each, more than a tenth of the short text both share: without the subject, rule 1
        would read two templates. Both keep one subject that the rest of the row lacks, so
        they need a sentence each (`own_share_cap`) and each template forms whole."""
        layout = [f"layout line {i} of the translation site" for i in range(4)]
        panels = [["Project information", "Components 4"], ["Translation info", "Glossary terms"]]
        kinds = [
            ("New contributor in", "has just made a first contribution"),
            ("Parse error in", "could not parse the file you uploaded"),
            ("New comment in", "left a comment on a string"),
        ]
        projects = ["harbor", "willow", "quartz", "cedar", "falcon", "meadow", "orbit", "summit"]

        def notice(t: int, n: int) -> tuple[str, list[str]]:
            subject, sentence = kinds[t]
            name = NAMES[(n // 2 + 5 * t) % 12]
            body = [*layout, f"The user {name} {sentence}.", *panels[n % 2]]
            return f"{subject} {projects[(n * 3 + t) % 8]}", body

        _assert_each_notice_whole(notice)

    def test_a_value_in_k_emails_of_several_templates_holds_none_back(self) -> None:
        """Three notices alike but for their subjects (``New comment in`` + a project), a
        sentence with the user's name from a short list, and an optional line in a third of
        each. A name is in k emails of the row, two of each template: its side crosses
        each template's by fewer than k emails. The template, the bigger side, is not held
        back for it (before, every template was divided by name)."""
        layout = [f"layout line {i} of the translation site" for i in range(4)]
        subjects = ["New comment in", "New suggestion in", "Changed translation in"]
        projects = ["harbor", "willow", "quartz", "cedar", "falcon", "meadow", "orbit", "river"]

        def notice(t: int, n: int) -> tuple[str, list[str]]:
            body = [*layout, f"{NAMES[(n + 3 * t) % 12]} made a change to a string you watch."]
            if (n + t) % 3 == 0:
                body.append("You are receiving this as a project reviewer.")
            return f"{subjects[t]} {projects[(n * 7 + t) % 8]}", body

        _assert_each_notice_whole(notice)

    def test_templates_that_cross_each_other_are_not_held_back(self) -> None:
        """Two families of templates sharing paragraphs in overlapping sets (A and B share
        one, B and C another) cross without cutting across anyone's own text: every
        template still forms whole."""
        own = {t: [f"template {t} sentence {s} all its own" for s in range(4)] for t in "ABC"}
        ab = ["a paragraph the first two templates share word for word"]
        bc = ["another paragraph the last two templates share word for word"]
        shared = {"A": ab, "B": ab + bc, "C": bc}
        bodies = [[*own[t], *shared[t]] for t in "ABC" for _ in range(10)]
        sigs = [frozenset(tokens_of("News", [("/p", x) for x in b])) for b in bodies]
        groups = group_emails(sigs, [f"u{i}" for i in range(30)], K, GroupingParams(cut_ratio=2.0))
        assert sorted(groups) == [list(range(0, 10)), list(range(10, 20)), list(range(20, 30))]
