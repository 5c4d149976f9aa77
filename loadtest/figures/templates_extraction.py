"""TemplateInduction's extraction figures: annotated emails against the values put into them.

Pure arithmetic over plain tuples (no corpus, no server import), one `Annotated` per
annotated email: its source, the values its generator put into it, the true and returned
vertical, the returned fields and rows (and fixed text). Per source (`by_source`):

- ``inside``    non-constant generated values found inside some returned field (or row field)
- ``whole``     ... found as some field's whole value (both stripped of space and of
                sentence punctuation around them: ``orbit stone.`` is ``orbit stone``)
- ``money``     generated money values returned as type ``money`` whose normalized amount
                is the generated amount (a field holding the value)
- ``dates``     generated dates returned as type ``date`` normalised to the generated day
                (a field holding the value; a date whose day the string alone cannot tell,
                ``01/02/2026``, counts only when its ISO day is given)
- ``rows``      values of repeated blocks (row id not "") found in a returned row all of
                whose values come from that same generated row (its outermost repetition,
                for a block nested in another)
- ``vertical``  emails whose returned vertical is the true one
- ``invisible``  generated values the email's visible text does not hold (a link's address),
                or whose insertion the generator knows went elsewhere (``shown`` False: an
                image's ``src`` whose word the prose also holds by chance): not counted in
                the shares above, since no text field can return them
- ``personal_in_fixed``  (email, non-constant value not known to be hidden) pairs whose
                value appears in the returned fixed text (values of 4+ characters as words
                of it, shorter ones as a whole fixed text) that fewer than k recipients'
                training emails of the template held: must be 0
- ``shared_in_fixed``  the same pairs for values k recipients or more held (`k_shared`: a
                project name every watcher of the project gets): k-anonymous, so the
                service's rule lets fixed text hold them; counted apart, not a leak

Values the visible text shows glued, nothing between them (``{{ base_url }}{{ path }}``, an
avatar helper's text before a title), are one value to a reader and to any extractor: the
shares above count their concatenation once, as one value (each part 3+ characters).

A share is None when nothing was there to count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "Annotated",
    "ExtractionFigures",
    "Field",
    "Generated",
    "by_source",
    "date_iso",
    "figures",
    "k_shared",
    "money_amount",
    "worst",
]

Field = tuple[str, str, str, str]
"""A returned field: (label, value, type, normalized)."""


class Generated(NamedTuple):
    """A value the generator put into an email."""

    name: str
    value: str
    row: str = ""
    """The generated row (repetition) it belongs to; "" outside repeated blocks."""
    constant: bool = False
    """The same in every email of its template (not a value a field should return)."""
    iso: str = ""
    """A date's true day (YYYY-MM-DD) when known; else read from `value` if unambiguous."""
    shown: bool | None = None
    """Whether the generator's insertion reaches the visible text (False: an attribute, a
    link's address, even where the same word also occurs in the prose); None: unknown,
    the visible text holding the value's text decides."""


class Annotated(NamedTuple):
    """One annotated email (plain tuples are accepted in this order)."""

    source: str
    generated: Sequence[tuple[str, str, str, bool] | Generated]
    true_vertical: str
    vertical: str
    fields: Sequence[Field]
    rows: Sequence[Sequence[Field]] = ()
    fixed_text: Sequence[str] = ()
    text: str = ""
    """The email's visible text (its text nodes); when given, a generated value it does not
    hold (a link's address, an attribute) is not counted: no text field can return it."""
    shared: frozenset[str] = frozenset()
    """Values the template's training emails of at least k distinct recipients held
    (`k_shared`): fixed text by the service's rule when every email has them, so one found
    in the fixed text is counted apart (`shared_in_fixed`), not as personal."""


@dataclass(frozen=True)
class ExtractionFigures:
    """One source's counts and shares (see the module)."""

    source: str
    emails: int
    values: int
    inside: float | None
    whole: float | None
    money_values: int
    money: float | None
    date_values: int
    dates: float | None
    row_values: int
    rows: float | None
    vertical: float | None
    personal_in_fixed: int
    """Generated values found in the template's fixed text that fewer than k recipients'
    training emails held: what k-anonymity forbids."""
    invisible: int = 0
    """Generated values not in the email's visible text (not counted above)."""
    shared_in_fixed: int = 0
    """Generated values found in the fixed text that k recipients or more held (a project
    name every recipient of a notification shares): k-anonymous, so fixed text is allowed
    to hold them."""


