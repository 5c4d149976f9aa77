"""User-defined cluster aggregators (the paper's UDCAs): each a pure function of one cluster.

Template formation hands a cluster of emails (>= k distinct recipients, re-checked by the
caller) to every UDCA; each returns one annotation that becomes part of the template:

- `fixed_text`    text present in every email of the cluster (so seen by >= k recipients)
- `date_format`   day/month order learned from the cluster's unambiguous dates
- `vertical`      receipt, shipping, travel, bill, account, newsletter or other: a weighted
                  keyword classifier labels each email by its subject and the template's
                  fixed text (whole pieces and the fixed tokens of its field rules'
                  patterns); the majority label wins when its share is at least
                  `VERTICAL_THRESHOLD`
                  (the paper: "most frequent ... above a predetermined threshold"), else
                  ``other``
- `field_rules`   where the variable spans lie (after which fixed text, in which slot, in
                  which hole of its token pattern; rows of repeated blocks), their labels
                  and types (`extraction`)

A new UDCA is one function of `Cluster` added to `UDCAS`; formation calls them all. They
run in the CPU stage's worker processes and see only the cluster they are given.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from server.templates.extraction import MAX_FORM_EMAILS, form_field_rules
from server.templates.fingerprint import PIECE_SEP
from server.templates.model import ClusterEmail, FieldRuleValue
from server.templates.values import date_order

__all__ = [
    "KEYWORDS",
    "UDCAS",
    "VERTICALS",
    "VERTICAL_THRESHOLD",
    "Cluster",
    "Udca",
    "compile_keywords",
    "date_format",
    "field_rules",
    "fixed_text",
    "vertical",
    "vertical_of_text",
]

VERTICALS = ("receipt", "shipping", "travel", "bill", "account", "newsletter", "other")
VERTICAL_THRESHOLD = 0.5
_MAX_FIXED = 200
KEYWORDS: dict[str, tuple[tuple[str, int], ...]] = {
    # (keyword, weight): 3 names the vertical outright, 1 only leans towards it. A keyword
    # matches at a word start (``bill`` in ``billing``, never in ``rebill``).
    "receipt": (
        ("receipt", 3),
        ("your order", 2),
        ("order confirm", 3),
        ("thanks for your order", 3),
        ("thank you for your order", 3),
        ("thank you for your purchase", 3),
        ("purchase", 2),
        ("order summary", 2),
        ("order details", 2),
        ("order number", 2),
        ("order total", 2),
        ("order id", 2),
        ("order #", 2),
        ("subtotal", 1),
        ("payment method", 1),
        ("payment received", 2),
        ("payment confirm", 2),
        ("donation", 2),
        ("gift card", 1),
        ("qty", 1),
        ("quantity", 1),
        ("order", 1),
    ),
    "shipping": (
        ("shipped", 3),
        ("shipping confirmation", 3),
        ("tracking number", 3),
        ("track your package", 2),
        ("track your order", 2),
        ("on its way", 3),
        ("out for delivery", 3),
        ("delivered", 2),
        ("delivery", 1),
        ("carrier", 2),
        ("dispatch", 2),
        ("parcel", 2),
        ("shipment", 3),
    ),
    "travel": (
        ("flight", 3),
        ("boarding", 3),
        ("itinerary", 3),
        ("hotel", 3),
        ("reservation", 2),
        ("check-in", 2),
        ("departure", 2),
        ("arrival", 1),
        ("booking", 2),
        ("trip", 2),
        ("passenger", 2),
    ),
    "bill": (
        ("invoice", 3),
        ("bill", 2),
        ("amount due", 3),
        ("balance due", 3),
        ("due date", 2),
        ("payment due", 3),
        ("statement", 2),
        ("autopay", 2),
        ("overdue", 3),
        ("past due", 3),
        ("renewal", 2),
        ("renew", 2),
        ("trial", 2),
        ("your plan", 1),
        ("payment failed", 3),
        ("charge", 1),
    ),
    "account": (
        ("password", 3),
        ("reset", 2),
        ("verify your", 3),
        ("verification", 3),
        ("confirm your email", 3),
        ("confirm your account", 3),
        ("activate", 3),
        ("sign in", 1),
        ("sign-in", 1),
        ("log in", 1),
        ("login", 1),
        ("security", 1),
        ("invite", 2),
        ("invitation", 2),
        ("welcome", 2),
        ("registration", 2),
        ("regist", 2),
        ("confirm", 1),
        ("two-factor", 3),
        ("2fa", 3),
        ("one-time password", 3),
        ("otp", 2),
        ("authenticat", 2),
        ("credential", 2),
        ("lockout", 3),
        ("username", 2),
        ("code", 1),
        ("account", 1),
    ),
    "newsletter": (
        ("newsletter", 3),
        ("digest", 3),
        ("weekly", 2),
        ("this week", 2),
        ("monthly", 1),
        ("new post", 3),
        ("read more", 2),
        ("latest", 2),
        ("announc", 2),
        ("top stories", 3),
        ("articles", 2),
        ("what's new", 2),
        ("% off", 2),
        ("sale", 1),
        ("offer", 1),
        ("discount", 1),
        ("promotion", 2),
        ("deals", 1),
    ),
}
"""Every vertical's keywords. Those among `loadtest.benches.templates_vertical`'s
candidates are here only because its leave-one-source-out choice took them (a word enters
where it corrects templates of two sources or more and lowers none); the bench's
`CANDIDATES` say which words were tried and why, and its run says whether this table is
its base plus what it chose."""
_SPECIFIC = ("shipping", "travel", "bill", "receipt", "account", "newsletter")
"""Tie-break: the more specific vertical wins (a shipping notice mentions the order; an
invoice may say receipt; account and newsletter words appear in every vendor's footer)."""
Patterns = dict[str, list[tuple[str, re.Pattern[str], int]]]


def compile_keywords(keywords: dict[str, tuple[tuple[str, int], ...]]) -> Patterns:
    """Each keyword, its word-start pattern (searched only where the keyword occurs) and
    weight, by vertical."""
    return {
        v: [(kw, re.compile(r"(?<![a-z0-9])" + re.escape(kw)), w) for kw, w in words]
        for v, words in keywords.items()
    }


_PATTERNS = compile_keywords(KEYWORDS)
_SUBJECT_WEIGHT = 2
"""A subject names what an email is about; fixed text also holds the layout's boilerplate."""
_MIN_SCORE = 2
"""The least score that labels an email: one keyword naming a vertical, or two leaning
towards it. A lone leaning word (``login`` in a ticket notice's footer) is not evidence."""
_NUMERIC = re.compile(r"\b\d{1,2}[/.\-]\d{1,2}[/.\-]\d{2,4}\b")
_DIGITS = frozenset("0123456789")


def _has_digit(text: str) -> bool:
    return not _DIGITS.isdisjoint(text)


@dataclass(frozen=True, slots=True)
class Cluster:
    """What every UDCA sees: the cluster's emails (>= k distinct recipients) and k."""

    emails: Sequence[ClusterEmail]
    k: int


Udca = Callable[[Cluster], Any]
"""A UDCA: a pure function of the cluster returning one template annotation."""


def _pieces(email: ClusterEmail) -> list[str]:
    """An email's text pieces (an element's direct text cut at its child elements)."""
    return [p for _, t in email.texts for p in (t.split(PIECE_SEP) if PIECE_SEP in t else (t,))]


def fixed_text(cluster: Cluster) -> tuple[str, ...]:
    """Text pieces present in every email of the cluster, in the first email's order."""
    if not cluster.emails:
        return ()
    common = set.intersection(*(set(_pieces(e)) for e in cluster.emails))
    out: list[str] = []
    for text in _pieces(cluster.emails[0]):
        if text in common and text not in out:
            out.append(text)
            if len(out) == _MAX_FIXED:
                break
    return tuple(out)


def date_format(cluster: Cluster) -> str:
    """``DD/MM/YYYY``-style format of the cluster's numeric dates ("" when undetected)."""
    # Only numeric dates can be ambiguous; a digit test skips most texts before any regex.
    values = [t for e in cluster.emails for _, t in e.texts if _has_digit(t) and _NUMERIC.search(t)]
    order = date_order(values)
    if not order:
        return ""
    sep = "/"
    year = "YYYY"
    for value in values:
        m = re.search(r"\b\d{1,2}([/.\-])\d{1,2}\1(\d{4}|\d{2})\b", value)
        if m:
            sep, year = m.group(1), "YYYY" if len(m.group(2)) == 4 else "YY"
            break
    parts = ("DD", "MM") if order == "DMY" else ("MM", "DD")
    return f"{parts[0]}{sep}{parts[1]}{sep}{year}"


def _scores(text: str, patterns: Patterns) -> dict[str, int]:
    """Each vertical's weight of the keywords `text` holds (each keyword counted once)."""
    lowered = text.lower()
    return {
        v: sum(w for kw, pat, w in pats if kw in lowered and pat.search(lowered))
        for v, pats in patterns.items()
    }


def _label(scores: dict[str, int]) -> str:
    best = max(_SPECIFIC, key=lambda v: (scores[v], -_SPECIFIC.index(v)))
    return best if scores[best] >= _MIN_SCORE else "other"


def _patterns_text(rules: Sequence[FieldRuleValue]) -> list[str]:
    """The fixed tokens of each distinct field-rule pattern, a hole as an ellipsis: the
    fixed part of pieces that also hold a value (``Welcome … !``), which `fixed_text`,
    keeping whole pieces only, leaves out."""
    seen: set[tuple[str | None, ...]] = set()
    out: list[str] = []
    for rule in rules:
        if rule.pattern and rule.pattern not in seen:
            seen.add(rule.pattern)
            out.append(" ".join("…" if t is None else t for t in rule.pattern))
    return out


def vertical(cluster: Cluster, rules: Sequence[FieldRuleValue] | None = None) -> str:
    """Majority per-email label over fixed text and subject, above `VERTICAL_THRESHOLD`.

    Each email is labelled by its subject (weighing `_SUBJECT_WEIGHT`) and the template's
    fixed text: its whole fixed pieces and the fixed tokens of its field `rules` (formed
    here when not given), each keyword counted once, the more specific vertical winning a
    tie, and none below `_MIN_SCORE`. The fixed text's scores are computed once; subjects
    repeat, so each distinct one once too.
    """
    if not cluster.emails:
        return "other"
    if rules is None:
        rules = field_rules(cluster)
    text = "\n".join((*fixed_text(cluster), *_patterns_text(rules)))
    return vertical_of_text(text, [e.subject for e in cluster.emails])


def vertical_of_text(fixed: str, subjects: Sequence[str], patterns: Patterns | None = None) -> str:
    """`vertical` from a template's fixed text (pieces and patterns, joined) and its
    emails' subjects, by `patterns` (the service's keywords when None)."""
    if not subjects:
        return "other"
    patterns = _PATTERNS if patterns is None else patterns
    scores = _scores(fixed, patterns)
    by_subject: dict[str, str] = {}
    labels: Counter[str] = Counter()
    for subject in subjects:
        label = by_subject.get(subject)
        if label is None:
            own = _scores(subject, patterns)
            label = by_subject[subject] = _label(
                {v: scores[v] + _SUBJECT_WEIGHT * own[v] for v in scores}
            )
        labels[label] += 1
    label, count = labels.most_common(1)[0]
    return label if count / len(subjects) >= VERTICAL_THRESHOLD else "other"


def field_rules(cluster: Cluster, limit: int = MAX_FORM_EMAILS) -> tuple[FieldRuleValue, ...]:
    """Where the cluster's variable spans lie, their labels and types (`extraction`), read
    from at most `limit` of its emails.

    Only positions, fixed tokens and labels that >= k recipients' emails hold are recorded,
    never values, so a rule reveals nothing of any recipient.
    """
    return form_field_rules(cluster.emails, cluster.k, limit)


UDCAS: dict[str, Udca] = {
    "fixed_text": fixed_text,
    "date_format": date_format,
    "vertical": vertical,
    "field_rules": field_rules,
}
"""Every UDCA formation runs, by the template field it fills."""
