"""Field extraction: variable spans with labels, rows of repeated blocks, fields after them."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from server.templates.columns import align
from server.templates.extraction import form_field_rules
from server.templates.fingerprint import parse_structure
from server.templates.model import (
    ClusterEmail,
    Extracted,
    FieldRuleValue,
    decode_templates,
    encode_templates,
)
from server.templates.service import fields_of
from server.templates.spans import _TOKEN, build_pattern, match, tokenize
from server.templates.stretches import items_of

K = 5
FIRST = ["Ines", "Bob", "Chen", "Dana", "Emil", "Fatima", "Grace", "Hiro", "Jonas", "Lena"]
LAST = ["Müller", "Garcia", "Okafor", "Nguyen", "Rossi", "Tanaka", "Silva", "Novak", "Berg"]
STREETS = ["12 Oak Lane", "7 Elm Road", "301 Pine Street", "9 Birch Way", "44 Lake View"]
CITIES = ["Springfield 10115", "Riverton 22041", "Lakeside 90210", "Hillview 30301"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August"]
ITEMS = ["Desk Lamp", "Office Chair", "Oak Desk", "Wool Rug", "Glass Vase", "Bookshelf"]


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def invoice(
    rng: random.Random, n_items: int | None = None, *, gift: bool | None = None
) -> dict[str, Any]:
    """One invoice of a vendor: its HTML and the values put into it (the ground truth)."""
    n = rng.randint(1, 10) if n_items is None else n_items
    gift = rng.random() < 0.4 if gift is None else gift
    name, street, city = _name(rng), rng.choice(STREETS), rng.choice(CITIES)
    number = str(rng.randint(100000, 999999))
    day, month = rng.randint(1, 28), rng.randrange(8)
    order = f"U{rng.randint(1000000, 9999999)}"
    items = [
        (
            rng.choice(ITEMS),
            str(rng.randint(1, 9)),
            f"${rng.randint(2, 400)}.{rng.randint(0, 99):02d}",
        )
        for _ in range(n)
    ]
    total = f"${rng.randint(10, 3000)}.{rng.randint(0, 99):02d}"
    rows = "".join(
        f'<tr class="item"><td>{i}</td><td>{q}</td><td>{p}</td></tr>' for i, q, p in items
    )
    optional = "<p>Gift wrapping included.</p><p>A gift note is enclosed.</p>" if gift else ""
    html = f"""<html><body><table><tr><td>
<h1>Nordic Home</h1><p>Hi {name}</p><p>Invoice: {number}</p>
<p>{MONTHS[month]} {day}, 2026 #{order}</p>
<div class="addr">Ship to<br>{name}<br>{street}<br>{city}<br>Germany</div>
{optional}
<table class="items"><tr><th>Item</th><th>Qty</th><th>Price</th></tr>{rows}</table>
<p>Amount Due: {total}</p>
<p>Questions? Reply to this email.</p>
</td></tr></table></body></html>"""
    truth = {
        "name": name,
        "number": number,
        "date": f"2026-{month + 1:02d}-{day:02d}",
        "order": order,
        "street": street,
        "city": city,
        "items": items,
        "total": total,
    }
    return {"html": html, "truth": truth, "subject": f"Your Nordic Home invoice {number}"}


def _cluster(
    n: int, seed: int = 1, users: int | None = None
) -> tuple[list[ClusterEmail], list[dict[str, Any]]]:
    rng = random.Random(seed)
    made = [invoice(rng) for _ in range(n)]
    emails = [
        ClusterEmail(
            f"user-{i % (users or n)}",
            "billing@nordic.example",
            m["subject"],
            parse_structure(m["html"]).texts,
            0,
        )
        for i, m in enumerate(made)
    ]
    return emails, made


def _email(i: int, sender: str, subject: str, html: str, users: int = 10) -> ClusterEmail:
    """The i-th training email of a cluster, its recipient one of `users` in turn."""
    return ClusterEmail(f"user-{i % users}", sender, subject, parse_structure(html).texts, 0)


def _by_label(fields: tuple[Extracted, ...]) -> dict[str, list[Extracted]]:
    out: dict[str, list[Extracted]] = {}
    for f in fields:
        out.setdefault(f.label, []).append(f)
    return out


def _lcs_length(a: list[str], b: list[str]) -> int:
    """The textbook DP, as the reference the pattern's fixed tokens are held to."""
    dp = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            dp[i + 1][j + 1] = dp[i][j] + 1 if x == y else max(dp[i][j + 1], dp[i + 1][j])
    return dp[-1][-1]


_WORDS = st.lists(st.sampled_from(["Hi", "Ava", "Bob", "order", "#", "12", ","]), max_size=8)


