"""The extraction figures' arithmetic on hand-made annotations."""

from __future__ import annotations

import pytest

from loadtest.figures.templates_extraction import (
    Annotated,
    Generated,
    by_source,
    date_iso,
    k_shared,
    money_amount,
    worst,
)

GEN = [
    ("name", "Ines Müller", "", False),
    ("brand", "Nordic Home", "", True),
    ("total", "$1,234.50", "", False),
    ("date", "February 25, 2026", "", False),
    ("item", "Desk Lamp", "r1", False),
    ("price", "$12.00", "r1", False),
    ("item", "Oak Desk", "r2", False),
    ("price", "$40.00", "r2", False),
]
FIELDS = [
    ("Hi", "Ines Müller", "name", "Ines Müller"),
    ("Amount Due", "$1,234.50", "money", "1234.5"),
    ("", "February 25, 2026 #U1", "date", "2026-02-25"),
]
ROWS = [
    [("Item", "Desk Lamp", "text", "Desk Lamp"), ("Price", "$12.00", "money", "12.0")],
    # a row mixing two generated rows: its values are not "in their own row"
    [("Item", "Oak Desk", "text", "Oak Desk"), ("Price", "$12.00", "money", "12.0")],
]


class TestExtractionFigures:
    def test_fixed_text_holding_a_value_k_recipients_share_is_no_leak(self) -> None:
        """A value in the fixed text counts as personal only when fewer than k recipients'
        training emails held it; one k or more held is counted apart; a value inside another
        word (``ember`` in ``member``) is not in the fixed text at all."""

        class Email:
            def __init__(self, recipient: str, project: str) -> None:
                self.label, self.recipient = "weblate/new_string", recipient
                self.values = [Generated("project", project)]

        train = [Email(f"u{i}", "maple river") for i in range(5)]
        train += [Email(f"u{i}", "orbit") for i in range(4)]
        shared = k_shared(train, 5)
        assert shared == {"weblate/new_string": frozenset({"maple river"})}
        fixed = ("New strings in maple river", "orbit", "You have a new member")
        gen = [("project", v, "", False) for v in ("maple river", "orbit", "ember")]
        got = by_source(
            [Annotated("w", gen, "other", "other", [], [], fixed, "", shared["weblate/new_string"])]
        )[0]
        assert (got.personal_in_fixed, got.shared_in_fixed) == (1, 1)

    def test_shares_per_source(self) -> None:
        """Inside, whole, money, dates, rows, vertical and personal text, per source."""
        a = Annotated("packs", GEN, "bill", "bill", FIELDS, ROWS, ("Nordic Home", "Total"))
        b: tuple[object, ...] = (
            "other",
            [("code", "AB12CD", "", False)],
            "account",
            "other",
            [],
            [],
            ["AB12CD"],
        )
        (fa, fb) = by_source([b, a])
        assert (fa.source, fb.source) == ("other", "packs")
        fa, fb = fb, fa
        assert fa.values == 7  # the constant brand left out
        # all but "$40.00" are inside a field; the date is not a whole value
        assert fa.inside == pytest.approx(6 / 7)
        assert fa.whole == pytest.approx(5 / 7)
        assert fa.money_values == 3
        assert fa.money == pytest.approx(2 / 3)
        assert (fa.date_values, fa.dates) == (1, 1.0)
        # Desk Lamp and $12.00 in row 1 (all from r1); Oak Desk's row mixes r1 and r2
        assert fa.row_values == 4
        assert fa.rows == pytest.approx(2 / 4)
        assert fa.vertical == 1.0
        assert fa.personal_in_fixed == 0
        assert fb.vertical == 0.0
        assert fb.personal_in_fixed == 1
        assert fb.money is None
        assert worst([fa, fb], "vertical") == 0.0
        assert worst([fa, fb], "money") == pytest.approx(2 / 3)

    def test_money_and_dates_parse(self) -> None:
        """Amounts with digit groups or a decimal comma; only unambiguous dates by string."""
        assert money_amount("$1,234.50") == 1234.5
        assert money_amount("12,50 €") == 12.5
        assert money_amount("free") is None
        assert date_iso("Tuesday, 3 March 2026") == "2026-03-03"
        assert date_iso("25/02/2026") == "2026-02-25"
        assert date_iso("01/02/2026") == ""
        assert date_iso("2026-02-25T10:00") == "2026-02-25"

    def test_an_ambiguous_date_counts_with_its_iso_day(self) -> None:
        """A generated ISO day makes an ambiguous date count (returned right here)."""
        gen = [Generated("date", "01/02/2026", iso="2026-02-01")]
        fields = [("Date", "01/02/2026", "date", "2026-02-01")]
        (f,) = by_source([Annotated("s", gen, "bill", "bill", fields)])
        assert (f.date_values, f.dates, f.whole) == (1, 1.0, 1.0)

    def test_invisible_values_and_closing_stops(self) -> None:
        """A value the email's text does not hold (a link's address) is not counted; a
        generated sentence's closing stop does not make a field's value another."""
        e = Annotated(
            "s",
            [("link", "https://x.example/1", "", False), ("within", "orbit stone.", "", False)],
            "account",
            "account",
            [("This link will expire in", "orbit stone", "text", "")],
            text="Use this link. This link will expire in orbit stone.",
        )
        (f,) = by_source([e])
        assert f.invisible == 1
        assert f.values == 1
        assert f.whole == 1.0

    def test_values_shown_glued_are_one_value(self) -> None:
        """``{{ base_url }}{{ path }}`` reads as one link: returned whole, it is a whole
        value; a lone part returned is not. Short parts never glue (``ab`` + ``99``)."""
        gen = [
            ("base_url", "https://mail.example/a", "", False),
            ("path", "/pages/12/edit", "", False),
            ("code", "ab", "", False),
            ("n", "99", "", False),
        ]
        text = "Edit it at https://mail.example/a/pages/12/edit now. Code ab99."
        whole_link = [("", "https://mail.example/a/pages/12/edit", "url", "")]
        (got,) = by_source([Annotated("s", gen, "", "", whole_link, text=text)])
        assert got.values == 3  # the link, and the two short values on their own
        assert got.whole == pytest.approx(1 / 3)
        (part,) = by_source(
            [Annotated("s", gen, "", "", [("", "/pages/12/edit", "url", "")], text=text)]
        )
        assert part.values == 3
        assert part.whole == 0.0
        assert part.inside == 0.0

    def test_a_value_the_generator_did_not_show_is_not_counted(self) -> None:
        """An image's ``src`` word that the prose also holds by chance is invisible: not a
        miss, and not personal text when the fixed text holds that word."""
        gen = [
            Generated("src", "maple", "", False, shown=False),
            Generated("title", "Island maple copper", "", False, shown=True),
        ]
        text = "Island maple copper"
        fields = [("", "Island maple copper", "text", "")]
        (got,) = by_source([Annotated("s", gen, "", "", fields, (), ("maple",), text)])
        assert (got.values, got.invisible, got.whole) == (1, 1, 1.0)
        assert got.personal_in_fixed == 0
        unknown = [g._replace(shown=None) for g in gen]
        (before,) = by_source([Annotated("s", unknown, "", "", fields, (), ("maple",), text)])
        assert (before.values, before.invisible, before.whole) == (2, 0, 0.5)
        assert before.personal_in_fixed == 1
