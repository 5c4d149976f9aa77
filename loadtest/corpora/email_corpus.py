"""The clustering-quality corpus: real templates instantiated as real emails, plus noise.

Each real template (`email_sources`) becomes `per_template` emails to distinct recipients:

- Handlebars sources (Ghost): a small renderer fills every ``{{value}}`` with a personal
  value typed by its name (names, emails, URLs, amounts, dates, titles), repeats every
  ``{{#each}}`` block 1-8 times (line items), keeps or drops every ``{{#if}}`` block at
  random (optional blocks), inlines partials and keeps ``{{t '…'}}`` literals.
- Static HTML (Foundation's compiled demos): runs of identical table rows become 1-8 rows
  of random items, digits, amounts and e-mail addresses in text become personal values,
  and one paragraph is dropped at random (an optional block).

Then noise that must never form a template: one-off human emails (webmail-style HTML, one
person writing to 1-3 people, fewer than k) and structurally near-identical pairs: a
template and a copy with one block changed, sent as two different templates. Ground
truth: an email's label is its template (``family/name``), or unique for noise.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from loadtest.corpora.email_sources import SourceTemplate

__all__ = ["LabeledEmail", "build_corpus", "human_email", "render_handlebars"]

_FIRST = [
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
class LabeledEmail:
    """One email of the corpus with its ground-truth label."""

    email_id: str
    sender: str
    recipient: str
    subject: str
    html: str
    label: str
    noise: bool


def _name(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def _date(rng: random.Random, order: str) -> str:
    d, m, y = rng.randint(1, 28), rng.randint(1, 12), rng.randint(2023, 2026)
    return f"{d:02d}/{m:02d}/{y}" if order == "DMY" else f"{m:02d}/{d:02d}/{y}"


def _value(name: str, rng: random.Random, constants: dict[str, str], order: str) -> str:
    """A personal value for the template variable `name` (per-vendor constants stay fixed)."""
    key = name.rsplit(".", maxsplit=1)[-1].lower().strip("./ ")
    if (
        key.startswith("site")
        or "color" in key
        or "accent" in key
        or "tint" in key
        or "shade" in key
    ):
        return constants.setdefault(key, f"{rng.choice(_WORDS).title()} {key}")
    if "url" in key or "link" in key:
        return f"https://ghost-blog.example/{rng.choice(_WORDS)}/{rng.randint(1000, 99999)}"
    if "email" in key:
        return f"{rng.choice(_FIRST).lower()}.{rng.randint(1, 999)}@mail.example"
    if "date" in key or key.endswith("at"):
        return _date(rng, order)
    if "amount" in key or "price" in key or "total" in key:
        return f"${rng.randint(1, 500)}.{rng.randint(0, 99):02d}"
    if any(w in key for w in ("days", "count", "duration", "number", "milestone")):
        return str(rng.randint(1, 400))
    if "name" in key:
        return _name(rng)
    if "title" in key:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 6))).capitalize()
    if any(w in key for w in ("html", "message", "details", "text", "reason", "comment")):
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))


_TAG = re.compile(r"\{\{\{?(.*?)\}?\}\}", re.DOTALL)


def render_handlebars(
    source: str, partials: dict[str, str], rng: random.Random, constants: dict[str, str], order: str
) -> str:
    """A Handlebars template instantiated: values, 1-8 each-items, random optional blocks."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    for m in _TAG.finditer(source):
        tokens.append(("text", source[pos : m.start()]))
        tokens.append(("tag", m.group(1).strip()))
        pos = m.end()
    tokens.append(("text", source[pos:]))

    def block(i: int, depth: int) -> tuple[str, int, str]:
        """Renders tokens from i until a closing/else tag at this level; returns it too."""
        out: list[str] = []
        while i < len(tokens):
            kind, value = tokens[i]
            i += 1
            if kind == "text":
                out.append(value)
                continue
            if value.startswith("/") or value == "else" or value.startswith("else "):
                return "".join(out), i, value
            if value.startswith("!"):
                continue
            if value.startswith("#"):
                head = value[1:].lstrip("*> ").split()
                helper = head[0] if head else ""
                start = i
                body, i, end = block(i, depth + 1)
                alt = ""
                if end.startswith("else"):
                    alt, i, _ = block(i, depth + 1)
                if helper in ("if", "unless", "has"):
                    out.append(body if rng.random() < 0.6 else alt)
                elif helper in ("each", "foreach"):
                    items = [body] + [block(start, depth + 1)[0] for _ in range(rng.randint(0, 7))]
                    out.append("".join(items))
                else:  # partial blocks, inline definitions, with: their body, once
                    out.append(body)
                continue
            if value.startswith(">"):
                name = value[1:].strip().split()[0].strip("'\"")
                if depth < 4 and name in partials:
                    out.append(render_handlebars(partials[name], partials, rng, constants, order))
                continue
            literal = re.match(r"""t\s+(['"])(.*?)(?<!\\)\1""", value, re.DOTALL)
            if literal:
                text = literal.group(2).replace("\\'", "'")
                out.append(
                    re.sub(r"\{(\w+)\}", lambda g: _value(g.group(1), rng, constants, order), text)
                )
                continue
            name = value.split()[-1] if value.split() else value
            out.append(_value(name, rng, constants, order))
        return "".join(out), i, ""

    return block(0, 0)[0]


