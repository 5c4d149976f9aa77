"""Which slot each text item on one path fills, when an optional sibling comes and goes.

A stretch's items on one index-free path (the ``p`` paragraphs after an anchor) are its
slots by ordinal: the first ``p``, the second... When an optional paragraph is missing
from an email, every later paragraph's ordinal moves up one, and by ordinal alone the
email's ``Tara has gifted you a membership`` lands in the slot of ``Hi Ines Müller,``: the
slot's pattern loses its fixed words at formation and reads the wrong text at annotation.

So items are matched to *columns* by an order-preserving alignment (`align`) that scores
each pairing by evidence:
- at formation (`formation_columns`), a column's evidence is its `usual_tokens` (those most
  of its values hold), taken from the emails with the usual count of items on the path;
- at annotation (`reading_columns`), a column's evidence is its rules' patterns, those with
  fixed tokens: a pattern that matches is for the item; when none matches and the column
  has no pattern without fixed tokens to fall back on, that is against it.

Without evidence either way the alignment is the plain ordinal order, so emails with the
usual count of items, and paths whose items all look alike (a repeated block the rows did
not catch), keep exactly the slots they had by ordinal. Pure functions, bounded: at most
`MAX_CELLS` pairings are scored per path, else the ordinal order stands.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from server.templates.spans import HOLE, Pattern, match, token_texts, usual_tokens

__all__ = [
    "MAX_CELLS",
    "Columns",
    "align",
    "columns_of",
    "formation_columns",
    "reading_columns",
]

MAX_CELLS = 4_096
"""Item-column pairings scored per path; beyond it the ordinal order stands."""
_HOLDS = 0.5
"""An item is for a column when it holds at least this share of the column's evidence."""
_PROFILE_SAMPLE = 24
"""Values per column its evidence is taken from."""
_REFERENCE_SHARE = 0.2
"""The usual count of items: the largest held by at least this share of the sequences."""


