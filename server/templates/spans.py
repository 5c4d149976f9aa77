"""Token-level patterns of one text slot: which tokens are fixed, where the values are.

A slot's values across a template's emails (``Hi Ines Müller,`` / ``Hi Bob Garcia,``) share
fixed tokens in order (``Hi`` ``,``); the longest common subsequence of their tokens is the
slot's *pattern*, and the token runs between its fixed tokens are its *holes*: the variable
spans, one field each (``Ines Müller``). Dates, money, times, URLs and numbers with digit
groups are one token each, so ``February 25, 2026`` is never cut at a shared ``2026``; a
URL ends before its ``#fragment`` (the ``#`` and the fragment are tokens of their own), so
a fragment a template appends to every link (``…#tab-notifications``) is fixed text and the
field is the link itself.

A hole whose values are consistently several typed values (a date, then an order id) is cut
by `typed_segments` into several fields. Pure functions, bounded: `MAX_TOKENS` tokens per
value, patterns folded over at most a sample of values.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "HOLE",
    "MAX_TOKENS",
    "PHONE",
    "USUAL_SHARE",
    "Pattern",
    "Token",
    "build_pattern",
    "display",
    "has_letter",
    "join_tokens",
    "label_text",
    "match",
    "token_texts",
    "tokenize",
    "typed_segments",
    "usual_tokens",
]

MAX_TOKENS = 48
"""Tokens read per value: a text item is at most 200 characters."""
USUAL_SHARE = 0.6
"""A *usual* token: in at least this share of a slot's (or a column's) sampled values."""

HOLE = None
"""A hole in a `Pattern`."""

Pattern = tuple[str | None, ...]
"""Fixed tokens and holes (`HOLE`) in order."""

_MONTH = r"(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
_WEEKDAY = r"(?:(?i:mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+)?"
_DATE = (
    rf"{_WEEKDAY}(?:{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH},?\s+\d{{4}}"
    r"|\d{4}-\d{2}-\d{2}"
    r"|\d{1,2}(?P<dsep>[/.\-])\d{1,2}(?P=dsep)(?:\d{4}|\d{2}))(?![\d\w])"
)
_MONEY = (
    r"-?[$€£¥]\s?-?\d[\d,]*(?:\.\d+)?"
    r"|-?\d[\d,]*(?:\.\d{1,2})?\s?(?:USD|EUR|GBP|[€$£])(?!\w)"
    r"|(?:USD|EUR|GBP)\s?-?\d[\d,]*(?:\.\d{1,2})?"
)
_TIME = r"\d{1,2}:\d{2}(?::\d{2})?(?:\s?(?i:[ap]\.?m\.?)(?!\w))?"
PHONE = (
    r"(?<![\w+])(?:\+\d{1,3}[\s.\-]?\d{1,4}(?:[\s.\-]\d{2,4}){1,4}"
    r"|\(\d{3}\)[\s.\-]?\d{3}[.\-]\d{4}"
    r"|\d{3}(?P<psep>[.\-])\d{3}(?P=psep)\d{4})(?![\w]|[.\-]\d)"
)
"""A telephone number, one token however it groups its digits: ``(408) 341-0600``,
``992.248.0604``, ``+44 20 7946 0958`` (a shipping address's or a support line's)."""
_URL = r"(?P<url>(?:https?://|www\.)[^\s#]*[^\s.,!?;:)\]\"”#])"
_WORD_PUNCT = (
    r"|(?P<word>(?!['\u2018\u2019])[^\s#:;,()\[\]|\"“”•·\u2013\u2014@]*"
    r"[^\s#:;,()\[\]|\"“”•·\u2013\u2014.!?@'\u2018\u2019]"
    r"(?:@[^\s#:;,()\[\]|\"“”•·@]*[^\s#:;,()\[\]|\"“”•·@.!?])?)"
    r"|(?P<punct>[#:;,()\[\]|\"“”.!?•·\u2013\u2014@'\u2018\u2019-])"
)
"""A word, or one punctuation mark. A single quote inside a word stays there (``don't``,
``O'Brien``); one opening or closing a word is a mark of its own, as double quotes are, so
``'printer on fire'`` is a value between two fixed quotes."""
_TYPED_TOKENS = rf"(?P<date>{_DATE})|(?P<money>{_MONEY})|{_URL}|(?P<time>{_TIME})"
_NUMBER_WORD_PUNCT = (
    r"|(?P<number>-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?=[-\u2013][^\W\d]))" + _WORD_PUNCT
)
_TOKEN = re.compile(_TYPED_TOKENS + rf"|(?P<phone>{PHONE})" + _NUMBER_WORD_PUNCT)
_TOKEN_NO_PHONE = re.compile(_TYPED_TOKENS + _NUMBER_WORD_PUNCT)
"""`_TOKEN` as it was before telephone numbers were one token (`match` falls back on it)."""
_TOKEN_NO_DIGITS = re.compile(_URL + _WORD_PUNCT)
"""`_TOKEN` for a text without digits, where its date, money, time and number
alternatives (each needs a digit) never match: the same tokens, fewer tries per position."""
_DIGIT = re.compile(r"\d")
_TYPED = frozenset({"date", "money", "time", "url"})
_NO_SPACE_BEFORE = frozenset(',.:;)]!?”"')
_NO_SPACE_AFTER = frozenset("([“")
_LABEL_CHARS = 60


class Token(NamedTuple):
    """One token of a text: its characters, its kind and where it lies in the text."""

    text: str
    kind: str
    start: int
    end: int


def _tokens(text: str, pattern: re.Pattern[str]) -> tuple[Token, ...]:
    out: list[Token] = []
    make = tuple.__new__  # Token(...) without NamedTuple's per-call argument handling
    for m in pattern.finditer(text):
        kind = m.lastgroup or "word"
        if kind == "dsep":  # the date's separator group is the last to close
            kind = "date"
        elif kind == "psep":
            kind = "phone"
        start, end = m.span()
        out.append(make(Token, (m.group(), kind, start, end)))
        if len(out) == MAX_TOKENS:
            break
    return tuple(out)


@functools.lru_cache(maxsize=65_536)
def tokenize(text: str) -> tuple[Token, ...]:
    """The tokens of `text` (at most `MAX_TOKENS`), whitespace between them dropped.

    Cached: a template's fixed texts recur in every email of a cluster and of annotation.
    """
    return _tokens(text, _TOKEN if _DIGIT.search(text) else _TOKEN_NO_DIGITS)


@functools.lru_cache(maxsize=4_096)
def _tokenize_without_phones(text: str) -> tuple[Token, ...]:
    """`tokenize` as it cut texts before telephone numbers were one token."""
    return _tokens(text, _TOKEN_NO_PHONE)


def _lcs(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """A longest common subsequence of two short token lists (classic DP)."""
    n, m = len(a), len(b)
    if not n or not m:
        return []
    if _align_texts(a, b):  # `a` is all in `b`: it is their only longest common subsequence
        return list(a)
    dp = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        ai, row, below = a[i], dp[i], dp[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if ai == b[j] else max(below[j], row[j + 1])
    out: list[str] = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append(a[i])
            i += 1
            j += 1
        elif dp[i + 1][j] >= dp[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def _align_texts(fixed: Sequence[str], texts: Sequence[str]) -> bool:
    """Whether `fixed` is a subsequence of `texts`."""
    it = iter(texts)
    return all(f in it for f in fixed)


def _align(fixed: Sequence[str], tokens: Sequence[Token]) -> list[int] | None:
    """Positions of `fixed` in `tokens`, in order, each as early as it can be (or None)."""
    at: list[int] = []
    j = 0
    for f in fixed:
        while j < len(tokens) and tokens[j].text != f:
            j += 1
        if j == len(tokens):
            return None
        at.append(j)
        j += 1
    return at


def build_pattern(samples: Sequence[Sequence[Token]]) -> Pattern:
    """The pattern of a slot's sampled values: their common tokens, holes where any value
    has tokens between them. Every fixed token is in every sample."""
    if not samples:
        return ()
    samples = list(dict.fromkeys(samples))  # a repeated value adds nothing to either step
    fixed: list[str] = [t.text for t in samples[0]]
    for tokens in samples[1:]:
        fixed = _lcs(fixed, [t.text for t in tokens])
        if not fixed:
            break
    holes = [False] * (len(fixed) + 1)  # before fixed[0], between, after the last
    for tokens in samples:
        at = _align(fixed, tokens)
        if at is None:  # cannot happen for an LCS of all samples; be safe
            return (HOLE,)
        edges = [-1, *at, len(tokens)]
        for h in range(len(holes)):
            if edges[h + 1] - edges[h] > 1:
                holes[h] = True
    out: list[str | None] = []
    for h, f in enumerate(fixed):
        if holes[h]:
            out.append(HOLE)
        out.append(f)
    if holes[-1]:
        out.append(HOLE)
    return tuple(out)


@functools.lru_cache(maxsize=16_384)
def token_texts(text: str) -> frozenset[str]:
    """The distinct tokens of `text`, as strings (cached: a slot's values recur)."""
    return frozenset(t.text for t in tokenize(text))


def usual_tokens(held: Sequence[frozenset[str]]) -> frozenset[str]:
    """The tokens at least `USUAL_SHARE` of the values hold (`held`: each value's
    `token_texts`): a slot's or a column's recurring words, where its values vary."""
    counts = Counter(t for tokens in held for t in tokens)
    return frozenset(t for t, n in counts.items() if n >= USUAL_SHARE * len(held))


@functools.lru_cache(maxsize=16_384)
def match(pattern: Pattern, text: str) -> tuple[str, ...] | None:
    """The text of each hole of `pattern` in `text` ("" for an empty hole), or None when
    the pattern's fixed tokens are not all there, in order. Cached: annotation asks it twice
    of an item (which column it fits, then its holes), and a layout's texts recur.

    A pattern stored before telephone numbers were one token may hold a number's ``(`` and
    ``)`` as fixed tokens: when the text has a telephone number and the pattern does not
    fit, the text is cut again as it was then, so templates formed before keep their fields
    until they re-form."""
    tokens = tokenize(text)
    fixed = [t for t in pattern if t is not None]
    at = _align(fixed, tokens)
    if at is None and any(t.kind == "phone" for t in tokens):
        tokens = _tokenize_without_phones(text)
        at = _align(fixed, tokens)
    if at is None:
        return None
    out: list[str] = []
    f = 0  # fixed tokens passed
    for item in pattern:
        if item is not None:
            f += 1
            continue
        lo = at[f - 1] + 1 if f else 0
        hi = at[f] if f < len(at) else len(tokens)
        out.append(text[tokens[lo].start : tokens[hi - 1].end] if hi > lo else "")
    return tuple(out)


def typed_segments(value: str) -> list[tuple[str, str]]:
    """`value` cut into (kind, text) runs: each date, money, time or URL token its own run,
    the other tokens between them one ``text`` run (punctuation-only runs dropped)."""
    out: list[tuple[str, str]] = []
    run_start = run_end = -1
    for tok in tokenize(value):
        if tok.kind in _TYPED:
            if run_start >= 0:
                out.append(("text", value[run_start:run_end]))
                run_start = -1
            out.append((tok.kind, tok.text))
        elif tok.kind != "punct":
            if run_start < 0:
                run_start = tok.start
            run_end = tok.end
    if run_start >= 0:
        out.append(("text", value[run_start:run_end]))
    return out


def join_tokens(tokens: Sequence[str]) -> str:
    """Tokens as text: one space between, none before closing or after opening punctuation."""
    out = ""
    for tok in tokens:
        if out and tok[0] not in _NO_SPACE_BEFORE and out[-1] not in _NO_SPACE_AFTER:
            out += " "
        out += tok
    return out


def has_letter(text: str) -> bool:
    """Whether `text` holds a letter (a label must say something)."""
    return any(c.isalpha() for c in text)


def label_text(text: str) -> str:
    """`text` as a label: trailing ``:``/``-`` and an opening quote dropped, at most its
    last ~60 characters."""
    text = text.strip().rstrip(":;,-\u2013|=>\"'“\u2018«(").strip()
    if len(text) > _LABEL_CHARS:
        cut = text[-_LABEL_CHARS:]
        text = cut.split(" ", 1)[1] if " " in cut else cut
    return text


def display(pattern: Pattern) -> str:
    """A pattern as text, ``{}`` for each hole (``Invoice: {}``)."""
    return join_tokens(["{}" if t is None else t for t in pattern])