_MONEY = re.compile(r"^-?(?:[$€£¥]\s?-?\d|(?:USD|EUR|GBP)\s?\d)|\d\s?(?:USD|EUR|GBP|[$€£])$")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_ISO = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_WORD = re.compile(
    r"\b(?:(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]{3})[a-z]*\.?,?\s+(\d{4})"
    r"|([A-Za-z]{3})[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4}))\b"
)
_NUMERIC = re.compile(r"\b(\d{1,2})[/.\-](\d{1,2})[/.\-](\d{4})\b")


def money_amount(text: str) -> float | None:
    """The amount of a money string (``$1,234.50``, ``12,50 €``), None when none."""
    digits = re.sub(r"[^\d.,\-]", "", text)
    if re.search(r",\d{2}$", digits) and "." not in digits:  # a decimal comma
        digits = digits.replace(".", "").replace(",", ".")
    digits = digits.replace(",", "")
    try:
        return float(digits)
    except ValueError:
        return None


def date_iso(text: str) -> str:
    """The day an unambiguous date string names (YYYY-MM-DD), "" when it cannot tell."""
    if m := _ISO.search(text):
        return m.group(0)
    if m := _WORD.search(text):
        day, mon, year = (m[1], m[2], m[3]) if m[1] else (m[5], m[4], m[6])
        if mon.lower() in _MONTHS:
            return f"{int(year):04d}-{_MONTHS.index(mon.lower()) + 1:02d}-{int(day):02d}"
        return ""
    if m := _NUMERIC.search(text):
        a, b, year = int(m[1]), int(m[2]), int(m[3])
        if a > 12 >= b:
            return f"{year:04d}-{b:02d}-{a:02d}"
        if b > 12 >= a:
            return f"{year:04d}-{a:02d}-{b:02d}"
    return ""


def _share(hit: int, total: int) -> float | None:
    return hit / total if total else None


def _gen(g: tuple[str, str, str, bool] | Generated) -> Generated:
    return g if isinstance(g, Generated) else Generated(*g)


def _outer(row: str) -> str:
    """The outermost repetition of a generated row (``comments#2/replies#1`` ->
    ``comments#2``): a returned row is one repetition of the outer block, holding its inner
    block's values too."""
    return row.split("/", 1)[0]


def _bare(value: str) -> str:
    """A value without surrounding space and sentence punctuation: a generated sentence's
    closing full stop is the template's fixed text as much as the value's."""
    return " ".join(value.split()).strip(".,;:!? ")


def _from_row(value: str, row_values: Sequence[str]) -> bool:
    v = value.strip()
    return bool(v) and any(v in g or g in v for g in row_values)


_GLUE_MIN = 3
"""The least length of each part of glued values (shorter ones meet by chance)."""


def _glued(gens: list[Generated], visible: str) -> list[Generated]:
    """`gens` with every pair the visible text shows glued (``ab``, nothing between)
    replaced by one value, their concatenation, until no pair is left (module doc)."""
    out = [g for g in gens if g.shown is not False]
    hidden = [g for g in gens if g.shown is False]
    while True:
        texts = [" ".join(g.value.split()) for g in out]
        pair = next(
            (
                (i, j)
                for i, a in enumerate(texts)
                if len(a) >= _GLUE_MIN and a in visible
                for j, b in enumerate(texts)
                if i != j and len(b) >= _GLUE_MIN and a + b in visible
            ),
            None,
        )
        if pair is None:
            return out + hidden
        i, j = pair
        a, b = out[i], out[j]
        joined = Generated(
            f"{a.name}+{b.name}",
            texts[i] + texts[j],
            a.row or b.row,
            a.constant and b.constant,
            shown=None if a.shown is None and b.shown is None else True,
        )
        out = [g for k, g in enumerate(out) if k not in pair] + [joined]


