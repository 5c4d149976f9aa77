"""The TemplateInduction corpus's ground truth: values, rows, subjects and verticals,
on small in-memory templates of every syntax (no download)."""

from __future__ import annotations

import html
import json
import random
import re
from typing import Any

import pytest

from loadtest.corpora.email_corpus import (
    SUBJECT_MODES,
    GeneratedValue,
    build_corpus,
    instantiate_values,
)
from loadtest.corpora.email_model import SourceTemplate, vertical_of
from loadtest.corpora.mailgen_templates import instantiate_mailgen
from loadtest.corpora.template_languages import Choices


class _Max(random.Random):
    """Every loop repeats the maximum and every optional block is kept."""

    def randint(self, a: int, b: int) -> int:
        return b if b - a < 20 else super().randint(a, b)

    def random(self) -> float:
        return 0.0


def _text(doc: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", doc))


def _render(t: SourceTemplate, repeats: int = 3) -> tuple[str, tuple[GeneratedValue, ...]]:
    return instantiate_values(t, _Max(5), {}, "MDY", Choices(max_repeats=repeats))


LOOPS = {
    "django": "<p>Hi {{ user.name }}</p>{% for line in order.lines %}<td>{{ line.title }}</td>"
    "<td>{{ line.price }}</td>{% endfor %}<p>{{ site_name }}</p>",
    "jinja": "<p>Hi {{ user.name }}</p>{% for line in order.lines %}<td>{{ line.title }}</td>"
    "<td>{{ line.price }}</td>{% endfor %}<p>{{ site_name }}</p>",
    "handlebars": "<p>Hi {{user.name}}</p>{{#each lines}}<td>{{title}}</td><td>{{price}}</td>"
    "{{/each}}<p>{{site_name}}</p>",
    "go": "<p>Hi {{.User.Name}}</p>{{range .Lines}}<td>{{.Title}}</td><td>{{.Price}}</td>"
    "{{end}}<p>{{.SiteName}}</p>",
    "freemarker": "<p>Hi ${user.name}</p><#list lines as line><td>${line.title}</td>"
    "<td>${line.price}</td></#list><p>${siteName}</p>",
    "benchpress": "<p>Hi {user.name}</p><!-- BEGIN lines --><td>{lines.title}</td>"
    "<td>{lines.price}</td><!-- END lines --><p>{site_name}</p>",
}


@pytest.mark.parametrize("syntax", sorted(LOOPS))
def test_a_loop_of_three_iterations_yields_three_rows(syntax: str) -> None:
    """Three iterations: three distinct row ids, each with its title and price, and every
    recorded value is text the email shows."""
    t = SourceTemplate("fam", "receipt", "s@x.example", LOOPS[syntax], syntax=syntax)
    doc, values = _render(t)
    rows = [v.row for v in values if v.row]
    assert sorted({r.lower() for r in rows}) == ["lines#1", "lines#2", "lines#3"]  # Go: Lines
    for row in set(rows):
        assert sorted(v.name.lower() for v in values if v.row == row) == ["price", "title"]
    text = _text(doc)
    for v in values:
        assert v.value in text
    outside = [v for v in values if not v.row]
    assert [v.constant for v in outside] == [False, True]  # the user's name; the site's


def test_nested_loops_give_nested_row_ids() -> None:
    """An inner loop's rows are numbered within its outer row (orders#1/items#2)."""
    source = (
        "{% for order in orders %}<h2>{{ order.number }}</h2>"
        "{% for item in order.items %}<td>{{ item.title }}</td>{% endfor %}{% endfor %}"
    )
    t = SourceTemplate("fam", "orders", "s@x.example", source, syntax="django")
    _, values = _render(t, repeats=2)
    assert [v.row for v in values] == [
        "orders#1", "orders#1/items#1", "orders#1/items#2",
        "orders#2", "orders#2/items#1", "orders#2/items#2",
    ]  # fmt: skip


def test_a_loop_met_twice_gets_distinct_row_ids() -> None:
    """The same loop variable rendered twice gives two row families (items#, items~2#)."""
    source = (
        "{% for x in items %}{{ x.title }}{% endfor %}{% for x in items %}{{ x.title }}{% endfor %}"
    )
    t = SourceTemplate("fam", "twice", "s@x.example", source, syntax="django")
    _, values = _render(t, repeats=2)
    assert [v.row for v in values] == ["items#1", "items#2", "items~2#1", "items~2#2"]


def test_translated_placeholders_are_recorded() -> None:
    """Values filled into catalogue strings (Go's Tr, FreeMarker's msg, Benchpress) count."""
    cases = [
        ("go", '{{.locale.Tr "hi" .Doer.Name}}', {"hi": "Hi <b>%s</b>, welcome"}),
        ("freemarker", '${msg("hi", user.username)}', {"hi": "Hi {0}, welcome"}),
        ("benchpress", "[[email:hi, {username}]]", {"hi": "Hi %1, welcome"}),
        ("django", "{% blocktrans %}Hi {{ username }}, welcome{% endblocktrans %}", {}),
    ]
    for syntax, source, messages in cases:
        t = SourceTemplate("f", "n", "s@x.example", source, syntax=syntax, messages=messages)
        doc, values = _render(t)
        assert len(values) == 1, syntax
        assert " ".join(_text(doc).replace(" ,", ",").split()) == f"Hi {values[0].value}, welcome"


def test_static_line_items_are_rows() -> None:
    """Foundation's line items: item, qty and price per row; e-mail addresses recorded."""
    row = "<tr><td>Compass</td><td>2</td><td>$30</td></tr>"
    source = f"<html><body><p>Write to a.b@c.example</p><table>{row}\n{row}\n</table></body></html>"
    t = SourceTemplate("foundation", "order", "s@x.example", source, syntax="static")
    doc, values = _render(t)
    rows = sorted({v.row for v in values if v.row})
    assert rows == ["items#1", "items#2", "items#3"]
    for r in rows:
        assert [v.name for v in values if v.row == r] == ["item", "qty", "price"]
    assert [v.name for v in values if not v.row] == ["email"]
    text = _text(doc)
    assert all(v.value in text for v in values)


def test_static_digits_in_a_stylesheet_are_no_values() -> None:
    """A compiled demo's stylesheet digits (``padding-bottom: 9``) are redrawn with its text,
    but only the digits a reader sees (a telephone number) are recorded as values."""
    source = (
        "<html><head><style>.a { padding-bottom: 9; margin: 1 }</style></head>"
        "<body><!-- v 2 --><p>Call 408-341-0600</p></body></html>"
    )
    t = SourceTemplate("foundation", "basic", "s@x.example", source, syntax="static")
    doc, values = _render(t)
    assert [v.name for v in values] == ["number"]
    assert re.fullmatch(r"\d{3}-\d{3}-\d{4}", values[0].value)
    assert values[0].value in _text(doc)


def test_static_digit_runs_are_recorded_as_a_reader_reads_them() -> None:
    """A bracket that opens the text around a number is not the number's (``(75 m)``: 75);
    a currency sign before one is (``$658``, an amount)."""
    source = "<html><body><p>Rope (75 m) for $658</p></body></html>"
    t = SourceTemplate("foundation", "order", "s@x.example", source, syntax="static")
    doc, values = _render(t)
    assert [re.sub(r"\d", "9", v.value) for v in values] == ["99", "$999"]
    assert all(v.value in _text(doc) for v in values)


def test_mailgen_table_rows_are_recorded() -> None:
    """Mailgen's table rows are recorded per row (table#i) with their values, in order."""
    spec = {
        "theme": "default",
        "product": "Acme",
        "intro": ["Hi"],
        "table": ["item", "description", "price"],
    }
    t = SourceTemplate(
        "mailgen-default", "receipt", "s@x.example", json.dumps(spec), syntax="mailgen"
    )
    got: list[tuple[str, str, str, bool]] = []
    out = instantiate_mailgen(
        t, random.Random(2), lambda n: f"<{n}>", 1.0, lambda *a: got.append(a)
    )
    table = out["body"]["table"]["data"]
    for i, row in enumerate(table, 1):
        assert [(n, v) for n, v, r, _ in got if r == f"table#{i}"] == list(row.items())
    assert ("product_name", "Acme", "", True) in got
    assert ("name", out["body"]["name"], "", False) in got


def _family() -> list[SourceTemplate]:
    base = "<html><body><h1>{{ site_name }}</h1>{% block content %}{% endblock %}</body></html>"
    files = {"base.html": base}
    out = []
    for name, body, subject in [
        ("password_reset", "Reset for {{ user.name }}", "Reset your password at {{ site_name }}"),
        (
            "order_placed",
            "{% for l in lines %}{{ l.title }}{% endfor %}",
            "Order {{ order.number }}",
        ),
        ("welcome", "Welcome {{ user.name }}", ""),
    ]:
        source = '{% extends "base.html" %}{% block content %}' + body + "{% endblock %}"
        out.append(
            SourceTemplate(
                "shop", name, "shop@x.example", source, files, "django", {}, "pkg", subject
            )
        )
    return out


def test_subject_modes() -> None:
    """name: the file name shows; real: the source's own subject (a generic one when it has
    none); sender: one text per sender apart from the recipient's name."""
    sources = _family()
    kw: dict[str, Any] = {"per_template": 6, "fresh": 2, "humans": 3, "users": 100}
    by_mode = {mode: build_corpus(sources, subjects=mode, **kw) for mode in SUBJECT_MODES}
    mails = {m: [e for e in c if not e.noise] for m, c in by_mode.items()}
    assert all(
        e.subject.lower().startswith(e.label.split("/")[1].replace("_", " ")) for e in mails["name"]
    )
    real = {e.label: e.subject for e in mails["real"]}
    site = next(v.value for e in mails["real"] for v in e.values if v.name == "site_name")
    assert real["shop/password_reset"] == f"Reset your password at {site}"
    assert re.fullmatch(r"Order \d+", real["shop/order_placed"])
    assert real["shop/welcome"].startswith("News from ")
    stems = {re.sub(r" for .*", "", e.subject) for e in mails["sender"]}
    assert len(stems) == 1
    assert stems.pop().startswith("Notification from ")
    for e in mails["sender"]:
        assert e.label.split("/")[1].split("_")[0] not in e.subject.lower()
    with pytest.raises(ValueError, match="subjects"):
        build_corpus(sources, subjects="other", **kw)


def test_corpus_carries_values_vertical_and_package() -> None:
    """Generated emails carry their values, their template's vertical and package; one
    sender's constants are shared by all its templates; humans carry none."""
    corpus = build_corpus(_family(), per_template=3, fresh=1, humans=2, users=50)
    mails = [e for e in corpus if not e.noise]
    assert all(e.values and e.package == "pkg" for e in mails)
    assert {e.label: e.vertical for e in mails} == {
        "shop/password_reset": "account", "shop/order_placed": "receipt", "shop/welcome": "account",
    }  # fmt: skip
    assert len({v.value for e in mails for v in e.values if v.constant}) == 1
    assert all(not e.values and e.vertical == "" for e in corpus if e.noise)


@pytest.mark.parametrize(
    ("family", "name", "vertical"),
    [
        ("oscar", "commtype_order_placed_body", "receipt"),
        ("weblate", "billing_expired", "bill"),
        ("shop", "trial-expiring", "bill"),
        ("shop", "shipping-notice", "shipping"),
        ("mailgen-salted", "itinerary", "travel"),
        ("keycloak", "password-reset", "account"),
        ("nodebb", "digest", "newsletter"),
        ("helpdesk", "resolved_owner", "other"),
        ("ghost-newsletter", "template", "newsletter"),
    ],
)
def test_vertical_rules(family: str, name: str, vertical: str) -> None:
    """Each template family and name maps to the vertical the figures group it under."""
    assert vertical_of(family, name) == vertical


@pytest.mark.parametrize("syntax", ["jinja", "handlebars"])
def test_values_in_attributes_are_not_shown(syntax: str) -> None:
    """An insertion into an attribute (a link's address, an image's alt and src) is not
    shown; insertions into the text are, and the email shows them."""
    source = {
        "jinja": '<a href="{{ link }}">Open</a><img alt="{{ caption }}" src="{{ caption }}">'
        "<p>{{ caption }}</p><p>{{ name }}</p>",
        "handlebars": '<a href="{{link}}">Open</a><img alt="{{caption}}" src="{{caption}}">'
        "<p>{{caption}}</p><p>{{name}}</p>",
    }[syntax]
    t = SourceTemplate("fam", "note", "s@x.example", source, syntax=syntax)
    doc, values = _render(t)
    got = [(v.name, v.shown) for v in values]
    assert got == [
        ("link", False),
        ("caption", False),
        ("caption", False),
        ("caption", True),
        ("name", True),
    ]
    assert all(v.value in _text(doc) for v in values if v.shown)
