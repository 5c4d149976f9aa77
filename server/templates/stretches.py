"""An email as a template's field rules read it: text items, stretches after anchors, rows.

Each text piece of an email (an element's direct text, cut at child elements such as
``<br>``: `fingerprint.PIECE_SEP`) is one *item*. A template's anchors (fixed texts, see
`extraction`) cut the items into *stretches*, one after each anchor; the longest run of
anchors in the template's order is kept (a longest increasing subsequence), so a fixed
text that also turns up elsewhere moves nothing. A stretch with a repeated block is three
segments: items before the block, one row per repetition of its row element, items after.

`extract` (annotation) reads an email's fields and rows by a template's version-2 rules:
the same items, stretches and segments as formation saw, each slot's holes by its pattern.
Pure and bounded (`MAX_ITEMS` items per email); it runs on the event loop per AnnotateEmail.
"""

from __future__ import annotations

import functools
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from server.templates.columns import Columns, columns_of, reading_columns
from server.templates.fingerprint import PIECE_SEP
from server.templates.model import Extracted, ExtractedBlock, FieldRuleValue
from server.templates.spans import HOLE, Pattern, match, typed_segments
from server.templates.values import normalize

__all__ = ["MAX_ITEMS", "Item", "Slot", "extract", "items_of", "segment", "stretches"]

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
    """A stretch as (items before the block, its rows, items after it)."""
    if not row_path:
        return list(items), [], []
    depth = row_path.count("/")
    prefix = row_path + "/"
    rows: dict[str, list[Item]] = {}
    parent: str | None = None
    first = last = -1
    for i, it in enumerate(items):
        if it.plain != row_path and not it.plain.startswith(prefix):
            continue
        steps = it.xpath.split("/", depth + 1)
        par = "/".join(steps[:depth])
        if parent is None:
            parent = par
        if par == parent:
            rows.setdefault("/".join(steps[: depth + 1]), []).append(it)
            first = i if first < 0 else first
            last = i
    if first < 0:
        return list(items), [], []
    return list(items[:first]), list(rows.values()), list(items[last + 1 :])


class Slot(NamedTuple):
    """A text slot of a stretch: its segment (0 before the block, 1 a row, 2 after it),
    index-free path (in a row: relative to the row element) and ordinal on that path."""

    segment: int
    path: str
    ordinal: int


def _read(rules: Sequence[FieldRuleValue], it: Item, order: str, out: list[Extracted]) -> None:
    """The fields of one slot's item, by the first of the slot's patterns that matches."""
    shapes: dict[Pattern, list[FieldRuleValue]] = {}
    for r in rules:
        shapes.setdefault(r.pattern, []).append(r)
    read = next(
        ((own, got) for pattern, own in shapes.items() if (got := match(pattern, it.text))),
        None,
    )
    if read is None:
        pattern, own = next(iter(shapes.items()))
        if len(shapes) > 1 or pattern.count(HOLE) != 1:
            return
        read = own, (it.text.strip(),)  # the fixed words changed: the whole text is the value
    own, holes = read
    for r in own:
        value = holes[r.hole] if r.hole < len(holes) else ""
        if value and r.parts:
            segs = typed_segments(value)
            if tuple(kind for kind, _ in segs) == r.parts:
                value = segs[r.part][1]
            elif r.part:
                value = ""
        if value:
            out.append(Extracted(it.xpath, value, r.type, normalize(value, r.type, order), r.label))


class _Reading(NamedTuple):
    """A template's rules arranged for annotation (built once per rules object)."""

    rank: dict[str, int]
    """Each anchor's (and stretch end's) rank."""
    by_rank: dict[int, dict[Slot, list[FieldRuleValue]]]
    columns: dict[int, dict[tuple[int, str], Columns]]
    """Per rank, each (segment, path)'s columns."""