_ROW_RUN = re.compile(r"((<tr>\s*(?:<td>[^<]*</td>\s*)+</tr>)\s*)(?:\2\s*)+")
_DIGITS = re.compile(r">([^<]*\d[^<]*)<")
_EMAIL = re.compile(r"[\w.]+@[\w.]+\.\w+")


def _static(source: str, rng: random.Random, order: str) -> str:
    """Foundation's compiled demos: line items, personal values, one optional paragraph."""

    def rows(m: re.Match[str]) -> str:
        out = []
        for _ in range(rng.randint(1, 8)):
            item, qty, price = rng.choice(_ITEMS), rng.randint(1, 9), rng.randint(5, 900)
            out.append(f"<tr><td>{item}</td><td>{qty}</td><td>${price}</td></tr>\n")
        return "".join(out)

    html = _ROW_RUN.sub(rows, source)
    html = _EMAIL.sub(
        lambda _: f"{rng.choice(_FIRST).lower()}{rng.randint(1, 999)}@mail.example", html
    )

    def digits(m: re.Match[str]) -> str:
        text = re.sub(r"\d", lambda _: str(rng.randint(0, 9)), m.group(1))
        return f">{text}<"

    html = _DIGITS.sub(digits, html)
    html = re.sub(
        r"(Hi|Hello|Dear),?\s+[A-Z][a-z]+(\s[A-Z][a-z]+)?",
        lambda m: f"{m.group(1)}, {_name(rng)}",
        html,
    )
    paragraphs = [m.span() for m in re.finditer(r"<p>[^<]{40,}</p>", html)]
    if paragraphs and rng.random() < 0.4:
        a, b = rng.choice(paragraphs)
        html = html[:a] + html[b:]
    return html


def _subject(t: SourceTemplate, rng: random.Random) -> str:
    words = t.name.replace("-", " ").replace("_", " ")
    personal = rng.choice(("", f" for {_name(rng)}", f" #{rng.randint(10000, 99999)}"))
    return f"{words.capitalize()}{personal}"


def human_email(rng: random.Random, sender: str) -> tuple[str, str]:
    """(subject, html) of a one-off human email in a webmail client's markup."""
    style = rng.randrange(3)
    lines = [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 14))).capitalize() + "."
        for _ in range(rng.randint(1, 6))
    ]
    greet = f"Hi {rng.choice(_FIRST)},"
    if style == 0:
        body = "".join(f"<div>{line}</div>" for line in lines)
        html = f'<div dir="ltr"><div>{greet}</div><div><br></div>{body}<div><br></div><div>{sender}</div></div>'
    elif style == 1:
        body = "".join(f'<p class="MsoNormal">{line}</p>' for line in lines)
        html = f"<html><body><div class=WordSection1><p>{greet}</p>{body}</div></body></html>"
    else:
        html = f"<div>{greet}<br><br>{'<br>'.join(lines)}<br><br>-- <br>{sender}</div>"
    return " ".join(rng.choice(_WORDS) for _ in range(3)).capitalize(), html


def build_corpus(
    sources: list[SourceTemplate],
    *,
    per_template: int = 30,
    humans: int = 60,
    users: int = 5000,
    seed: int = 7,
) -> list[LabeledEmail]:
    """The labelled, shuffled corpus (recipients distinct within each template)."""
    rng = random.Random(seed)
    out: list[LabeledEmail] = []
    pairs = [s for s in sources if s.family.startswith("ghost")][:2]
    variants: list[tuple[SourceTemplate, str]] = [(s, "") for s in sources]
    for s in pairs:  # near-identical twins: the same template with one block added
        twin = s.source.replace(
            "</body>",
            "<table><tr><td><p>{{t 'Questions? Reply to this email.'}}</p></td></tr></table></body>",
            1,
        )
        variants.append(
            (SourceTemplate(s.family, s.name + "-twin", s.sender, twin, s.partials), "twin")
        )
    for index, (t, _) in enumerate(variants):
        constants: dict[str, str] = {}
        order = "DMY" if index % 2 else "MDY"
        recipients = rng.sample(range(users), per_template)
        for n, user in enumerate(recipients):
            if t.source.lstrip().startswith("<!DOCTYPE") and "{{" not in t.source:
                html = _static(t.source, rng, order)
            else:
                html = render_handlebars(t.source, t.partials, rng, constants, order)
            out.append(
                LabeledEmail(
                    f"{t.family}/{t.name}/{n}",
                    t.sender,
                    f"user{user}",
                    _subject(t, rng),
                    html,
                    f"{t.family}/{t.name}",
                    False,
                )
            )
    for h in range(humans):
        person = f"{rng.choice(_FIRST).lower()}.{rng.choice(_LAST).lower()}{h}@mail.example"
        for n in range(rng.randint(1, 3)):
            subject, html = human_email(rng, person)
            out.append(
                LabeledEmail(
                    f"human/{h}/{n}",
                    person,
                    f"user{rng.randrange(users)}",
                    subject,
                    html,
                    f"human/{h}/{n}",
                    True,
                )
            )
    rng.shuffle(out)
    return out