class TestSpans:
    @settings(max_examples=500, deadline=None)
    @given(
        st.text(
            alphabet="ab Zé.,:;!?#@-()[]|/$€£ USDhttps://www.x 0\u06612-\u2013'\u2018\u2019",
            max_size=40,
        )
    )
    def test_a_text_without_digits_tokenizes_as_the_full_pattern_would(self, text: str) -> None:
        """Tokenizing skips the typed alternatives where no digit (any script's) can start
        one; the tokens are the full pattern's all the same."""
        full = [(m.group(), m.lastgroup) for m in _TOKEN.finditer(text)]
        seps = {"dsep": "date", "psep": "phone"}
        full = [(t, seps.get(kind or "word", kind or "word")) for t, kind in full]
        assert [(t.text, t.kind) for t in tokenize.__wrapped__(text)] == full

    @settings(max_examples=300, deadline=None)
    @given(st.lists(_WORDS.map(" ".join), min_size=1, max_size=5))
    def test_fixed_tokens_are_in_every_value_and_the_longest_for_two(
        self, values: list[str]
    ) -> None:
        """Whatever the values (repeats, one inside another, none in common): every value
        matches the pattern, and for two values its fixed tokens are as many as their
        longest common subsequence."""
        samples = [tokenize(v) for v in values]
        p = build_pattern(samples)
        assert all(match(p, v) is not None for v in values)
        if len(values) == 2:
            fixed = [t for t in p if t is not None]
            texts = [[t.text for t in s] for s in samples]
            assert len(fixed) == _lcs_length(texts[0], texts[1])

    def test_patterns_keep_typed_values_whole(self) -> None:
        """Fixed tokens are common to every value; a date is one token, never cut at 2026."""
        p = build_pattern([tokenize(v) for v in ("Hi Ines Müller,", "Hi Bob,", "Hi Ann Lee,")])
        assert p == ("Hi", None, ",")
        assert match(p, "Hi Zoe Quinn,") == ("Zoe Quinn",)
        dates = ["February 25, 2026 #U6689717", "March 3, 2026 #U1", "May 1, 2025 #X9"]
        p = build_pattern([tokenize(v) for v in dates])
        assert p == (None, "#", None)
        assert match(p, "June 2, 2026 #AB12") == ("June 2, 2026", "AB12")
        assert match(("Invoice", ":", None), "Receipt 12") is None

    def test_a_closing_stop_is_fixed_text_not_the_value(self) -> None:
        """A sentence's closing punctuation is its own token, so the fixed full stop after a
        value stays out of it; a full stop inside a word or an address is kept."""
        values = ("This link expires in 2 days.", "This link expires in one hour.")
        p = build_pattern([tokenize(v) for v in values])
        assert p == ("This", "link", "expires", "in", None, ".")
        assert match(p, "This link expires in orbit stone.") == ("orbit stone",)
        assert [t.text for t in tokenize("Welcome ines.578@mail.example!")] == [
            "Welcome",
            "ines.578@mail.example",
            "!",
        ]
        assert [t.text for t in tokenize("@Ava Kim • 12-year member")] == [
            "@",
            "Ava",
            "Kim",
            "•",
            "12",
            "-year",
            "member",
        ]
        assert [t.text for t in tokenize("Visit https://a.example/x.")] == [
            "Visit",
            "https://a.example/x",
            ".",
        ]

    def test_a_telephone_number_is_one_value_and_old_patterns_still_match(self) -> None:
        """``(331)-258-1535`` is one token, so its brackets are not fixed text cutting it
        into two fields; a pattern formed when they were (``(`` … ``)`` …) still reads the
        number as it did. Card numbers, dates and short digit groups are no telephone."""
        values = (
            "Call us at (331)-258-1535",
            "Call us at 992.248.0604",
            "Call us at +44 20 7946 0958",
        )
        p = build_pattern([tokenize(v) for v in values])
        assert p == ("Call", "us", "at", None)
        assert match(p, "Call us at (408) 341-0600") == ("(408) 341-0600",)
        assert [t.kind for t in tokenize("(408) 341-0600 887-623-2860")] == ["phone", "phone"]
        assert match(("(", None, ")", None), "(331)-258-1535") == ("331", "-258-1535")
        for text in ("4242-4242-4242-4242", "123-45-6789", "12-03-2026", "1,234", "555-1234"):
            assert "phone" not in [t.kind for t in tokenize(text)], text

    def test_a_links_fixed_fragment_is_fixed_text_not_the_value(self) -> None:
        """A link's ``#fragment`` is tokens of its own, so a fragment the template appends to
        every link (``…#tab-notifications``) is fixed text and the value is the link; a link
        without one stays one token, its query string included."""
        values = [
            f"https://mail.example/{w}/{n}#tab-notifications" for w, n in (("a", 1), ("b", 22))
        ]
        p = build_pattern([tokenize(v) for v in values])
        assert p == (None, "#", "tab-notifications")
        assert match(p, "https://cms.example/pages/7/edit/#tab-notifications") == (
            "https://cms.example/pages/7/edit/",
        )
        assert [t.text for t in tokenize("Go to https://a.example/r?t=x1&u=2 now")] == [
            "Go",
            "to",
            "https://a.example/r?t=x1&u=2",
            "now",
        ]

    def test_quotes_around_a_value_are_fixed_text(self) -> None:
        """A single quote opening or closing a word is a mark of its own, so a quoted value
        comes without its quotes; an apostrophe inside a word stays in it."""
        values = (
            "Ticket ('Printer on fire') has been closed.",
            "Ticket ('Wi-Fi down') has been closed.",
            "Ticket ('Don't reboot') has been closed.",
        )
        p = build_pattern([tokenize(v) for v in values])
        assert p == ("Ticket", "(", "'", None, "'", ")", "has", "been", "closed", ".")
        assert match(p, "Ticket ('O'Brien's laptop') has been closed.") == ("O'Brien's laptop",)
        assert [t.text for t in tokenize("don't \u2018Home\u2019 users' it\u2019s")] == [
            "don't",
            "\u2018",
            "Home",
            "\u2019",
            "users",
            "'",
            "it\u2019s",
        ]

    def test_address_block_pieces_are_items(self) -> None:
        """An element's <br>-separated pieces are separate items (one text node, one path)."""
        texts = parse_structure("<div>Ship to<br>Ines Müller<br>12 Oak Lane</div>").texts
        assert [it.text for it in items_of(texts)] == ["Ship to", "Ines Müller", "12 Oak Lane"]
        assert len(texts) == 1