_READINGS: OrderedDict[int, tuple[Sequence[FieldRuleValue], _Reading]] = OrderedDict()
_READINGS_MAX = 256
"""Templates whose arranged rules are kept, least recently used out first. Small: each
entry pins its rules object, and the template cache hands out a new one for a row each time
it re-reads the row (every `template_cache_ttl_s`), so a large bound would hold stale copies
of many templates; the templates being annotated at the moment are what it is for."""


def _reading(rules: Sequence[FieldRuleValue]) -> _Reading:
    """`rules` arranged for annotation, cached by the rules object's identity (the entry
    holds the object, so its id cannot be reused while cached)."""
    got = _READINGS.get(id(rules))
    if got is not None and got[0] is rules:
        _READINGS.move_to_end(id(rules))
        return got[1]
    by_rank: dict[int, dict[Slot, list[FieldRuleValue]]] = {}
    rank: dict[str, int] = {}
    for rule in rules:
        slot = Slot(rule.segment, rule.path, rule.ordinal)
        by_rank.setdefault(rule.rank, {}).setdefault(slot, []).append(rule)
        if rule.rank:
            rank[rule.anchor] = rule.rank
        if rule.until:
            rank.setdefault(rule.until, rule.rank + 1)
    columns: dict[int, dict[tuple[int, str], Columns]] = {}
    for r, index in by_rank.items():
        patterns: dict[tuple[int, str], dict[int, list[Pattern]]] = {}
        for slot, own in index.items():
            patterns.setdefault((slot.segment, slot.path), {})[slot.ordinal] = list(
                dict.fromkeys(x.pattern for x in own)
            )
        columns[r] = {key: columns_of(ps) for key, ps in patterns.items()}
    reading = _Reading(rank, by_rank, columns)
    _READINGS[id(rules)] = (rules, reading)
    if len(_READINGS) > _READINGS_MAX:
        _READINGS.popitem(last=False)
    return reading


def _apply(
    index: dict[Slot, list[FieldRuleValue]],
    columns: dict[tuple[int, str], Columns],
    seg: int,
    items: Sequence[Item],
    cut: int,
    *,
    order: str,
) -> list[Extracted]:
    """The fields of a segment's items: each path's items matched to its slots' columns."""
    paths: dict[str, list[tuple[int, Item]]] = {}
    for pos, it in enumerate(items):
        paths.setdefault(it.plain[cut:], []).append((pos, it))
    read: list[tuple[int, Item, list[FieldRuleValue]]] = []
    for path, group in paths.items():
        cols = columns.get((seg, path))
        if cols is None:
            continue
        got = reading_columns([it.text for _, it in group], cols)
        for (pos, it), col in zip(group, got, strict=True):
            rules = index.get(Slot(seg, path, col))
            if rules:
                read.append((pos, it, rules))
    out: list[Extracted] = []
    for _, it, rules in sorted(read, key=lambda r: r[0]):
        _read(rules, it, order, out)
    return out


def extract(
    rules: Sequence[FieldRuleValue], texts: Sequence[tuple[str, str]], order: str
) -> tuple[tuple[Extracted, ...], tuple[ExtractedBlock, ...]]:
    """An email's fields and repeated blocks by a template's (version-2) rules."""
    reading = _reading(rules)
    found = stretches(items_of(texts), reading.rank)
    fields: list[Extracted] = []
    blocks: list[ExtractedBlock] = []
    for r in sorted(reading.by_rank):
        stretch = found.get(r)
        if stretch is None:
            continue
        index = reading.by_rank[r]
        columns = reading.columns[r]
        first = next(iter(index.values()))[0]
        before, rows, after = segment(stretch, first.row_path)
        fields.extend(_apply(index, columns, 0, before, 0, order=order))
        if any(s.segment == 1 for s in index):
            cut = len(first.row_path)
            got = [
                row
                for row in (_apply(index, columns, 1, row, cut, order=order) for row in rows)
                if row
            ]
            if got:
                blocks.append(ExtractedBlock(first.block, tuple(tuple(row) for row in got)))
        fields.extend(_apply(index, columns, 2, after, 0, order=order))
    return tuple(fields), tuple(blocks)
