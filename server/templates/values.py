"""Typing and normalising field values: the generic annotations formation and annotation share.

The paper's field classifiers "utilize generic annotations, such as dates, times, and
addresses to focus on promising XPaths"; these are those generic annotations, as rules:
a value is a date, money, a telephone number, a number, an id (order / tracking /
confirmation), a URL, an email address, a person's name, or text. Dates: ``1/2/2019`` is
ambiguous, so a template learns its day/month order from its unambiguous dates
(`date_order`) and applies it here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from server.templates.spans import PHONE

__all__ = ["DATE_ORDERS", "classify", "date_order", "normalize"]

DATE_ORDERS = ("DMY", "MDY")

_NUMERIC_DATE = re.compile(r"\b(\d{1,2})([/.\-])(\d{1,2})\2(\d{4}|\d{2})\b")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    )
}
_WORD_DATE = re.compile(
    r"\b(?:(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]{3})[a-z]*\.?,?\s+(\d{4})"
    r"|([A-Za-z]{3})[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4}))\b"
)
_MONEY = re.compile(
    r"^(?:[$€£¥]\s?-?[\d,]+(?:\.\d{1,2})?|-?[\d,]+(?:\.\d{1,2})?\s?(?:USD|EUR|GBP|[$€£]))$"
)
_PHONE = re.compile(rf"^(?:{PHONE})$")
_NUMBER = re.compile(r"^-?\d[\d,]*(?:\.\d+)?$")
_ID = re.compile(r"^#?(?=[A-Z0-9\-]*\d)[A-Z0-9][A-Z0-9\-]{5,39}$", re.IGNORECASE)
_URL = re.compile(r"^(?:https?://|www\.)\S+$", re.IGNORECASE)
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
_NAME = re.compile(r"^(?:[A-Z][a-z'\-]+)(?:\s[A-Z][a-z'\-]+){1,2}$")


def _numeric_date(text: str) -> tuple[int, int, int] | None:
    m = _NUMERIC_DATE.search(text)
    if m is None:
        return None
    a, b, year = int(m.group(1)), int(m.group(3)), int(m.group(4))
    return a, b, year + 2000 if year < 100 else year


def classify(value: str) -> str:  # noqa: PLR0911 - one return per type reads best
    """The generic type of one text value."""
    v = value.strip()
    if _ISO_DATE.search(v) or _WORD_DATE.search(v) or _numeric_date(v) is not None:
        return "date"
    if _MONEY.match(v):
        return "money"
    if _PHONE.match(v):
        return "phone"
    if _NUMBER.match(v):
        return "number"
    if _URL.match(v):
        return "url"
    if _EMAIL.match(v):
        return "email"
    if _ID.match(v):
        return "id"
    if _NAME.match(v):
        return "name"
    return "text"


def date_order(values: Iterable[str]) -> str:
    """``DMY`` or ``MDY`` from the unambiguous numeric dates among `values` ("" if none).

    A date whose first number exceeds 12 is day-first; whose second does, month-first.
    The majority of unambiguous dates decides; a tie, or none, leaves it undetected.
    """
    dmy = mdy = 0
    for value in values:
        found = _numeric_date(value)
        if found is None:
            continue
        a, b, _ = found
        if a > 12 >= b:
            dmy += 1
        elif b > 12 >= a:
            mdy += 1
    if dmy == mdy:
        return ""
    return "DMY" if dmy > mdy else "MDY"


def _iso(year: int, month: int, day: int) -> str:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return ""
    return f"{year:04d}-{month:02d}-{day:02d}"


def normalize(value: str, kind: str, order: str = "") -> str:  # noqa: PLR0911
    """`value` in a canonical form for its `kind` ("" when it does not parse).

    Dates become ISO 8601, a telephone number its digits (``+`` kept); an ambiguous numeric date (both numbers <= 12) is read in the
    template's `order` and left empty when the template has none.
    """
    v = value.strip()
    if kind == "date":
        m = _ISO_DATE.search(v)
        if m:
            return _iso(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        w = _WORD_DATE.search(v)
        if w:
            day, mon, year = (
                (w.group(1), w.group(2), w.group(3))
                if w.group(1)
                else (w.group(5), w.group(4), w.group(6))
            )
            month = _MONTHS.get(mon.lower()[:3], 0)
            return _iso(int(year), month, int(day))
        found = _numeric_date(v)
        if found is None:
            return ""
        a, b, year = found
        if a > 12:
            return _iso(year, b, a)
        if b > 12:
            return _iso(year, a, b)
        if order == "DMY":
            return _iso(year, b, a)
        if order == "MDY":
            return _iso(year, a, b)
        return ""
    if kind in ("money", "number"):
        digits = re.sub(r"[^\d.\-]", "", v)
        try:
            return str(float(digits)) if "." in digits else str(int(digits))
        except ValueError:
            return ""
    if kind == "phone":
        return ("+" if v.startswith("+") else "") + re.sub(r"\D", "", v)
    return v
