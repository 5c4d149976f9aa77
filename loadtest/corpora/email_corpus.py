"""The clustering-quality corpus: real templates instantiated as real emails, plus noise.

Each real template (`email_sources`) becomes emails to distinct recipients, the way its
sender's code instantiates it (`template_languages`): every value personal and typed by
its variable's name, every loop 1-10 items (line items, digest entries, comments), every
conditional block without an alternative kept in about 80 % of instances (optional
blocks), every translated string from the source's own catalogue. Foundation's static
demos get the same treatment from their markup: runs of alike table rows become 1-10
rows, and one long paragraph is dropped from about 20 % of instances.

The held-out protocol: `per_template` *training* instances of every template, submitted
with one-off human emails (webmail-style HTML, one person writing to 1-3 people, fewer
than k: they must never form a template), then `fresh` *held-out* instances of every
template (new values, new choices), which are only annotated. Ground truth: an email's
label is its template (``family/name``), or unique for noise.
"""

from __future__ import annotations

import copy
import dataclasses
import html as html_lib
import itertools
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lxml.etree
import lxml.html
from lxml.html import HtmlElement

from loadtest.corpora.email_sources import SourceTemplate, ensure_sources
from loadtest.corpora.mailgen_templates import instantiate_mailgen, mailgen_sources, render_mailgen
from loadtest.corpora.template_languages import Choices, RenderContext, constructs, render

__all__ = [
    "FIRST_NAMES",
    "SUBJECT_MODES",
    "GeneratedValue",
    "LabeledEmail",
    "build_corpus",
    "describe",
    "human_email",
    "instantiate",
    "instantiate_values",
    "is_constant",
    "real_templates",
    "subject_for",
    "value_for",
]

FIRST_NAMES = [
    "Ava",
    "Bob",
    "Chen",
    "Dana",
    "Emil",
    "Fatima",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Kemal",
    "Lena",
    "Mateo",
    "Nora",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tara",
]
"""The first names the generator draws (a short list: each is many recipients')."""
_LAST = [
    "Smith",
    "Garcia",
    "Okafor",
    "Nguyen",
    "Müller",
    "Rossi",
    "Kowalski",
    "Tanaka",
    "Haddad",
    "Silva",
    "Novak",
    "Berg",
    "Moreau",
    "Ibrahim",
    "Lopez",
    "Kim",
]
_WORDS = [
    "alpha",
    "river",
    "stone",
    "maple",
    "cloud",
    "orbit",
    "velvet",
    "cedar",
    "harbor",
    "ember",
    "lantern",
    "meadow",
    "quartz",
    "summit",
    "willow",
    "copper",
    "falcon",
    "garnet",
    "horizon",
    "island",
    "jasmine",
]
_ITEMS = [
    "Ship's Cannon",
    "Telescope",
    "Rope (10 m)",
    "Compass",
    "Lantern",
    "Map of Tortuga",
    "Spyglass",
    "Anchor",
    "Parrot feed",
    "Sextant",
]


@dataclass(frozen=True)
class GeneratedValue:
    """One value the generator put into an email: the ground truth of field extraction."""

    name: str
    """The template variable's name (``price``, ``username``; ``item`` for a line item)."""
    value: str
    """The exact text inserted, as a reader sees it (after HTML unescaping)."""
    row: str = ""
    """"" outside any loop; else the loop iteration(s), unique within the email
    (``items#3``; nested ``orders#1/items#2``)."""
    constant: bool = False
    """A per-sender constant (site, brand, colour): layout text, not a field."""
    shown: bool | None = None
    """Whether this insertion reaches the email's visible text (not an attribute, a link's
    address, a style): `instantiate_values` renders the email a second time from the same
    draws with each value between marks and looks for them; None where it cannot tell
    (static and mailgen templates), leaving the figures to look for the value's text."""