class TestExtraction:
    def test_spans_labels_types_rows_and_fields_after_the_block(self) -> None:
        """Each value is its span, labelled by the fixed text introducing it; line items are
        rows; the amount due after 1..10 rows and after an optional block is found."""
        emails, _ = _cluster(40)
        rules = form_field_rules(emails, K)
        rng = random.Random(99)
        for n_items, gift in ((1, False), (10, True), (4, True), (7, False)):
            probe = invoice(rng, n_items, gift=gift)
            texts = parse_structure(probe["html"]).texts
            fields, blocks = fields_of(rules, texts, "")
            truth = probe["truth"]
            got = _by_label(fields)
            assert [f.value for f in got["Hi"]] == [truth["name"]]
            assert got["Hi"][0].type == "name"
            assert [(f.value, f.type) for f in got["Invoice"]] == [(truth["number"], "number")]
            assert "" not in got  # every field has a label
            dated = [f for f in fields if f.type == "date"]
            assert [(f.value.split(" ")[0], f.normalized) for f in dated] == [
                (MONTHS[int(truth["date"][5:7]) - 1], truth["date"])
            ]
            # No fixed words before the date in its node: the nearest fixed text node.
            assert dated[0].label == "Nordic Home"
            ids = [f for f in fields if f.value == truth["order"]]
            assert len(ids) == 1
            assert (ids[0].type, ids[0].label) == ("id", "Nordic Home #")
            ship = got["Ship to"]
            assert [f.value for f in ship] == [truth["name"], truth["street"], truth["city"]]
            due = got["Amount Due"]
            assert [(f.value, f.type, f.normalized) for f in due] == [
                (truth["total"], "money", str(float(truth["total"][1:])))
            ]
            assert len(blocks) == 1
            assert blocks[0].label == "Item"
            rows = [[(f.label, f.value) for f in row] for row in blocks[0].rows]
            assert rows == [[("Item", i), ("Qty", q), ("Price", p)] for i, q, p in truth["items"]]
            prices = [row[2] for row in blocks[0].rows]
            assert all(p.type == "money" for p in prices)
            assert not any("Gift" in f.value for f in fields)

    def test_rules_hold_only_text_of_k_recipients(self) -> None:
        """Every fixed string a rule records (anchor, label, pattern token) is held by >= k
        distinct recipients' emails; no value of fewer recipients is in any rule."""
        emails, made = _cluster(24, seed=3, users=6)
        rules = form_field_rules(emails, K)
        assert rules
        holders: dict[str, set[str]] = {}
        for e in emails:
            text = " ".join(t.replace("\x1f", " ") for _, t in e.texts)
            for r in rules:
                for s in (r.anchor, r.label, r.until, *(t for t in r.pattern if t)):
                    if s and all(w in text for w in s.split()):
                        holders.setdefault(s, set()).add(e.user)
        for r in rules:
            for s in (r.anchor, r.label, r.until, *(t for t in r.pattern if t)):
                assert not s or len(holders.get(s, ())) >= K, s
        values = {m["truth"]["name"] for m in made} | {m["truth"]["order"] for m in made}
        blob = repr(rules)
        assert not any(v in blob for v in values)

    def test_fewer_than_k_recipients_form_no_rules(self) -> None:
        """A cluster of 20 emails from 4 recipients forms no field rule (k = 5)."""
        emails, _ = _cluster(20, seed=4, users=4)
        assert form_field_rules(emails, K) == ()

    def test_rules_round_trip_and_version_one_still_annotates(self) -> None:
        """Version-2 rules survive the stored form; a version-1 template (rules [xpath,
        type]) still decodes and annotates the whole text node as before."""
        import json

        import zstandard

        from server.templates.model import TemplateValue

        emails, _ = _cluster(30, seed=5)
        rules = form_field_rules(emails, K)
        t = TemplateValue("t", "s", (1,), 5, 30, "bill", ("a",), "", rules, 9, "loom", ("a",))
        assert decode_templates(encode_templates([t])) == [t]
        xpath = "/html[0]/body[0]/table[0]/tbody[0]/tr[0]/td[0]/div[0]"
        v1 = [1, [["t", "s", [1], 5, 30, "bill", ["a"], "", [[xpath, "text"]], 9, "loom", []]]]
        data = zstandard.ZstdCompressor().compress(json.dumps(v1).encode())
        (old,) = decode_templates(data)
        assert old.field_rules == (FieldRuleValue(xpath, "text"),)
        assert old.field_rules[0].legacy
        probe = invoice(random.Random(6), 2)
        fields, blocks = fields_of(old.field_rules, parse_structure(probe["html"]).texts, "")
        assert blocks == ()
        (f,) = fields
        assert f.xpath == xpath
        assert f.value.startswith("Ship to ")
        assert probe["truth"]["street"] in f.value
        assert "\x1f" not in f.value


WORDS = ["river", "stone", "cedar", "orbit", "maple", "ember", "falcon", "quartz"]


def _signup(rng: random.Random, *, named: bool) -> tuple[str, str, str]:
    """A staff notice whose member line is ``Name (address)``, or the address alone when
    the member gave no name (one slot, two shapes); its note is free text."""
    name, address = _name(rng), f"{rng.choice(WORDS)}.{rng.randint(1, 999)}@mail.example"
    member = f"{name} ({address})" if named else address
    words = [f"{rng.choice(WORDS[1:])}{rng.randint(10, 99)}" for _ in range(rng.randint(6, 14))]
    if rng.random() < 0.8:  # a common word of the note's language, anywhere in it
        words.insert(rng.randint(1, len(words)), WORDS[0])
    note = " ".join(words).capitalize() + "."
    html = (
        "<html><body><h1>New member</h1><p>You have a new free member.</p>"
        f"<p>{member}</p><p>Their note:</p><p>{note}</p><p>Manage your site.</p></body></html>"
    )
    return html, (name if named else address), note


def test_a_slot_of_two_shapes_gives_each_value_whole() -> None:
    """Most members give a name (``Name (address)``) and some do not (the address alone): the
    two shapes get a pattern each, so the name and the address come back as whole values
    in both, where one pattern over all would return the whole line. A word 80 % of the
    free-text notes hold, anywhere in them, does not split a note: it stays one value."""
    rng = random.Random(7)
    made = [_signup(rng, named=rng.random() < 0.75) for _ in range(60)]
    emails = [
        _email(i, "staff@site.example", "New member", m[0], len(made)) for i, m in enumerate(made)
    ]
    rules = form_field_rules(emails, K)
    for named in (True, False, True):
        html, first, note = _signup(rng, named=named)
        fields, _ = fields_of(rules, parse_structure(html).texts, "")
        values = [f.value for f in fields]
        assert first in values
        assert not any("(" in v or ")" in v for v in values)
        if named:
            assert any(v.endswith("@mail.example") for v in values)
        assert note.rstrip(".") in values


BRANCHES = ["main", "release", "feature alpha", "hotfix"]


KINDS = ("push", "force", "merge", "close")


