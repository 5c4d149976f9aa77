"""Leave one source out: a fold's thresholds are chosen without the source it measures."""

from __future__ import annotations

import pytest

from loadtest.benches.templates_loso import (
    GRID,
    SourceFigures,
    branded,
    choose,
    fingerprinted,
    named,
    relaid,
    table_frame,
)
from loadtest.corpora.email_corpus import LabeledEmail
from server.templates.schemes import SchemeParams


def _f(p: float, r: float) -> SourceFigures:
    return SourceFigures(p, r, 1.0, 0, 5)


class TestChoose:
    def test_the_left_out_source_plays_no_part(self) -> None:
        """Grid point 0 is best for A alone, 1 for the others: leaving A out chooses 1, and
        leaving B out chooses by the worst of A and C."""
        table = {
            0: {"A": _f(1.0, 1.0), "B": _f(0.5, 1.0), "C": _f(0.9, 0.9)},
            1: {"A": _f(0.2, 1.0), "B": _f(0.9, 1.0), "C": _f(0.95, 0.95)},
        }
        assert choose(table, "A") == 1
        assert choose(table, "B") == 0  # worst of A, C: 0.9 at 0 against 0.2 at 1

    def test_the_service_defaults_are_a_grid_point(self) -> None:
        """The defaults the server runs with are among the choices every fold weighs."""
        assert SchemeParams() in GRID


def test_the_aims_hold_only_when_every_one_does() -> None:
    """P >= 0.95, R >= 0.90, <= 1.1 templates per true one and none unformed, each at its
    bound; one past any of them fails."""
    assert SourceFigures(0.95, 0.9, 1.1, 0, 5).meets_aims
    for miss in (
        SourceFigures(0.94, 1.0, 1.0, 0, 5),
        SourceFigures(1.0, 0.89, 1.0, 0, 5),
        SourceFigures(1.0, 1.0, 1.11, 0, 5),
        SourceFigures(1.0, 1.0, 1.0, 1, 5),
    ):
        assert not miss.meets_aims


def test_a_brand_goes_on_template_subjects_only() -> None:
    """The sender's domain label before or after each template email's subject; a human
    email keeps its own; anything else is refused."""
    emails = [
        LabeledEmail(
            "a/0", "support@helpdesk-desk.example", "u1", "Ticket (Closed)", "", "a", False
        ),
        LabeledEmail("h/0", "ava.lopez1@mail.example", "u2", "lunch?", "", "human", True),
    ]
    assert [e.subject for e in branded(emails, "prefix")] == [
        "[Helpdesk-desk] Ticket (Closed)",
        "lunch?",
    ]
    assert [e.subject for e in branded(emails, "suffix")] == [
        "Ticket (Closed) | Helpdesk-desk",
        "lunch?",
    ]
    with pytest.raises(ValueError, match="prefix or suffix"):
        branded(emails, "middle")


def test_a_first_name_goes_on_template_subjects_only() -> None:
    """The recipient's first name, the same for each of its emails, before or after each
    template email's subject; a human email keeps its own; anything else is refused."""
    emails = [
        LabeledEmail("a/0", "shop@store.example", "u1", "Your order shipped", "", "a", False),
        LabeledEmail("a/1", "shop@store.example", "u1", "Your receipt", "", "b", False),
        LabeledEmail("h/0", "ava.lopez1@mail.example", "u2", "lunch?", "", "human", True),
    ]
    front = [e.subject for e in named(emails, "prefix")]
    name = front[0].split(",")[0]
    assert front == [f"{name}, your order shipped", f"{name}, your receipt", "lunch?"]
    assert [e.subject for e in named(emails, "suffix")] == [
        f"Your order shipped for {name}",
        f"Your receipt for {name}",
        "lunch?",
    ]
    with pytest.raises(ValueError, match="prefix or suffix"):
        named(emails, "middle")


class TestTableFrame:
    def test_a_div_counts_only_above_a_table_part(self) -> None:
        """A content ``div`` (a breadcrumb of links) leaves the frame, the ``div`` that holds
        the layout's table stays, and table parts stay wherever they are."""
        paths = [
            "/html",
            "/html/body",
            "/html/body/div",
            "/html/body/div/div",
            "/html/body/div/div/div",
            "/html/body/div/div/table",
            "/html/body/div/div/table/tr",
            "/html/body/div/div/table/tr/td",
        ]
        assert table_frame(paths) == [
            "/html",
            "/html/body",
            "/html/body/div",
            "/html/body/div/div",
            "/html/body/div/div/table",
            "/html/body/div/div/table/tr",
            "/html/body/div/div/table/tr/td",
        ]
        assert table_frame(["/html", "/html/body", "/html/body/div"]) == ["/html", "/html/body"]

    def test_an_optional_breadcrumb_keeps_the_email_in_its_row(self) -> None:
        """Two emails of one sender, one with a breadcrumb ``div`` in the heading's box, get
        one row under ``--layout tables`` and two under the service's own key."""
        frame = "<div class='content'><div class='box'>{}<h1>Parse error</h1></div>{}</div>"
        table = "<table><tr><td>Translation info</td></tr></table>"
        bodies = [
            frame.format("", table),
            frame.format("<div class='nav'><a href='x'>Project</a> / <a>Comp</a></div>", table),
        ]
        emails = [
            LabeledEmail(
                f"w/{i}", "noreply@weblate.example", f"u{i}", "Parse error", html, "w", False
            )
            for i, html in enumerate(bodies)
        ]
        parsed = fingerprinted(emails)
        assert all(p is not None for p in parsed)
        assert parsed[0].keys != parsed[1].keys  # type: ignore[union-attr]
        again = relaid(emails, parsed)
        assert again[0].keys == again[1].keys  # type: ignore[union-attr]