@dataclass(frozen=True)
class LabeledEmail:
    """One email of the corpus with its ground-truth label."""

    email_id: str
    sender: str
    recipient: str
    subject: str
    html: str
    label: str
    noise: bool
    held_out: bool = False
    """A fresh instance: annotated only, never submitted."""
    values: tuple[GeneratedValue, ...] = ()
    """Every value the generator inserted, in order (empty for human emails)."""
    vertical: str = ""
    """The template's ground-truth vertical (`SourceTemplate.vertical`; "" for humans)."""
    package: str = ""
    """The registry package the template came from ("" for humans)."""


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(_LAST)}"


def _date(rng: random.Random, order: str) -> str:
    d, m, y = rng.randint(1, 28), rng.randint(1, 12), rng.randint(2023, 2026)
    return f"{d:02d}/{m:02d}/{y}" if order == "DMY" else f"{m:02d}/{d:02d}/{y}"


_CONSTANT = (
    "site", "app", "realm", "blog", "brand", "shop", "publication", "locale", "lang", "forum",
)  # fmt: skip


def _key(name: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower().strip("./ ")


def is_constant(name: str) -> bool:
    """Whether `value_for` gives `name` a per-sender constant rather than a personal value."""
    key = _key(name)
    return key.startswith(_CONSTANT) or any(w in key for w in ("color", "accent", "tint", "shade"))


def value_for(name: str, rng: random.Random, constants: dict[str, str], order: str) -> str:
    """A personal value for the template variable `name` (per-sender constants stay fixed)."""
    key = _key(name)
    if is_constant(name):
        return constants.setdefault(key, f"{rng.choice(_WORDS).title()} {key}")
    if "url" in key or "link" in key or key.endswith(("href", "path")):
        return f"https://mail.example/{rng.choice(_WORDS)}/{rng.randint(1000, 99999)}"
    if "email" in key:
        return f"{rng.choice(FIRST_NAMES).lower()}.{rng.randint(1, 999)}@mail.example"
    if "date" in key or key.endswith("_at") or key == "at":
        return _date(rng, order)
    if any(w in key for w in ("amount", "price", "total", "tax", "cost")):
        return f"${rng.randint(1, 500)}.{rng.randint(0, 99):02d}"
    if any(
        w in key
        for w in (
            "days",
            "count",
            "duration",
            "number",
            "milestone",
            "quantity",
            "index",
            "remaining",
            "lives",
            "expiration",
            "num",
        )
    ):
        return str(rng.randint(1, 400))
    if key in ("otp", "pin"):
        return f"{rng.randint(0, 999999):06d}"
    if any(w in key for w in ("code", "token", "sha", "commit", "hash")) or key == "id":
        return "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice((6, 8, 12))))
    if "name" in key or key in ("user", "doer", "editor", "username", "first", "last"):
        return _name(rng)
    if "title" in key or "subject" in key:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 6))).capitalize()
    if any(
        w in key
        for w in (
            "html",
            "message",
            "details",
            "text",
            "reason",
            "comment",
            "body",
            "content",
            "summary",
            "patch",
            "note",
        )
    ):
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))


_DIGIT_RUN = re.compile(r"(?<![\w@.])\(?\d(?:[\d\-.()/ ]*\d)?(?![\w@])")
_ROW_RUN = re.compile(r"((<tr>\s*(?:<td>[^<]*</td>\s*)+</tr>)\s*)(?:\2\s*)+")
_DIGITS = re.compile(r">([^<]*\d[^<]*)<")
_HIDDEN = re.compile(r"<(style|script)\b.*?</\1\s*>|<!--.*?-->", re.S | re.I)
_EMAIL = re.compile(r"[\w.]+@[\w.]+\.\w+")


def _shape(e: HtmlElement) -> str:
    return e.tag + "(" + ",".join(_shape(c) for c in e if isinstance(c.tag, str)) + ")"