def _event(rng: random.Random, kind: str) -> tuple[str, dict[str, str]]:
    """A forge's event notice: one paragraph says what happened, in one of several
    sentences none of which most notices show (pushed commits, a force-push, a merge, a
    close), then who did it, as ``@name`` in some and the plain name in others (the first
    name several recipients share by chance). The comment is free text."""
    n, sha, branch = str(rng.randint(1, 400)), f"{rng.getrandbits(32):08x}", rng.choice(BRANCHES)
    line, truth = {
        "push": (f"pushed {sha} commits to {branch}", {"sha": sha, "branch": branch}),
        "force": ("force-pushed the branch", {}),
        "merge": (f"merged #{n} into {branch}", {"index": n, "branch": branch}),
        "close": (f"closed #{n}", {"index": n}),
    }[kind]
    truth["kind"] = kind
    truth["who"] = _name(rng)
    who = f"@{truth['who']}" if rng.random() < 0.5 else truth["who"]
    truth["comment"] = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))).capitalize()
    html = (
        "<html><body><h1>Pull request activity</h1>"
        f"<p>{line}</p><p>{who}</p><p>{truth['comment']}</p>"
        "<p>Reply to this email directly.</p></body></html>"
    )
    return html, truth


def test_alternative_sentences_none_in_most_emails_give_their_values_whole() -> None:
    """An event notice's sentence is one of several, none in most notices: each
    alternative k or more recipients show gets its own pattern, so the commit, the branch
    and the pull request's number come back as whole values, and a name after ``@`` without
    the ``@``. A first name or a word several values start with by chance is no shape: a
    name and the free-text comment stay whole values."""
    rng = random.Random(5)
    made = [_event(rng, KINDS[i % 4]) for i in range(48)]  # each in a quarter of them
    emails = [
        _email(i, "forge@site.example", "Activity", m[0], len(made)) for i, m in enumerate(made)
    ]
    rules = form_field_rules(emails, K)
    for i in range(40):
        html, truth = _event(rng, KINDS[i % 4])
        fields, _ = fields_of(rules, parse_structure(html).texts, "")
        values = [f.value for f in fields]
        for key in ("sha", "branch", "index", "who", "comment"):
            if key in truth:
                assert truth[key] in values, (key, truth, values)


def _delivery(rng: random.Random, scheduled: bool) -> tuple[str, dict[str, str]]:
    """A gift's delivery line, whose middle is one of two sentences: sent now to an
    address, or scheduled for an address on a day."""
    address = f"{rng.choice(WORDS)}.{rng.randint(1, 999)}@mail.example"
    month, day, year = rng.randint(1, 12), rng.randint(1, 28), rng.randint(2024, 2027)
    truth = {"name": _name(rng), "address": address}
    if scheduled:
        truth["day"] = f"{year:04d}-{month:02d}-{day:02d}"
        middle = f"will be sent to {address} on {month:02d}/{day:02d}/{year}"
    else:
        middle = f"is on its way to {address}"
    html = (
        "<html><body><h1>Your gift</h1>"
        f"<p>{truth['name']} membership to Harbor \u2014 {middle}. You can also share the"
        " link below yourself.</p><p>Thanks for gifting.</p></body></html>"
    )
    return html, truth


def test_alternative_sentences_inside_a_text_give_their_values_whole() -> None:
    """Where the alternatives sit inside a text (after a name, before a fixed sentence),
    each gets its pattern too: the address comes back alone in both (not ``will be sent
    to …`` with it), and the scheduled day as a date of its own."""
    rng = random.Random(3)
    made = [_delivery(rng, i % 2 == 0) for i in range(40)]
    emails = [_email(i, "gifts@site.example", "Gift", m[0], len(made)) for i, m in enumerate(made)]
    rules = form_field_rules(emails, K)
    for i in range(10):
        html, truth = _delivery(rng, i % 2 == 0)
        fields, _ = fields_of(rules, parse_structure(html).texts, "MM/DD/YYYY")
        values = [f.value for f in fields]
        assert truth["name"] in values, (truth, values)
        assert truth["address"] in values, (truth, values)
        if "day" in truth:
            assert any(f.type == "date" and f.normalized == truth["day"] for f in fields)


def _expiry(rng: random.Random, named: bool) -> tuple[str, dict[str, str]]:
    """An account-expiry notice: ``Dear <name>,`` where the name is known, else ``Hello,``;
    then the days left, ``<n> days``."""
    truth = {"name": _name(rng), "days": str(rng.randint(2, 400))}
    greeting = f"Dear {truth['name']}," if named else "Hello,"
    html = (
        f"<html><body><h1>Account expiry</h1><p>{greeting}</p>"
        "<p>Your account will be disabled unless you sign in.</p>"
        f"<p>Time remaining:</p><p>{truth['days']} days</p></body></html>"
    )
    return html, truth


def test_a_word_that_begins_or_ends_every_value_is_fixed_text() -> None:
    """A lone word is no shape where it sits between two values (a common word of free
    text), but one that begins or ends every value of a shape is the template's: the days
    left come back without ``days``, and the name without ``Dear`` and its comma, though
    some notices say ``Hello,`` instead (a shape with no value)."""
    rng = random.Random(9)
    made = [_expiry(rng, i % 4 != 0) for i in range(40)]
    emails = [_email(i, "iam@site.example", "Expiry", m[0], len(made)) for i, m in enumerate(made)]
    rules = form_field_rules(emails, K)
    for i in range(8):
        html, truth = _expiry(rng, i % 4 != 0)
        fields, _ = fields_of(rules, parse_structure(html).texts, "")
        values = [f.value for f in fields]
        assert truth["days"] in values, (truth, values)
        if i % 4:
            assert truth["name"] in values, (truth, values)


def _gift(rng: random.Random, *, greeted: bool) -> tuple[str, dict[str, str]]:
    """A gift notice whose paragraphs share one path; the greeting is optional (absent in
    about a fifth of the emails), so by ordinal alone every later paragraph moves up one."""
    truth = {
        "name": _name(rng),
        "buyer": _name(rng),
        "note": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))).capitalize(),
        "day": f"{rng.randint(1, 28)}",
    }
    greeting = f"<p>Hi {truth['name']},</p>" if greeted else ""
    html = (
        "<html><body><h1>A gift, just for you</h1>"
        f"{greeting}<p>{truth['buyer']} has gifted you a membership.</p>"
        f"<p>{truth['note']}</p><p>This gift expires on March {truth['day']}, 2027.</p>"
        "<p>Enjoy your membership.</p></body></html>"
    )
    return html, truth


