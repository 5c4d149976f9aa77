"""An email as a template's field rules read it: text items, stretches after anchors, rows.

Each text piece of an email (an element's direct text, cut at child elements such as
``<br>``: `fingerprint.PIECE_SEP`) is one *item*. A template's anchors (fixed texts, see
`extraction`) cut the items into *stretches*, one after each anchor; the longest run of
anchors in the template's order is kept (a longest increasing subsequence), so a fixed
text that also turns up elsewhere moves nothing. A stretch with a repeated block is three
segments: items before the block, one row per repetition of its row element, items after;
the items after may hold another block, cut the same way (`segments`). A block is one
unbroken run of its row elements under one parent, and `blocks.block_paths_of` (formation)
finds the stretch's blocks counting rows that way.

Formation (`extraction`, `blocks`) and annotation (`reading`) cut an email the same way
here, so a rule formed on one stretch reads the same stretch. Pure and bounded (`MAX_ITEMS`
items per email).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from server.templates.fingerprint import PIECE_SEP

__all__ = [
    "BLOCK_SEP",
    "MAX_BLOCKS",
    "MAX_ITEMS",
    "PIECE_ROWS",
    "Item",
    "Slot",
    "block_of",
    "block_paths",
    "items_of",
    "segment",
    "segments",
    "stretches",
]

MAX_ITEMS = 1_500
"""Items read per email."""
_INDEX = re.compile(r"\[\d+\]")


class Item(NamedTuple):
    """One text piece of an email: its node's indexed XPath, index-free path and text."""

    xpath: str
    plain: str
    text: str


@functools.lru_cache(maxsize=16_384)
def _plain(xpath: str) -> str:
    """`xpath` without its indexes (cached: a layout's paths recur in every email)."""
    return _INDEX.sub("", xpath)


def items_of(texts: Iterable[tuple[str, str]]) -> list[Item]:
    """An email's text nodes as items, each direct-text piece its own (at most `MAX_ITEMS`)."""
    out: list[Item] = []
    for xpath, text in texts:
        plain = _plain(xpath)
        for piece in text.split(PIECE_SEP) if PIECE_SEP in text else (text,):
            out.append(Item(xpath, plain, piece))
        if len(out) >= MAX_ITEMS:
            return out[:MAX_ITEMS]
    return out


def _lis(ranks: Sequence[int]) -> list[int]:
    """Indices of a longest strictly increasing subsequence of `ranks` (patience sorting)."""
    tails: list[int] = []  # index of the least tail of each length
    prev = [-1] * len(ranks)
    for i, r in enumerate(ranks):
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if ranks[tails[mid]] < r:
                lo = mid + 1
            else:
                hi = mid
        prev[i] = tails[lo - 1] if lo else -1
        if lo == len(tails):
            tails.append(i)
        else:
            tails[lo] = i
    out: list[int] = []
    i = tails[-1] if tails else -1
    while i >= 0:
        out.append(i)
        i = prev[i]
    return out[::-1]


def stretches(items: Sequence[Item], rank: dict[str, int]) -> dict[int, list[Item]]:
    """The items after each anchor (by rank; 0 = before the first) up to the next anchor."""
    found = [(i, rank[it.text]) for i, it in enumerate(items) if it.text in rank]
    kept = [found[j] for j in _lis([r for _, r in found])]
    out: dict[int, list[Item]] = {}
    start, current = 0, 0
    for i, r in kept:
        out[current] = list(items[start:i])
        start, current = i + 1, r
    out[current] = list(items[start:])
    return out