def _sibling_runs(root: HtmlElement) -> list[list[HtmlElement]]:
    """Runs of >= 2 adjacent alike siblings (same element tree, >= 3 elements): the demo's
    repeated blocks (product columns, article cards, sidebar links, line items)."""
    runs = []
    for parent in root.iter():
        kids = [c for c in parent if isinstance(c.tag, str)]
        i = 0
        while i < len(kids):
            shape = _shape(kids[i])
            j = i
            while j + 1 < len(kids) and _shape(kids[j + 1]) == shape:
                j += 1
            if j > i and shape.count("(") >= 3:
                runs.append(kids[i : j + 1])
            i = j + 1
    return runs


def _repeat_runs(source: str, rng: random.Random, choices: Choices) -> str:
    """Every repeated block of a static demo repeated 1-`max_repeats` times."""
    root = lxml.html.document_fromstring(source)
    for run in _sibling_runs(root):
        want = rng.randint(1, choices.max_repeats)
        for extra in run[want:]:
            extra.drop_tree()
        last = run[min(want, len(run)) - 1]
        for _ in range(want - len(run)):
            clone = copy.deepcopy(rng.choice(run))
            last.addnext(clone)
            last = clone
    return lxml.html.tostring(root, encoding="unicode", doctype="<!DOCTYPE html>")


Record = Callable[[str, str, str], None]


def _static(source: str, rng: random.Random, choices: Choices, record: Record) -> str:
    """Foundation's compiled demos: repeated blocks and line items, personal values, one
    optional paragraph. Each inserted value is recorded: a line item's cells (one row
    each), an email address, a greeting's name, a text node whose digits were redrawn."""
    source = _repeat_runs(source, rng, choices)
    found: list[tuple[str, str, str]] = []
    kept: set[str] = set()  # inserted texts the digit pass leaves alone
    row_count = 0

    def rows(_: re.Match[str]) -> str:
        nonlocal row_count
        out = []
        for _row in range(rng.randint(1, choices.max_repeats)):
            item, qty, price = rng.choice(_ITEMS), rng.randint(1, 9), rng.randint(5, 900)
            row_count += 1
            row = f"items#{row_count}"
            found.extend([("item", item, row), ("qty", str(qty), row), ("price", f"${price}", row)])
            kept.update((str(qty), f"${price}"))
            out.append(f"<tr><td>{item}</td><td>{qty}</td><td>${price}</td></tr>\n")
        return "".join(out)

    html = _ROW_RUN.sub(rows, source)

    def email(_: re.Match[str]) -> str:
        got = f"{rng.choice(FIRST_NAMES).lower()}{rng.randint(1, 999)}@mail.example"
        found.append(("email", got, ""))
        kept.add(got)
        return got

    html = _EMAIL.sub(email, html)

    def digits(m: re.Match[str]) -> str:
        if m.group(1) in kept or any(k in m.group(1) for k in kept if "@" in k):
            return m.group(0)
        text = re.sub(r"\d", lambda _: str(rng.randint(0, 9)), m.group(1))
        if any(a <= m.start() < b for a, b in hidden):
            return f">{text}<"  # a stylesheet's digits: redrawn, but no value a reader sees
        # The values are the redrawn digit runs (a phone number, a postcode), not the text
        # around them, which every instance shares.
        shown = html_lib.unescape(text)
        for m_run in _DIGIT_RUN.finditer(shown):
            run = m_run.group()
            if run.startswith("(") and ")" not in run:
                run = run[1:]  # "(75 m)": the bracket opens the text, not the number
            elif m_run.start() and shown[m_run.start() - 1] in "$€£":
                run = shown[m_run.start() - 1] + run  # "$658" is an amount, not "658"
            found.append(("number", run, ""))
        return f">{text}<"

    hidden = [m.span() for m in _HIDDEN.finditer(html)]
    html = _DIGITS.sub(digits, html)

    def greeting(m: re.Match[str]) -> str:
        name = _name(rng)
        found.append(("name", name, ""))
        return f"{m.group(1)}, {name}"

    html = re.sub(r"(Hi|Hello|Dear),?\s+[A-Z][a-z]+(\s[A-Z][a-z]+)?", greeting, html)
    paragraphs = [m.span() for m in re.finditer(r"<p>[^<]{40,}</p>", html)]
    if paragraphs and rng.random() > choices.optional:
        a, b = rng.choice(paragraphs)
        html = html[:a] + html[b:]
    final = html_lib.unescape(html)  # a value dropped or overwritten since is not there
    for name, value, row in found:
        if value and value in final:
            record(name, value, row)
    return html