def test_an_optional_paragraph_moves_no_later_field() -> None:
    """Paragraphs on one path are matched to their slots by what each slot's text holds, not
    by ordinal: with or without the optional greeting, the buyer, the note and the date come
    back as whole values with their own labels, and the greeting's name as a name, never a
    whole ``Hi ...,`` line."""
    rng = random.Random(11)
    made = [_gift(rng, greeted=rng.random() < 0.8) for _ in range(60)]
    emails = [
        _email(i, "gifts@site.example", "A gift", m[0], len(made)) for i, m in enumerate(made)
    ]
    rules = form_field_rules(emails, K)
    assert any(r.pattern == ("Hi", None, ",") for r in rules)
    for greeted in (True, False, False, True):
        html, truth = _gift(rng, greeted=greeted)
        fields, _ = fields_of(rules, parse_structure(html).texts, "")
        got = {f.value: f for f in fields}
        assert truth["buyer"] in got
        assert got[truth["buyer"]].type == "name"
        assert truth["note"] in got
        assert f"March {truth['day']}, 2027" in got
        assert got[f"March {truth['day']}, 2027"].label.startswith("This gift expires on")
        assert (truth["name"] in got) == greeted
        if greeted:
            assert got[truth["name"]].label == "Hi"
        assert not any(v.startswith("Hi ") or "has gifted" in v for v in got)


class TestAlign:
    @settings(max_examples=300, deadline=None)
    @given(st.integers(0, 12), st.integers(0, 12))
    def test_without_evidence_items_keep_their_ordinals(self, m: int, n: int) -> None:
        """No score anywhere: item i goes to column i, and items past the last column to none."""
        assert align(m, n, lambda i, j: 0.0) == [i if i < n else None for i in range(m)]

    @settings(max_examples=300, deadline=None)
    @given(
        st.integers(1, 9),
        st.integers(1, 9),
        st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=12),
    )
    def test_the_alignment_keeps_order_and_no_pairing_beats_it(
        self, m: int, n: int, fits: list[tuple[int, int]]
    ) -> None:
        """Columns rise with the items, and the pairs it scores are as many as the most an
        order-keeping matching can score (the textbook DP over the same fits)."""
        good = {(i, j) for i, j in fits if i < m and j < n}
        got = align(m, n, lambda i, j: 1.0 if (i, j) in good else 0.0)
        cols = [c for c in got if c is not None]
        assert cols == sorted(cols)
        assert len(set(cols)) == len(cols)
        dp = [[0] * (n + 1) for _ in range(m + 1)]
        for i in range(m):
            for j in range(n):
                dp[i + 1][j + 1] = max(dp[i][j] + ((i, j) in good), dp[i][j + 1], dp[i + 1][j])
        assert sum((i, c) in good for i, c in enumerate(got)) == dp[m][n]


def test_rules_arranged_for_reading_are_bounded_and_never_stale() -> None:
    """Annotation arranges a template's rules once per rules object: a re-read copy of the
    same template (a new object, as the template cache hands out every TTL) reads the same
    fields, and however many copies come, the arranged rules kept stay within their bound."""
    from server.templates import reading

    emails, _ = _cluster(30, seed=8)
    rules = form_field_rules(emails, K)
    probe = invoice(random.Random(9), 3)
    texts = parse_structure(probe["html"]).texts
    want = fields_of(rules, texts, "")
    for _ in range(reading._READINGS_MAX + 40):
        assert fields_of(tuple(list(rules)), texts, "") == want
    assert len(reading._READINGS) <= reading._READINGS_MAX
    assert fields_of(rules[:3], texts, "") != want  # another object, other rules: no stale read


WORDS = ["alpha", "river", "cedar", "orbit", "quartz", "meadow", "falcon", "ember", "summit"]


def _review(rng: random.Random, n: int, m: int) -> tuple[str, dict[str, Any]]:
    """A pull-request mail: review comments (a ``div`` each), then the commits (a ``li``
    each) with nothing fixed between them, then a merger and a recipient line, the last in a
    ``div`` like the comments'."""

    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))).capitalize()

    comments = [(sentence(), sentence()) for _ in range(n)]
    commits = [(sentence(), f"{rng.getrandbits(32):08x}") for _ in range(m)]
    name = _name(rng)
    email = f"{rng.choice(WORDS)}{rng.randint(10, 99)}@mail.example"
    html = (
        "<html><body><h1>Pull request updated</h1>"
        + "".join(f"<div><pre>{p}</pre><div>{c}</div></div>" for p, c in comments)
        + "<ul>"
        + "".join(f"<li>- {s} <a href='#'>{sha}</a></li>" for s, sha in commits)
        + f"</ul><p>Merged by {name}</p><div><p>Sent to {email}</p></div>"
        + "<p>Reply to this email to comment.</p></body></html>"
    )
    return html, {"comments": comments, "commits": commits, "name": name, "email": email}


def test_two_repeated_blocks_in_one_stretch_are_two_blocks_of_rows() -> None:
    """Review comments then commits, no fixed text between them: each block comes back as
    its own rows, whatever the counts, and the fields after the second block (one in a
    ``div`` like the comments') are found. Before, the comments' block ran to that last
    ``div``, dropping the commits between, and a stretch held one block."""
    rng = random.Random(12)
    emails = []
    for i in range(40):
        html, _ = _review(rng, rng.randint(1, 6), rng.randint(1, 6))
        emails.append(_email(i, "git@forge.example", "PR", html))
    rules = form_field_rules(emails, K)
    assert {r.segment for r in rules} >= {1, 3, 4}
    for n, m in ((1, 5), (6, 1), (3, 3)):
        html, truth = _review(rng, n, m)
        fields, blocks = fields_of(rules, parse_structure(html).texts, "")
        assert [[f.value for f in row] for row in blocks[0].rows] == [
            list(c) for c in truth["comments"]
        ]
        assert [[f.value for f in row] for row in blocks[1].rows] == [
            [s, sha] for s, sha in truth["commits"]
        ]
        assert len(blocks) == 2
        values = [f.value for f in fields]
        assert truth["name"] in values
        assert truth["email"] in values