def align(m: int, n: int, score: Callable[[int, int], float]) -> list[int | None]:
    """Each of `m` items' column among `n` (None: no column), in order, maximising the total
    `score` of the pairs, then the fewest skipped items and columns, then the least
    distance from the ordinal order (so no evidence gives items 0, 1, 2... columns 0, 1, 2...).

    The three goals are one number: distance counts 1, a skip more than any total distance
    (at most m * n), and a unit of score more than any count of skips."""
    skip = float(m * n + 1)
    unit = skip * (m + n + 1) * 64  # scores differing by 1/64 still outweigh every skip
    best = [[0.0] * (n + 1) for _ in range(m + 1)]
    step = [[0] * (n + 1) for _ in range(m + 1)]  # 0 pair, 1 item skipped, 2 column skipped
    row0 = best[0]
    for j in range(1, n + 1):
        row0[j] = row0[j - 1] - skip
        step[0][j] = 2
    for i in range(1, m + 1):
        prev, cur, how = best[i - 1], best[i], step[i]
        cur[0] = prev[0] - skip
        how[0] = 1
        for j in range(1, n + 1):
            v = prev[j - 1] + unit * score(i - 1, j - 1) - abs(i - j)
            h = 0
            if prev[j] - skip > v:
                v, h = prev[j] - skip, 1
            if cur[j - 1] - skip > v:
                v, h = cur[j - 1] - skip, 2
            cur[j] = v
            how[j] = h
    out: list[int | None] = [None] * m
    i, j = m, n
    while i or j:
        h = step[i][j]
        if h == 0:
            out[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif h == 1:
            i -= 1
        else:
            j -= 1
    return out


def _reference(lengths: Sequence[int]) -> int:
    counts = Counter(lengths)
    enough = [c for c, n in counts.items() if n >= _REFERENCE_SHARE * len(lengths)]
    return max(enough) if enough else counts.most_common(1)[0][0]


def _with_extras(got: list[int | None], n: int) -> list[int]:
    """Columns of an alignment; an item with none gets one past the columns, in order."""
    extra = n
    out: list[int] = []
    for col in got:
        if col is None:
            out.append(extra)
            extra += 1
        else:
            out.append(col)
    return out


def formation_columns(seqs: Sequence[Sequence[str]]) -> list[list[int]]:
    """Each sequence's item columns (formation: the texts of one path, one sequence per email
    or row). Sequences of the usual length keep the ordinal order and give each column its
    evidence; the others are aligned to those columns."""
    lengths = [len(s) for s in seqs]
    n = _reference(lengths) if seqs else 0
    if all(x == n for x in lengths):
        return [list(range(x)) for x in lengths]
    sampled: list[list[frozenset[str]]] = [[] for _ in range(n)]
    for s in seqs:
        if len(s) != n:
            continue
        for j, text in enumerate(s):
            if len(sampled[j]) < _PROFILE_SAMPLE:
                sampled[j].append(token_texts(text))
    usual = [usual_tokens(held) for held in sampled]
    where: dict[str, list[int]] = {}
    for j, toks in enumerate(usual):
        for t in toks:
            where.setdefault(t, []).append(j)
    return [_formation_order(s, n, usual, where) for s in seqs]


def _formation_order(
    s: Sequence[str], n: int, usual: list[frozenset[str]], where: dict[str, list[int]]
) -> list[int]:
    """One sequence's columns at formation (see `formation_columns`)."""
    m = len(s)
    if m == n or m * n > MAX_CELLS:
        return list(range(m))
    held = [token_texts(t) for t in s]

    def score(i: int, j: int) -> float:
        u = usual[j]
        share = len(u & held[i]) / len(u) if u else 0.0
        return share if share >= _HOLDS else 0.0

    # A reason to align: an item its ordinal's column has evidence against, or an item at a
    # column without evidence that fits another column.
    same = range(min(m, n))
    against = any(usual[j] and not score(j, j) for j in same)
    if not against and not any(
        score(i, j)
        for i in same
        if not usual[i]
        for j in {c for t in held[i] for c in where.get(t, ())}
    ):
        return list(range(m))
    return _with_extras(align(m, n, score), n)


class Columns(NamedTuple):
    """A path's columns as annotation reads them (from a template's rules)."""

    width: int
    """One past the last column with rules."""
    fixed: dict[int, tuple[Pattern, ...]]
    """Each column's patterns with fixed tokens (columns with none left out)."""
    open: frozenset[int]
    """Columns that also have a pattern of holes only (it reads any text)."""


def columns_of(patterns: Mapping[int, Sequence[Pattern]]) -> Columns:
    """`Columns` of a path's rules' patterns, by column."""
    fixed = {j: tuple(p for p in ps if any(t is not HOLE for t in p)) for j, ps in patterns.items()}
    return Columns(
        max(patterns, default=-1) + 1,
        {j: ps for j, ps in fixed.items() if ps},
        frozenset(j for j, ps in patterns.items() if any(all(t is HOLE for t in p) for p in ps)),
    )


def reading_columns(texts: Sequence[str], cols: Columns) -> list[int]:
    """Each item's column at annotation: the texts of one path (a column without rules is
    fixed text or unread). Items keep the ordinal order unless a pattern with fixed tokens
    rejects the item at its ordinal or a column with rules has no item at its ordinal."""
    m = len(texts)
    n = max(m, cols.width)
    fixed = cols.fixed
    if not fixed or m * n > MAX_CELLS:
        return list(range(m))

    def score(i: int, j: int) -> float:
        ps = fixed.get(j)
        if ps is None:
            return 0.0
        if any(match(p, texts[i]) is not None for p in ps):
            return 1.0
        return 0.0 if j in cols.open else -1.0

    if m >= cols.width and all(score(j, j) >= 0 for j in fixed if j < m):
        return list(range(m))
    return _with_extras(align(m, n, score), n)
