"""User-defined cluster aggregators (the paper's UDCAs): each a pure function of one cluster.

Template formation hands a cluster of emails (>= k distinct recipients, re-checked by the
caller) to every UDCA; each returns one annotation that becomes part of the template:

- `fixed_text`    text present in every email of the cluster (so seen by >= k recipients)
- `date_format`   day/month order learned from the cluster's unambiguous dates
- `vertical`      receipt, shipping, travel, bill, account, newsletter or other: a keyword
                  classifier labels each email; the majority label wins when its share is
                  at least `VERTICAL_THRESHOLD` (the paper: "most frequent ... above a
                  predetermined threshold"), else ``other``
- `field_rules`   XPaths present in most emails whose text varies, typed by their values

A new UDCA is one function of `Cluster` added to `UDCAS`; formation calls them all. They
run in the CPU stage's worker processes and see only the cluster they are given.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from server.templates.model import ClusterEmail, FieldRuleValue
from server.templates.values import classify, date_order

__all__ = [
    "UDCAS",
    "VERTICALS",
    "VERTICAL_THRESHOLD",
    "Cluster",
    "Udca",
    "date_format",
    "field_rules",
    "fixed_text",
    "vertical",
]

VERTICALS = ("receipt", "shipping", "travel", "bill", "account", "newsletter", "other")
VERTICAL_THRESHOLD = 0.5
_MAX_FIXED = 200
_MAX_RULES = 64
_KEYWORDS: dict[str, tuple[str, ...]] = {
    "receipt": (
        "receipt",
        "your order",
        "order confirm",
        "thanks for your order",
        "purchase",
        "order details",
        "subtotal",
        "order number",
        "order id",
        "payment method",
    ),
    "shipping": (
        "shipped",
        "shipping confirmation",
        "tracking",
        "on its way",
        "delivered",
        "out for delivery",
        "carrier",
        "package",
        "dispatch",
    ),
    "travel": (
        "flight",
        "boarding",
        "itinerary",
        "hotel",
        "reservation",
        "check-in",
        "check in",
        "departure",
        "arrival",
        "booking",
    ),
    "bill": (
        "bill",
        "invoice",
        "amount due",
        "due date",
        "statement",
        "balance",
        "autopay",
        "payment due",
        "subscription",
        "renewal",
        "paid",
        "donation",
    ),
    "account": (
        "password",
        "reset",
        "verify",
        "verification",
        "sign in",
        "sign-in",
        "log in",
        "security",
        "confirm your email",
        "invite",
        "invitation",
        "account",
        "welcome",
    ),
    "newsletter": (
        "newsletter",
        "% off",
        "sale",
        "offer",
        "discount",
        "promotion",
        "deals",
        "new post",
        "new comment",
        "read more",
        "weekly",
        "digest",
    ),
}
_TYPE_SAMPLE = 16
"""Values typed per field rule: the majority type of 16 values is the type of thousands."""
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


def _text_sets(cluster: Cluster) -> list[set[str]]:
    return [{t for _, t in e.texts} for e in cluster.emails]


def fixed_text(cluster: Cluster) -> tuple[str, ...]:
    """Texts present in every email of the cluster, in the first email's order."""
    if not cluster.emails:
        return ()
    common = set.intersection(*_text_sets(cluster))
    out: list[str] = []
    for _, text in cluster.emails[0].texts:
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


def _scores(text: str) -> dict[str, int]:
    lowered = " " + text.lower() + " "
    return {v: sum(lowered.count(k) for k in words) for v, words in _KEYWORDS.items()}


def _label(scores: dict[str, int]) -> str:
    best = max(scores, key=lambda v: (scores[v], -VERTICALS.index(v)))
    return best if scores[best] > 0 else "other"


def vertical(cluster: Cluster) -> str:
    """Majority per-email label over fixed text and subject, above `VERTICAL_THRESHOLD`.

    Each email is labelled by its subject and the cluster's fixed text (the fixed text's
    keyword counts are computed once; subjects repeat, so each distinct one once too).
    """
    if not cluster.emails:
        return "other"
    fixed = _scores(" ".join(fixed_text(cluster)))
    by_subject: dict[str, str] = {}
    labels: Counter[str] = Counter()
    for e in cluster.emails:
        label = by_subject.get(e.subject)
        if label is None:
            subject = _scores(e.subject)
            label = by_subject[e.subject] = _label({v: fixed[v] + subject[v] for v in fixed})
        labels[label] += 1
    label, count = labels.most_common(1)[0]
    return label if count / len(cluster.emails) >= VERTICAL_THRESHOLD else "other"


def field_rules(cluster: Cluster) -> tuple[FieldRuleValue, ...]:
    """XPaths in at least half the emails whose text varies, typed by majority of values.

    Only positions are recorded, never values, so a rule reveals nothing of any recipient.
    """
    n = len(cluster.emails)
    if n == 0:
        return ()
    by_path: dict[str, list[str]] = {}
    order: list[str] = []
    for email in cluster.emails:
        for path, text in email.texts:
            if path not in by_path:
                by_path[path] = []
                order.append(path)
            by_path[path].append(text)
    rules: list[FieldRuleValue] = []
    for path in order:
        values = by_path[path]
        if len(values) * 2 < n or len(set(values)) < 2:
            continue
        kind, _ = Counter(classify(v) for v in values[:_TYPE_SAMPLE]).most_common(1)[0]
        rules.append(FieldRuleValue(path, kind))
        if len(rules) == _MAX_RULES:
            break
    return tuple(rules)


UDCAS: dict[str, Udca] = {
    "fixed_text": fixed_text,
    "date_format": date_format,
    "vertical": vertical,
    "field_rules": field_rules,
}
"""Every UDCA formation runs, by the template field it fills."""