def test_a_block_after_an_optional_block_is_read_without_it() -> None:
    """Review comments only in some pull-request mails, the commits in all: an email with
    no comment still gets its commits as rows, and the fields after them. Before, a block
    an email lacked ended the cutting, and the commits after it were plain items no rule
    read."""
    rng = random.Random(13)
    emails = []
    for i in range(40):
        html, _ = _review(rng, rng.randint(1, 6) if i % 3 else 0, rng.randint(1, 6))
        emails.append(_email(i, "git@forge.example", "PR", html))
    rules = form_field_rules(emails, K)
    for n, m in ((0, 4), (0, 1), (2, 3)):
        html, truth = _review(rng, n, m)
        fields, blocks = fields_of(rules, parse_structure(html).texts, "")
        want = [[list(c) for c in truth["comments"]]] if n else []
        want.append([[s, sha] for s, sha in truth["commits"]])
        assert [[[f.value for f in row] for row in b.rows] for b in blocks] == want
        values = [f.value for f in fields]
        assert truth["name"] in values
        assert truth["email"] in values


def _billings(rng: random.Random, late: bool) -> tuple[str, dict[str, Any]]:
    """A billing summary: the accounts over their limit, a list item each, then in some
    emails a heading and the accounts past their due date, a list of the same markup."""

    def items(n: int) -> list[tuple[str, str]]:
        return [(rng.choice(WORDS).capitalize(), str(rng.randint(2, 99))) for _ in range(n)]

    over, due = items(rng.randint(1, 6)), items(rng.randint(1, 6)) if late else []

    def ul(rows: list[tuple[str, str]]) -> str:
        return "<ul>" + "".join(f"<li><b>{a}</b><i>{n} seats</i></li>" for a, n in rows) + "</ul>"

    html = (
        "<html><body><div><h1>Billing summary</h1><p>Over their limit:</p>"
        + ul(over)
        + (f"<p>Past due since {rng.randint(2, 28)} days:</p>" + ul(due) if late else "")
        + "<p>Manage billing</p></div></body></html>"
    )
    return html, {"over": over, "due": due}


def test_a_block_is_its_list_items_not_the_lists_a_heading_parts() -> None:
    """Two lists of one markup, the second after a heading of its own: the row element is
    the list item, each list a block of its own. Before, the lists themselves (one or two
    per email) were the rows: one row held a whole list and the heading between them was
    lost."""
    rng = random.Random(21)
    emails = []
    for i in range(40):
        html, _ = _billings(rng, rng.random() < 0.4)
        emails.append(_email(i, "bill@saas.example", "Billing", html))
    rules = form_field_rules(emails, K)
    for late in (False, True):
        html, truth = _billings(rng, late)
        fields, blocks = fields_of(rules, parse_structure(html).texts, "")
        assert [[f.value for f in row] for row in blocks[0].rows] == [
            [a, n] for a, n in truth["over"]
        ]
        values = [f.value for f in fields] + [
            f.value for b in blocks[1:] for r in b.rows for f in r
        ]
        assert all(a in values and n in values for a, n in truth["due"])


def _accounts(rng: random.Random, links: int | None = None) -> tuple[str, list[list[str]]]:
    """Accounts over their limit, a list item each holding a link per project: mostly one
    to three, the list's length as it comes."""

    def row() -> list[str]:
        n = links if links is not None else rng.choice((1, 1, 2, 2, 3))
        return [f"{rng.choice(WORDS)} {rng.choice(WORDS)}" for _ in range(n)]

    rows = [row() for _ in range(rng.randint(1, 5))]
    lis = "".join("<li>" + "".join(f"<a href='#'>{p}</a>" for p in r) + "</li>" for r in rows)
    html = (
        "<html><body><h1>Billing summary</h1><p>Over their limit:</p>"
        f"<ul>{lis}</ul><p>Manage billing</p></body></html>"
    )
    return html, rows


def test_a_rows_list_longer_than_formation_saw_is_read_whole() -> None:
    """A row's links beyond those k recipients' rows held (12 where formation saw 1 to 3)
    are read by the last link's rule: every link comes back in its row."""
    rng = random.Random(31)
    emails = []
    for i in range(40):
        html, _ = _accounts(rng)
        emails.append(_email(i, "bill@saas.example", "Billing", html))
    rules = form_field_rules(emails, K)
    html, truth = _accounts(rng, links=12)
    _, blocks = fields_of(rules, parse_structure(html).texts, "")
    assert [[f.value for f in row] for row in blocks[0].rows] == truth


def _milestone(rng: random.Random, n: int) -> tuple[str, dict[str, Any]]:
    """A milestone notice: a heading, then its message, a paragraph per part (1 to 5 of
    free text, each its own ``p`` under one cell), then a button and a footer."""

    def sentence() -> str:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 12))]
        return " ".join(words).capitalize() + "."

    parts = [sentence() for _ in range(n)]
    html = (
        "<html><body><table><tr><td><h1>You reached a milestone</h1>"
        + "".join(f"<p>{p}</p>" for p in parts)
        + "<a href='#'>View your dashboard</a><p>Sent by Ghost Ltd.</p></td></tr></table>"
        + "</body></html>"
    )
    return html, {"parts": parts}


def test_a_loop_of_paragraphs_is_a_block_of_rows() -> None:
    """Paragraphs a template repeats (one per part of a message, a count of its own in each
    email) come back as rows, a paragraph each, whatever the count. Before, a paragraph
    was no row element and each part came back as a numbered flat field."""
    rng = random.Random(41)
    emails = []
    for i in range(30):
        html, _ = _milestone(rng, rng.randint(1, 5))
        emails.append(_email(i, "ghost@site.example", "Milestone", html))
    rules = form_field_rules(emails, K)
    for n in (1, 4, 7):
        html, truth = _milestone(rng, n)
        _, blocks = fields_of(rules, parse_structure(html).texts, "")
        assert [[f.value.rstrip(".") for f in row] for row in blocks[0].rows] == [
            [p.rstrip(".")] for p in truth["parts"]
        ]