def instantiate(
    t: SourceTemplate,
    rng: random.Random,
    constants: dict[str, str],
    order: str,
    choices: Choices | None = None,
) -> str:
    """One email of template `t`: its values, repeats and optional blocks drawn from `rng`."""
    return instantiate_values(t, rng, constants, order, choices)[0]


class _Recorder:
    """Collects the values a generator inserts, as `GeneratedValue`s."""

    def __init__(self) -> None:
        self.values: list[GeneratedValue] = []

    def __call__(self, name: str, value: str, row: str, constant: bool | None = None) -> None:
        flag = is_constant(name) if constant is None else constant
        self.values.append(GeneratedValue(name, value, row, flag))


def instantiate_values(
    t: SourceTemplate,
    rng: random.Random,
    constants: dict[str, str],
    order: str,
    choices: Choices | None = None,
) -> tuple[str, tuple[GeneratedValue, ...]]:
    """`instantiate`, with every value it inserted (the ground truth of field extraction)."""
    choices = choices or Choices()
    record = _Recorder()
    if t.syntax == "static":
        html = _static(t.source, rng, choices, record)
    elif t.syntax == "mailgen":
        spec = _mailgen_input(t, rng, constants, order, choices, record)
        html = render_mailgen([spec], t.files["node_modules"])[0]
    else:
        twin = copy.copy(rng)  # the same draws, for `_shown`
        html = render(t.source, t.syntax, _context(t, rng, constants, order, choices, record))
        return html, _shown(t, twin, constants, order, choices, record.values)
    return html, tuple(record.values)


_OPEN, _SEP, _CLOSE = "\ue000", "\ue002", "\ue001"
"""Private-use marks around every insertion in `_shown`'s rendering, numbered (no template
holds them): ``\ue000`` number ``\ue002`` value ``\ue001``."""
_MARKED = re.compile("\ue000(\\d+)\ue002[^\ue000\ue001]*\ue001")
_MARK = re.compile("\ue000(\\d+)\ue002|\ue001")


def _shown(
    t: SourceTemplate,
    twin: random.Random,
    constants: dict[str, str],
    order: str,
    choices: Choices,
    values: list[GeneratedValue],
) -> tuple[GeneratedValue, ...]:
    """`values` with `shown` set: the email rendered again from the same draws (`twin`),
    each drawn value between numbered marks; an insertion whose marks reach the visible
    text is shown. A word that lands only in an attribute (an image's ``src``, a width)
    but also occurs in the prose by chance is then not taken for a visible value, nor is a
    value inserted once in an attribute and once in the text, in the attribute. Where the
    second rendering inserts other values (it should not), nothing is set."""
    marks = _Recorder()
    drawn = itertools.count()
    ctx = RenderContext(
        twin,
        lambda name: f"{_OPEN}{next(drawn)}{_SEP}{value_for(name, twin, constants, order)}{_CLOSE}",
        t.files,
        t.messages,
        choices,
        marks,
    )
    marked = render(t.source, t.syntax, ctx)
    again = [(v.name, _MARK.sub("", v.value), v.row) for v in marks.values]
    if again != [(v.name, v.value, v.row) for v in values]:
        return tuple(values)
    try:
        root = lxml.html.fromstring(marked)
    except (lxml.etree.ParserError, ValueError):
        return tuple(values)
    for hidden in root.xpath("//head|//script|//style|//noscript|//template|//title"):
        hidden.drop_tree()
    visible = set(_MARKED.findall(html_lib.unescape(" ".join(root.itertext()))))
    return tuple(
        dataclasses.replace(v, shown=(m := _MARK.match(w.value)) is not None and m[1] in visible)
        for v, w in zip(values, marks.values, strict=True)
    )


