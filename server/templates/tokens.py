"""The text tokens Loom's scheme clusters on: word shingles of text nodes and subject.

A template's fixed text and its values share text nodes (``Hi Ava, your order 1234 has
shipped``), so a whole text node is rarely seen by k recipients. Word 3-shingles with
begin/end markers (``^ Hi Ava,``, ``your order 1234``, ``order 1234 has``, ``1234 has
shipped``, ``has shipped $``) are: every shingle made of fixed words is shared by all the
template's instances, every shingle touching a value is personal and never k-anonymous.
Text shorter than a shingle is one token.

The subject adds its own shingles, its **prefixes** (its first 1-4 words, and the whole
subject when it is that short, marked as ending there) and its **suffixes** (its last 1-4
words, last first, the whole subject marked alike): instances of a template keep their
subject's fixed start (``Your order``, ``Reset your password``) and differ in what follows
(a name, a number), or keep its fixed end after a value (``<title> (Closed)``), so the
longest prefix or suffix most of a group's emails share is that group's subject; see
`server/templates/grouping.py`.

Tokens are strings (their hashes are cached, and formation puts hundreds of thousands of
them in sets); a subject token leads with a mark. Matching compares hashes of the tokens'
word tuples (`email_hashes` builds them without joining a single string; `signature_hashes`
splits a stored signature back): both sides are hashed in the process that compares them,
and nothing hashed is ever stored or sent.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

__all__ = [
    "END",
    "PREFIX",
    "SHINGLE",
    "SUBJECT",
    "SUFFIX",
    "email_hashes",
    "is_subject",
    "prefix_words",
    "shingles",
    "signature_hashes",
    "suffix_words",
    "text_hashes",
    "tokens_of",
]

SHINGLE = 3
"""Words per shingle."""
SUBJECT = "\x01subject:"
"""Leads every subject shingle (a subject's words never meet the body's)."""
PREFIX = "\x02prefix:"
"""Leads every subject prefix token."""
SUFFIX = "\x04suffix:"
"""Leads every subject suffix token: its words last first, so a suffix reads as a prefix of
the reversed subject (``Ticket 12 (Closed)`` ends with ``(Closed)``, ``(Closed) 12``…)."""
END = "$"
"""Marks the end of a text (and a subject prefix that is the whole subject)."""
_MAX_PREFIX = 4


@functools.lru_cache(maxsize=4_096)
def shingles(text: str, lead: str = "") -> frozenset[str]:
    """Word `SHINGLE`-shingles of `text` between begin and end markers, each led by `lead`.

    Cached (a few thousand texts: one row's at a time): a template's fixed texts recur in
    every email of its row."""
    words = ["^", *text.split(), END]
    if len(words) <= SHINGLE:
        return frozenset((lead + " ".join(words),))
    return frozenset(
        lead + " ".join(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)
    )


_LEADS = {"\x02": PREFIX, "\x04": SUFFIX}
"""The mark an `_ends` tuple leads with, as its token's lead."""


def _ends(words: list[str]) -> Iterator[tuple[str, ...]]:
    """A subject's prefixes (mark ``\\x02``) and suffixes (``\\x04``, words last first) of
    1-`_MAX_PREFIX` words, each whole subject that short also ending in `END`: the word
    tuples `tokens_of` joins and `text_hashes` hashes, so the two never disagree."""
    back = words[::-1]
    for i in range(1, min(_MAX_PREFIX, len(words)) + 1):
        yield ("\x02", *words[:i])
        yield ("\x04", *back[:i])
    if 0 < len(words) <= _MAX_PREFIX:  # the whole subject: this prefix (suffix) can end it
        yield ("\x02", *words, END)
        yield ("\x04", *back, END)


def tokens_of(subject: str, texts: Iterable[tuple[str, str]]) -> set[str]:
    """Every token of an email: its text nodes' shingles, its subject's shingles, prefixes and
    suffixes."""
    found: set[str] = set()
    for _, text in texts:
        found |= shingles(text)
    if subject:
        found |= shingles(subject, SUBJECT)
        found.update(_LEADS[t[0]] + " ".join(t[1:]) for t in _ends(subject.split()))
    return found


def _words(token: str) -> tuple[str, ...]:
    """A token as the word tuple `email_hashes` hashes (its mark as a first word)."""
    if token.startswith(SUBJECT):
        return ("\x01", *token[len(SUBJECT) :].split())
    if token.startswith(PREFIX):
        return ("\x02", *token[len(PREFIX) :].split())
    if token.startswith(SUFFIX):
        return ("\x04", *token[len(SUFFIX) :].split())
    return tuple(token.split())


def email_hashes(subject: str, texts: Iterable[tuple[str, str]]) -> set[int]:
    """The hashes of `tokens_of`'s word tuples, built without joining a single string: what
    annotation and the explained check intersect with `signature_hashes`."""
    return text_hashes(subject, (text for _, text in texts))


def text_hashes(subject: str, texts: Iterable[str]) -> set[int]:
    """`email_hashes` from the text nodes' texts alone (their paths play no part)."""
    out: set[int] = set()
    add = out.update
    for text in texts:
        words = ["^", *text.split(), END]
        if len(words) <= SHINGLE:
            out.add(hash(tuple(words)))
        else:
            add(map(hash, zip(words, words[1:], words[2:], strict=False)))
    if subject:
        words = ["\x01", "^", *subject.split(), END]
        if len(words) <= SHINGLE + 1:
            out.add(hash(tuple(words)))
        else:
            add(hash(("\x01", *w)) for w in zip(words[1:], words[2:], words[3:], strict=False))
        add(map(hash, _ends(words[2:-1])))
    return out


@functools.lru_cache(maxsize=65_536)
def signature_hashes(signature: tuple[str, ...]) -> frozenset[int]:
    """A template's stored signature as `email_hashes` values (cached per signature)."""
    return frozenset(hash(_words(t)) for t in signature)


def is_subject(token: str) -> bool:
    """Whether `token` comes from the subject (a shingle or a prefix)."""
    return token.startswith((SUBJECT, PREFIX, SUFFIX))


def prefix_words(token: str) -> tuple[str, ...] | None:
    """The words of a subject prefix token (None for any other token)."""
    if not token.startswith(PREFIX):
        return None
    return tuple(token[len(PREFIX) :].split())


def suffix_words(token: str) -> tuple[str, ...] | None:
    """The words of a subject suffix token, last first (None for any other token)."""
    if not token.startswith(SUFFIX):
        return None
    return tuple(token[len(SUFFIX) :].split())