def _member(rng: random.Random, *, reason: bool, greeted: bool) -> tuple[str, dict[str, str]]:
    """A cancellation notice written as paragraphs under one cell: a greeting in most
    emails, fixed sentences with values, a key and value pair per line, and an optional
    reason, so the count of paragraphs varies with what is shown, not with a loop."""
    truth = {
        "name": _name(rng),
        "tier": f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS)}",
        "date": f"{rng.randint(1, 28)}/0{rng.randint(1, 9)}/2026",
        "reason": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))),
    }
    paragraphs = [f"Hello {_name(rng)},"] if greeted else []
    paragraphs += [
        f"{truth['name']} canceled their subscription.",
        "Tier",
        truth["tier"],
        rng.choice(("Expires on", "Expired on")),
        truth["date"],
    ]
    if reason:
        paragraphs += ["Cancellation reason", truth["reason"]]
    html = (
        "<html><body><table><tr><td><h1>A paid member canceled</h1>"
        + "".join(f"<p>{p}</p>" for p in paragraphs)
        + "</td></tr></table><div>View member</div></body></html>"
    )
    return html, truth


def test_paragraphs_of_different_sentences_are_no_block() -> None:
    """A run of paragraphs whose count varies because some are optional (a greeting, a
    reason) is prose, not a loop: no rows, and each value comes back whole with its own
    label, as before paragraphs could be row elements. Counting paragraphs alone made it a
    block whose rows mixed a name, a tier and a date."""
    rng = random.Random(43)
    made = [_member(rng, reason=rng.random() < 0.5, greeted=rng.random() < 0.7) for _ in range(40)]
    emails = [
        ClusterEmail(
            f"user-{i % 10}", "ghost@site.example", "Canceled", parse_structure(h).texts, 0
        )
        for i, (h, _) in enumerate(made)
    ]
    rules = form_field_rules(emails, K)
    assert not any(r.row_path for r in rules)
    for reason, greeted in ((True, True), (False, False), (True, False)):
        html, truth = _member(rng, reason=reason, greeted=greeted)
        fields, blocks = fields_of(rules, parse_structure(html).texts, "")
        assert blocks == ()
        got = {f.value: f for f in fields}
        assert got[truth["tier"]].label == "Tier"
        assert got[truth["date"]].type == "date"
        assert (truth["reason"] in got) == reason


def _shipping(rng: random.Random, n: int, *, company: bool) -> tuple[str, dict[str, Any]]:
    """An order confirmation: the shipping address as lines of one paragraph (``{% for
    field in address %}{{ field }}<br>{% endfor %}``, 2 to 6 lines), then a fixed
    "Deliver to" block whose lines are a label, a name, an optional company and a street."""
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) for _ in range(n)]
    name, street = _name(rng), rng.choice(STREETS)
    office = f"{rng.choice(WORDS).capitalize()} GmbH"
    deliver = ["Deliver to", name, *([office] if company else []), street]
    html = (
        "<html><body><h1>Order placed</h1><p>Shipping address:</p>"
        "<p>" + "<br>".join(lines) + "</p><p>Order total: $12.00</p>"
        "<div>" + "<br>".join(deliver) + "</div><p>Thanks for your order.</p></body></html>"
    )
    return html, {"lines": lines, "name": name, "street": street}


def test_lines_of_one_element_in_a_loop_are_rows() -> None:
    """An element's ``<br>``-separated lines whose count varies, all alike, come back as
    rows, a line each; lines of different kinds (a label, a name, an optional company, a
    street) stay fields. Before, each line of the loop was a numbered field of its own."""
    rng = random.Random(51)
    emails = []
    for i in range(30):
        html, _ = _shipping(rng, rng.randint(2, 6), company=rng.random() < 0.5)
        emails.append(_email(i, "shop@store.example", "Order", html))
    rules = form_field_rules(emails, K)
    for n, company in ((2, True), (5, False), (8, True)):
        html, truth = _shipping(rng, n, company=company)
        fields, blocks = fields_of(rules, parse_structure(html).texts, "")
        assert len(blocks) == 1
        assert [[f.value for f in row] for row in blocks[0].rows] == [[x] for x in truth["lines"]]
        values = [f.value for f in fields]
        assert truth["name"] in values
        assert truth["street"] in values


def _digest(rng: random.Random, n: int) -> tuple[str, dict[str, Any]]:
    """A forum digest: its latest topics, a list item each, shown only when there are some
    (else one fixed sentence), then the reader's address after them."""
    topics = [
        " ".join(rng.choice(ITEMS).split()[::-1]) + f" {rng.randint(2, 99)}" for _ in range(n)
    ]
    listed = (
        "<ul>" + "".join(f"<li><a href='#'>{t}</a></li>" for t in topics) + "</ul>"
        if topics
        else "<p>There have been no active topics.</p>"
    )
    address = f"{rng.choice(FIRST).lower()}{rng.randint(1, 999)}@mail.example"
    html = (
        "<html><body><p>Hello "
        + _name(rng)
        + ",</p><h2>Latest topics from the forum</h2>"
        + listed
        + f"<p>This digest was sent to {address}</p></body></html>"
    )
    return html, {"topics": topics, "address": address}


def test_an_optional_list_shown_in_few_emails_is_a_block_of_rows() -> None:
    """A list most emails leave out (no topics: a fixed sentence instead) is still a
    repeated block where it is shown: each topic comes back in its own row, and the field
    after the list is found however many topics it holds."""
    rng = random.Random(41)
    emails = []
    for i in range(40):
        html, _ = _digest(rng, rng.randint(1, 5) if i % 5 < 2 else 0)  # 16 of 40, 8 recipients
        emails.append(_email(i, "forum@bb.example", "Digest", html, users=8))
    rules = form_field_rules(emails, K)
    for n in (1, 3, 7):
        html, truth = _digest(rng, n)
        fields, blocks = fields_of(rules, parse_structure(html).texts, "")
        assert [[f.value for f in row] for b in blocks for row in b.rows] == [
            [t] for t in truth["topics"]
        ]
        assert [f.value for f in fields if f.type == "email"] == [truth["address"]]