def _context(
    t: SourceTemplate,
    rng: random.Random,
    constants: dict[str, str],
    order: str,
    choices: Choices,
    record: Record | None,
) -> RenderContext:
    return RenderContext(
        rng,
        lambda name: value_for(name, rng, constants, order),
        t.files,
        t.messages,
        choices,
        record,
    )


def _mailgen_input(
    t: SourceTemplate,
    rng: random.Random,
    constants: dict[str, str],
    order: str,
    c: Choices,
    record: Record | None = None,
) -> dict[str, Any]:
    return instantiate_mailgen(
        t, rng, lambda n: value_for(n, rng, constants, order), c.optional, record
    )


SUBJECT_MODES = ("name", "real", "sender")


def _subject(t: SourceTemplate, rng: random.Random) -> str:
    words = t.name.rsplit("/", 1)[-1].replace("-", " ").replace("_", " ")
    personal = rng.choice(("", f" for {_name(rng)}", f" #{rng.randint(10000, 99999)}"))
    return f"{words.capitalize()}{personal}"


def subject_for(
    t: SourceTemplate,
    rng: random.Random,
    mode: str,
    constants: dict[str, str],
    order: str,
    choices: Choices | None = None,
) -> str:
    """An email's subject line. ``name``: the template's file name and a personal part
    (gives the template away); ``real``: the template's real subject, rendered with
    personal values (a generic one of its sender's when the source has none);
    ``sender``: the same text for every email of the sender, with personal values."""
    if mode == "name":
        return _subject(t, rng)
    brand = value_for("brand", rng, constants, order)
    if mode == "real" and t.subject:
        syntax = "django" if t.syntax in ("static", "mailgen") else t.syntax
        ctx = _context(t, rng, constants, order, choices or Choices(), None)
        text = html_lib.unescape(re.sub(r"<[^>]+>", "", render(t.subject, syntax, ctx)))
        text = " ".join(text.split())
        if text:
            return text
    if mode == "real":
        personal = rng.choice(("", f" for {_name(rng)}", f" #{rng.randint(10000, 99999)}"))
        return f"News from {brand}{personal}"
    if mode == "sender":
        return f"Notification from {brand} for {_name(rng)}"
    raise ValueError(f"subjects must be one of {SUBJECT_MODES}, not {mode!r}")


def human_email(rng: random.Random, sender: str) -> tuple[str, str]:
    """(subject, html) of a one-off human email in a webmail client's markup."""
    style = rng.randrange(3)
    lines = [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 14))).capitalize() + "."
        for _ in range(rng.randint(1, 6))
    ]
    greet = f"Hi {rng.choice(FIRST_NAMES)},"
    if style == 0:
        body = "".join(f"<div>{line}</div>" for line in lines)
        html = f'<div dir="ltr"><div>{greet}</div><div><br></div>{body}<div><br></div><div>{sender}</div></div>'
    elif style == 1:
        body = "".join(f'<p class="MsoNormal">{line}</p>' for line in lines)
        html = f"<html><body><div class=WordSection1><p>{greet}</p>{body}</div></body></html>"
    else:
        html = f"<div>{greet}<br><br>{'<br>'.join(lines)}<br><br>-- <br>{sender}</div>"
    return " ".join(rng.choice(_WORDS) for _ in range(3)).capitalize(), html


def real_templates() -> list[SourceTemplate]:
    """Every real template: the registries' (`email_sources`) and mailgen's vendors."""
    return ensure_sources() + mailgen_sources()


