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

`extract` (annotation) reads an email's fields and rows by a template's version-2 rules:
the same items, stretches and segments as formation saw, each slot's holes by its pattern.
A stretch whose anchor the email lacks is read inside the stretch before it: its plain
slots by their patterns' fixed words (`_without_anchor`), its blocks by their row paths.
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

__all__ = [
    "BLOCK_SEP",
    "MAX_BLOCKS",
    "MAX_ITEMS",
    "PIECE_ROWS",
    "Item",
    "Slot",
    "block_of",
    "block_paths",
    "extract",
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
    blocks: dict[int, tuple[tuple[str, ...], dict[int, str]]]
    """Per rank, its blocks' row paths and each rows segment's block label."""
    worded: dict[int, dict[str, list[tuple[Slot, list[FieldRuleValue]]]]]
    """Per rank, by path, its plain slots with their rules whose patterns hold fixed words:
    what reads the stretch in an email that lacks its anchor (`_without_anchor`)."""


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
    blocks: dict[int, tuple[tuple[str, ...], dict[int, str]]] = {}
    worded: dict[int, dict[str, list[tuple[Slot, list[FieldRuleValue]]]]] = {}
    for r, index in by_rank.items():
        labels: dict[int, str] = {}
        patterns: dict[tuple[int, str], dict[int, list[Pattern]]] = {}
        for slot, own in index.items():
            if slot.segment % 2:  # a rows segment: its block's label
                labels.setdefault(slot.segment, own[0].block)
            elif not slot.segment and (
                fit := [x for x in own if any(t is not HOLE for t in x.pattern)]
            ):
                worded.setdefault(r, {}).setdefault(slot.path, []).append((slot, fit))
            patterns.setdefault((slot.segment, slot.path), {})[slot.ordinal] = list(
                dict.fromkeys(x.pattern for x in own)
            )
        blocks[r] = (block_paths(next(iter(index.values()))[0].row_path), labels)
        columns[r] = {key: columns_of(ps) for key, ps in patterns.items()}
    reading = _Reading(rank, by_rank, columns, blocks, worded)
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
        # In a row, items past the last column a path's rules know are more of a list the
        # row holds (a row's links, 1 to 15 of them): the last column's rules read them
        # when they are holes alone (they read any text).
        last = index.get(Slot(seg, path, cols.width - 1)) if seg % 2 else None
        more = (
            last
            if last and cols.width - 1 in cols.open and cols.width - 1 not in cols.fixed
            else None
        )
        for (pos, it), col in zip(group, got, strict=True):
            rules = index.get(Slot(seg, path, col)) or (more if col >= cols.width else None)
            if rules:
                read.append((pos, it, rules))
    out: list[Extracted] = []
    for _, it, rules in sorted(read, key=lambda r: r[0]):
        _read(rules, it, order, out)
    return out


def _without_anchor(
    worded: dict[str, list[tuple[Slot, list[FieldRuleValue]]]],
    items: Sequence[Item],
    order: str,
) -> list[Extracted]:
    """The plain fields of a stretch whose anchor the email lacks (an alternative paragraph
    in its place, a block left out), whose items are then in the stretch before it: `items`
    are those no field holds yet. Each of the missing stretch's plain slots reads the first
    item on its path whose text holds the slot's fixed words in order; a slot without fixed
    words reads nothing (any text of the host would fit it)."""
    out: list[Extracted] = []
    used: set[Slot] = set()
    for it in items:
        for slot, fit in worded.get(it.plain, ()):
            if slot in used or not any(match(r.pattern, it.text) for r in fit):
                continue
            used.add(slot)
            _read(fit, it, order, out)
            break
    return out


def _blocks(  # noqa: PLR0917 - one stretch's reading, as `extract` holds it
    index: dict[Slot, list[FieldRuleValue]],
    columns: dict[tuple[int, str], Columns],
    paths: tuple[str, ...],
    labels: dict[int, str],
    cut: list[tuple[list[Item], list[list[Item]]]],
    order: str,
) -> list[ExtractedBlock]:
    """The repeated blocks of a stretch cut by its block paths (`segments`), as rows."""
    out: list[ExtractedBlock] = []
    for j, (_, rows) in enumerate(cut):
        label = labels.get(2 * j + 1)
        if not rows or label is None:
            continue
        width = len(paths[j])
        got = [
            row
            for row in (_apply(index, columns, 2 * j + 1, row, width, order=order) for row in rows)
            if row
        ]
        if got:
            out.append(ExtractedBlock(label, tuple(tuple(row) for row in got)))
    return out


def extract(
    rules: Sequence[FieldRuleValue], texts: Sequence[tuple[str, str]], order: str
) -> tuple[tuple[Extracted, ...], tuple[ExtractedBlock, ...]]:
    """An email's fields and repeated blocks by a template's (version-2) rules.

    A stretch whose anchor the email lacks is read in the items of the stretch before it
    that no field holds yet: its plain slots by their fixed words (`_without_anchor`), its
    blocks as rows where the stretch before has no block of the same path (rows are found
    by their path, not by their text)."""
    reading = _reading(rules)
    found = stretches(items_of(texts), reading.rank)
    fields: list[Extracted] = []
    blocks: list[ExtractedBlock] = []
    for r in sorted(reading.by_rank):
        index = reading.by_rank[r]
        columns = reading.columns[r]
        paths, labels = reading.blocks[r]
        stretch = found.get(r)
        if stretch is None:
            host = max(h for h in found if h < r)
            taken = {f.xpath for f in fields}
            taken.update(f.xpath for b in blocks for row in b.rows for f in row)
            rest = [it for it in found[host] if it.xpath not in taken]
            fields.extend(_without_anchor(reading.worded.get(r, {}), rest, order))
            hosts = reading.blocks[host][0] if host in reading.blocks else ()
            if paths and not set(paths) & set(hosts):
                blocks.extend(_blocks(index, columns, paths, labels, segments(rest, paths), order))
            continue
        cut = segments(stretch, paths)
        for j, (plain, _) in enumerate(cut):
            fields.extend(_apply(index, columns, 2 * j, plain, 0, order=order))
        blocks.extend(_blocks(index, columns, paths, labels, cut, order))
    return tuple(fields), tuple(blocks)