def _trained(htmls: list[str], sender: str) -> tuple[FieldRuleValue, ...]:
    """The field rules formed from `htmls`, each email its own recipient's."""
    return form_field_rules(
        [_email(i, sender, "Notice", h, len(htmls)) for i, h in enumerate(htmls)], K
    )


def _charge(rng: random.Random) -> dict[str, str]:
    """A charge's amount (dollars) and its day in April 2027."""
    return {
        "amount": f"${rng.randint(5, 300)}.{rng.randint(0, 99):02d}",
        "day": f"{rng.randint(1, 28)}",
    }


def _charge_read(
    fields: tuple[Extracted, ...], truth: dict[str, str], label: str
) -> dict[str, Extracted]:
    """The fields by value, once the charge's amount has come back as money (labelled by
    `label`'s words) and its day as a date, each normalised."""
    got = {f.value: f for f in fields}
    amount, day = got[truth["amount"]], got[f"April {truth['day']}, 2027"]
    assert (amount.type, amount.normalized) == ("money", truth["amount"][1:])
    assert amount.label.startswith(label)
    assert (day.type, day.normalized) == ("date", f"2027-04-{int(truth['day']):02d}")
    return got


def _renewal(rng: random.Random, *, summary: bool) -> tuple[str, dict[str, str]]:
    """A renewal notice whose charge sentence follows a fixed paragraph, the anchor of its
    stretch; without `summary` another sentence stands in that paragraph's place."""
    truth = {"name": _name(rng), **_charge(rng)}
    middle = (
        "<p>Here is a summary of your renewal.</p>"
        if summary
        else "<p>Your renewal needs nothing from you this time.</p>"
    )
    html = (
        f"<html><body><h1>Plan renewed</h1><p>Hi {truth['name']},</p>{middle}"
        f"<p>Your card will be charged {truth['amount']} on April {truth['day']}, 2027.</p>"
        "<p>Thanks for staying with us.</p></body></html>"
    )
    return html, truth


def test_a_sentence_after_a_missing_anchor_is_still_read() -> None:
    """Every training email holds the fixed paragraph before the charge sentence, so the
    sentence's rules belong to that paragraph's stretch. A fresh email with another sentence
    in its place still gives the amount as money and the day as a date, each labelled by
    the sentence's fixed words; the sentence standing in for the anchor is no field."""
    rng = random.Random(5)
    rules = _trained([_renewal(rng, summary=True)[0] for _ in range(40)], "plans@site.example")
    assert any(r.anchor == "Here is a summary of your renewal." for r in rules)
    for summary in (False, True, False):
        html, truth = _renewal(rng, summary=summary)
        fields, _ = fields_of(rules, parse_structure(html).texts, "")
        got = _charge_read(fields, truth, "Your card will be charged")
        assert got[truth["name"]].label == "Hi"
        assert not any("renewal" in v for v in got)


def _plan_notice(rng: random.Random, *, projects: bool) -> tuple[str, dict[str, str]]:
    """A plan notice whose list of projects follows a fixed lead (the anchor of its stretch)
    and is followed by the closing sentence; without `projects` one sentence stands in for
    both the lead and the list, as a template's alternative branch does."""
    truth = _charge(rng)
    if projects:
        names = "".join(f"<li>{rng.choice(WORDS)}</li>" for _ in range(rng.randint(1, 4)))
        middle = f"<p>This plan covers these projects:</p><ul>{names}</ul>"
    else:
        middle = "<p>No projects are attached to this plan.</p>"
    html = (
        f"<html><body><h1>Plan report</h1><p>Hi {_name(rng)},</p>{middle}"
        f"<p><strong>Unless you pay {truth['amount']}, the plan closes on "
        f"April {truth['day']}, 2027.</strong></p><p>Thanks for using the plan.</p></body></html>"
    )
    return html, truth


def test_a_sentence_after_the_block_of_a_missing_anchor_is_still_read() -> None:
    """The closing sentence follows the list of projects, so its rules are the lead's
    stretch's, after its block. A fresh email whose branch has neither lead nor list holds
    the sentence in the stretch before; the amount and the day are still read there, with
    their types and labels, whatever the list held in the emails that had it."""
    rng = random.Random(12)
    rules = _trained(
        [_plan_notice(rng, projects=True)[0] for _ in range(40)], "billing@site.example"
    )
    assert any(r.row_path and r.anchor == "This plan covers these projects:" for r in rules)
    for projects in (False, True, False):
        html, truth = _plan_notice(rng, projects=projects)
        fields, _ = fields_of(rules, parse_structure(html).texts, "")
        got = _charge_read(fields, truth, "Unless you pay")
        assert not any("attached" in v for v in got)


def _activity(rng: random.Random, *, mentioned: bool) -> tuple[str, list[list[str]]]:
    """An activity notice: a lead sentence, the anchor of the stretch holding a list of
    comments, 1 to 5 rows of (name, comment); without `mentioned` another lead stands in its
    place."""
    rows = [
        [_name(rng), " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))).capitalize()]
        for _ in range(rng.randint(1, 5))
    ]
    lead = "You were mentioned in these comments:" if mentioned else "Comments were posted:"
    items = "".join(f"<li><b>{name}</b><span>{text}</span></li>" for name, text in rows)
    html = (
        f"<html><body><h1>Activity on {rng.choice(WORDS)}</h1><p>{lead}</p>"
        f"<ul>{items}</ul><p>View it on the site.</p></body></html>"
    )
    return html, rows


def test_a_block_after_a_missing_anchor_is_still_rows() -> None:
    """Every training email holds the lead before the list, so the list's block belongs to
    the lead's stretch. A fresh email with another lead still gives one row per comment,
    each its name and text in order; the stand-in lead is no field."""
    rng = random.Random(8)
    rules = _trained([_activity(rng, mentioned=True)[0] for _ in range(40)], "git@site.example")
    assert any(r.row_path and r.anchor == "You were mentioned in these comments:" for r in rules)
    for mentioned in (False, True, False):
        html, rows = _activity(rng, mentioned=mentioned)
        fields, blocks = fields_of(rules, parse_structure(html).texts, "")
        assert [[f.value for f in row] for b in blocks for row in b.rows] == rows
        assert not any("posted" in f.value or "mentioned" in f.value for f in fields)