def _holds(fixed: str, value: str) -> bool:
    """Whether a fixed text holds a value: a value of 4+ characters as words of it (not
    ``ember`` inside ``member``), a shorter one as the whole text."""
    if len(value) < 4:
        return value == fixed.strip()
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", fixed) is not None


def figures(source: str, emails: Sequence[Annotated]) -> ExtractionFigures:
    """The figures of one source's annotated emails."""
    values = inside = whole = money_n = money_ok = dates_n = dates_ok = invisible = 0
    rows_n = rows_ok = vertical_ok = personal = shared = 0
    for e in emails:
        vertical_ok += e.vertical == e.true_vertical
        all_fields = [*e.fields, *(f for row in e.rows for f in row)]
        gens = [_gen(g) for g in e.generated]
        by_row: dict[str, list[str]] = {}  # by outermost repetition
        for g in gens:
            if g.row and g.value.strip():
                by_row.setdefault(_outer(g.row), []).append(g.value.strip())
        visible = " ".join(e.text.split())
        for g in gens:
            v = " ".join(g.value.split())
            if not g.constant and v and g.shown is not False:
                fixed = any(_holds(t, v) for t in e.fixed_text)
                if v in e.shared:
                    shared += fixed
                else:
                    personal += fixed
        for g in _glued(gens, visible) if visible else gens:
            v = " ".join(g.value.split())
            if g.constant or not v:
                continue
            if g.shown is False or (visible and v not in visible):
                invisible += 1
                continue
            values += 1
            bare = _bare(v)
            holding = [f for f in all_fields if bare in f[1]]
            inside += bool(holding)
            whole += any(_bare(f[1]) == bare for f in all_fields)
            if _MONEY.search(v):
                money_n += 1
                amount = money_amount(v)
                money_ok += any(
                    f[2] == "money" and amount is not None and money_amount(f[3]) == amount
                    for f in holding
                )
            else:
                iso = g.iso or date_iso(v)
                if iso:
                    dates_n += 1
                    dates_ok += any(f[2] == "date" and f[3] == iso for f in holding)
            if g.row:
                rows_n += 1
                mates = by_row[_outer(g.row)]
                rows_ok += any(
                    any(bare in f[1] for f in row) and all(_from_row(f[1], mates) for f in row)
                    for row in e.rows
                )
    return ExtractionFigures(
        source=source,
        emails=len(emails),
        values=values,
        inside=_share(inside, values),
        whole=_share(whole, values),
        money_values=money_n,
        money=_share(money_ok, money_n),
        date_values=dates_n,
        dates=_share(dates_ok, dates_n),
        row_values=rows_n,
        rows=_share(rows_ok, rows_n),
        vertical=_share(vertical_ok, len(emails)),
        personal_in_fixed=personal,
        invisible=invisible,
        shared_in_fixed=shared,
    )


def k_shared(emails: Iterable[Any], k: int) -> dict[str, frozenset[str]]:
    """Per template label, the generated values (spaces collapsed) that the emails of at
    least `k` distinct recipients held; `emails` have ``label``, ``recipient`` and
    ``values`` (`loadtest.corpora.email_model.LabeledEmail`)."""
    holders: dict[str, dict[str, set[str]]] = {}
    for e in emails:
        mine = holders.setdefault(e.label, {})
        for v in e.values:
            mine.setdefault(" ".join(v.value.split()), set()).add(e.recipient)
    return {
        label: frozenset(v for v, who in got.items() if v and len(who) >= k)
        for label, got in holders.items()
    }


def by_source(emails: Iterable[Annotated | tuple]) -> list[ExtractionFigures]:  # type: ignore[type-arg]
    """Each source's figures, sources in name order."""
    grouped: dict[str, list[Annotated]] = {}
    for e in emails:
        a = e if isinstance(e, Annotated) else Annotated(*e)
        grouped.setdefault(a.source, []).append(a)
    return [figures(s, grouped[s]) for s in sorted(grouped)]


def worst(per_source: Sequence[ExtractionFigures], name: str) -> float | None:
    """The lowest share `name` (``whole``, ``money``…) over the sources that have one."""
    got = [v for f in per_source if (v := getattr(f, name)) is not None]
    return min(got) if got else None
