"""An email's fields and rows, read by a template's field rules (annotation).

`extract` reads an email by a template's version-2 rules: the same items, stretches and
segments as formation saw (`stretches`), each slot's holes by its pattern. A stretch whose
anchor the email lacks is read inside the stretch before it: its plain slots by their
patterns' fixed words (`_without_anchor`), its blocks by their row paths. Pure and bounded
(`stretches.MAX_ITEMS` items per email); it runs on the event loop per AnnotateEmail.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

from server.templates.columns import Columns, columns_of, reading_columns
from server.templates.model import Extracted, ExtractedBlock, FieldRuleValue
from server.templates.spans import HOLE, Pattern, match, typed_segments
from server.templates.stretches import Item, Slot, block_paths, items_of, segments, stretches
from server.templates.values import normalize

__all__ = ["extract"]


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
            elif fit := [x for x in own if any(t is not HOLE for t in x.pattern)]:
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
    are those no field holds yet. Each of the missing stretch's plain slots, before its
    blocks or after them (a branch that drops the anchor mostly drops its list too, and what
    followed the list is then in the stretch before), reads the first item on its path whose
    text holds the slot's fixed words in order; a slot without fixed words reads nothing (any
    text of the host would fit it)."""
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