def segment(
    items: Sequence[Item], row_path: str
) -> tuple[list[Item], list[list[Item]], list[Item]]:
    """A stretch as (items before the block, its rows, items after it).

    The block is the first unbroken run of row elements under one parent: the first item
    that is not in one of them (a list after a run of comment ``div``s, a footer ``div``
    under another parent) ends it, and it and every item after it are the items after the
    block, where a further block may begin (`segments`). A row path ending in
    `PIECE_ROWS` is a block of lines: the pieces of the first element on the path before
    it, one row each."""
    if not row_path:
        return list(items), [], []
    if row_path.endswith(PIECE_ROWS):
        return _pieces(items, row_path[: -len(PIECE_ROWS)])
    depth = row_path.count("/")
    prefix = row_path + "/"
    rows: dict[str, list[Item]] = {}
    parent: str | None = None
    first = -1
    for i, it in enumerate(items):
        inside = it.plain == row_path or it.plain.startswith(prefix)
        if inside:
            steps = it.xpath.split("/", depth + 1)
            par = "/".join(steps[:depth])
            if parent is None:
                parent, first = par, i
            if par == parent:
                rows.setdefault("/".join(steps[: depth + 1]), []).append(it)
                continue
        if first >= 0:
            return list(items[:first]), list(rows.values()), list(items[i:])
    if first < 0:
        return list(items), [], []
    return list(items[:first]), list(rows.values()), []


PIECE_ROWS = "/#"
"""Ends the row path of a block of lines: an element's text pieces (``<br>``-separated
lines, `items_of`), one row each (``{% for line in address %}{{ line }}<br>{% endfor %}``).
A row's item is the element itself, so its path within the row is "" as a row element's
own text is."""


def _pieces(items: Sequence[Item], plain: str) -> tuple[list[Item], list[list[Item]], list[Item]]:
    """A stretch cut at its block of lines: the pieces of the first element on `plain`."""
    first = next((i for i, it in enumerate(items) if it.plain == plain), -1)
    if first < 0:
        return list(items), [], []
    end = first
    while end < len(items) and items[end].xpath == items[first].xpath:
        end += 1
    return list(items[:first]), [[it] for it in items[first:end]], list(items[end:])


BLOCK_SEP = "\n"
"""Joins the row paths of a stretch's repeated blocks, in order, in `FieldRuleValue.row_path`
(one path, as before several blocks were read, when the stretch has one block)."""
MAX_BLOCKS = 4
"""Repeated blocks read one after another in a stretch."""


def block_paths(row_path: str) -> tuple[str, ...]:
    """The row paths of a stretch's blocks, in order, from a rule's `row_path`."""
    return tuple(row_path.split(BLOCK_SEP)) if row_path else ()


def block_of(seg: int) -> int:
    """The block a segment's place is told by: its rows' (odd), the one it follows (even),
    the first for the items before any."""
    return max(0, (seg - 1) // 2)


def _on(it: Item, row_path: str) -> bool:
    """Whether `it` lies in a row of a block with `row_path`."""
    if row_path.endswith(PIECE_ROWS):
        return it.plain == row_path[: -len(PIECE_ROWS)]
    return it.plain == row_path or it.plain.startswith(row_path + "/")


def segments(
    items: Sequence[Item], row_paths: Sequence[str]
) -> list[tuple[list[Item], list[list[Item]]]]:
    """A stretch cut by its repeated blocks in turn: (the items before block j, block j's
    rows) for each block, then (the items after the last, no rows). The plain items of
    pair j are segment 2j, its rows segment 2j + 1. A block an email lacks has no rows and
    cuts nothing: the items up to the next block the email holds (or to the end) are the
    segment before the missing one, and that next block is still read as rows (an optional
    list before a list every email holds). A run of block j's path after a later block's
    rows begin is not block j (an element of the same markup further down)."""
    out: list[tuple[list[Item], list[list[Item]]]] = []
    rest = list(items)
    gap = -1  # the first block this email lacks since the last one it holds
    for j, path in enumerate(row_paths):
        before, rows, after = segment(rest, path)
        if rows and any(_on(it, later) for later in row_paths[j + 1 :] for it in before):
            rows = []  # a later block comes first: this run of the path is not block j
        if not rows:
            if gap < 0:
                gap = len(out)
            out.append(([], []))
            continue
        if gap >= 0:
            out[gap], before, gap = (before, []), [], -1
        out.append((before, rows))
        rest = after
    if gap >= 0:
        out[gap], rest = (rest, []), []
    out.append((rest, []))
    return out


class Slot(NamedTuple):
    """A text slot of a stretch: its segment (0 before the first block, 1 its rows, 2 after
    it; with several blocks, 2j + 1 block j's rows and 2j + 2 the items after block j),
    index-free path (in a row: relative to the row element) and ordinal on that path."""

    segment: int
    path: str
    ordinal: int