def describe(t: SourceTemplate) -> tuple[bool, bool]:
    """(has repeated blocks, has optional blocks) of a template, from its source."""
    s = t.source + "".join(
        t.files.get(n, "") for n in re.findall(r"""['"]([\w/.-]+\.html)['"]""", t.source)
    )
    if t.syntax == "static":
        runs = _sibling_runs(lxml.html.document_fromstring(s))
        return bool(runs or _ROW_RUN.search(s)), bool(re.search(r"<p>[^<]{40,}</p>", s))
    if t.syntax == "mailgen":
        spec = json.loads(t.source)
        optional = spec.get("intro_optional") or spec.get("outro_optional") or "dictionary" in spec
        return "table" in spec, bool(optional or spec.get("action", {}).get("optional"))
    found = constructs(t.source, t.syntax, t.files)
    return "loop" in found, "if" in found


def build_corpus(
    sources: list[SourceTemplate],
    *,
    per_template: int = 25,
    fresh: int = 8,
    humans: int = 150,
    users: int = 5000,
    seed: int = 7,
    choices: Choices | None = None,
    subjects: str = "name",
) -> list[LabeledEmail]:
    """The labelled corpus: shuffled training emails (templates and humans), then the
    held-out instances (``held_out=True``) and as many fresh human emails.

    `subjects` (`subject_for`): ``name`` (from the template's file name, the default),
    ``real`` (the source's own subject line) or ``sender`` (one text per sender). Values
    that are per-sender constants (site, brand) are shared by all templates of a sender.
    """
    if subjects not in SUBJECT_MODES:
        raise ValueError(f"subjects must be one of {SUBJECT_MODES}, not {subjects!r}")
    rng = random.Random(seed)
    train: list[LabeledEmail] = []
    held: list[LabeledEmail] = []
    generated: list[tuple[list[LabeledEmail], int, dict[str, Any]]] = []
    modules = ""
    by_sender: dict[str, dict[str, str]] = {}
    for index, t in enumerate(sources):
        constants = by_sender.setdefault(t.sender, {})
        order = "DMY" if index % 2 else "MDY"
        recipients = rng.sample(range(users), per_template + fresh)
        for n, user in enumerate(recipients):
            into = held if n >= per_template else train
            if t.syntax == "mailgen":  # rendered below, all in one Node process
                html, modules = "", t.files["node_modules"]
                record = _Recorder()
                spec = _mailgen_input(t, rng, constants, order, choices or Choices(), record)
                generated.append((into, len(into), spec))
                values = tuple(record.values)
            else:
                html, values = instantiate_values(t, rng, constants, order, choices)
            into.append(
                LabeledEmail(
                    f"{t.label}/{n}",
                    t.sender,
                    f"user{user}",
                    subject_for(t, rng, subjects, constants, order, choices),
                    html,
                    t.label,
                    False,
                    n >= per_template,
                    values,
                    t.vertical,
                    t.package,
                )
            )
    person = 0
    for wanted, out, held_out in ((humans, train, False), (fresh * 4, held, True)):
        made = 0
        while made < wanted:  # one person writes to 1-3 people: never k recipients
            person += 1
            sender = f"{rng.choice(FIRST_NAMES).lower()}.{rng.choice(_LAST).lower()}{person}@mail.example"
            for _ in range(min(rng.randint(1, 3), wanted - made)):
                subject, html = human_email(rng, sender)
                out.append(
                    LabeledEmail(
                        f"human/{person}/{made}",
                        sender,
                        f"user{rng.randrange(users)}",
                        subject,
                        html,
                        f"human/{person}/{made}",
                        True,
                        held_out,
                    )
                )
                made += 1
    for (into, at, _), html in zip(
        generated, render_mailgen([spec for _, _, spec in generated], modules), strict=True
    ):
        into[at] = dataclasses.replace(into[at], html=html)
    rng.shuffle(train)
    return train + held
