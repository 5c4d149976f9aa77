"""The text tokens Loom's scheme clusters on: word shingles of text nodes and subject.

A template's fixed text and its values share text nodes (``Hi Ava, your order 1234 has
shipped``), so a whole text node is rarely seen by k recipients. Word 3-shingles with
begin/end markers (``^ Hi Ava,``, ``your order 1234``, ``order 1234 has``, ``1234 has
shipped``, ``has shipped $``) are: every shingle made of fixed words is shared by all the
template's instances, every shingle touching a value is personal and never k-anonymous.
Text shorter than a shingle is one token.

The subject adds its own shingles and its **prefixes** (its first 1-4 words, and the
whole subject when it is that short, marked as ending there): instances of a template keep
their subject's fixed start (``Your order``, ``Reset your password``) and differ in what
follows (a name, a number), so the longest prefix most of a group's emails share is that
group's subject; see `server/templates/grouping.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "END",
    "PREFIX_MARK",
    "SHINGLE",
    "SUBJECT_MARK",
    "is_subject",
    "prefix_words",
    "shingles",
    "tokens_of",
]

SHINGLE = 3
"""Words per shingle."""
SUBJECT_MARK = "\x01subject:"
"""Leads every subject shingle (a subject's words never meet the body's)."""
PREFIX_MARK = "\x02prefix:"
"""Leads every subject prefix token."""
_MAX_PREFIX = 4
END = "$"
"""Marks the end of a text (and a subject prefix that is the whole subject)."""


def shingles(text: str, lead: str = "") -> set[str]:
    """Word `SHINGLE`-shingles of `text` between begin and end markers, each led by `lead`."""
    words = ["^", *text.split(), END]
    if len(words) <= SHINGLE:
        return {lead + " ".join(words)}
    return {lead + " ".join(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


def tokens_of(subject: str, texts: Iterable[tuple[str, str]]) -> set[str]:
    """Every token of an email: its text nodes' shingles, its subject's shingles and prefixes."""
    found: set[str] = set()
    for _, text in texts:
        found |= shingles(text)
    if subject:
        found |= shingles(subject, SUBJECT_MARK)
        words: Sequence[str] = subject.split()
        found |= {
            PREFIX_MARK + " ".join(words[:i]) for i in range(1, min(_MAX_PREFIX, len(words)) + 1)
        }
        if 0 < len(words) <= _MAX_PREFIX:  # the whole subject: this prefix can end it
            found.add(PREFIX_MARK + " ".join(words) + " " + END)
    return found


def is_subject(token: str) -> bool:
    """Whether `token` comes from the subject (a shingle or a prefix)."""
    return token.startswith((SUBJECT_MARK, PREFIX_MARK))


def prefix_words(token: str) -> tuple[str, ...] | None:
    """The words of a subject prefix token (None for any other token)."""
    if not token.startswith(PREFIX_MARK):
        return None
    return tuple(token[len(PREFIX_MARK) :].split())
