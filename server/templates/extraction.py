"""Field extraction: the field rules a cluster forms (`form_field_rules`, the ``field_rules``
UDCA); `reading.extract` pulls an email's fields and rows by them.

Each text piece of an email (an element's direct text, cut at child elements such as
``<br>``) is one *item* (`stretches.items_of`). Formation:

1. **Anchors**: texts that occur exactly once in an email, in at least `ANCHOR_SHARE` of the
   cluster's emails (almost never twice), held by >= k distinct recipients. Their order is
   their mean rank among an email's anchors; each email keeps the longest run of them in
   that order (a longest increasing subsequence), the rest are plain items.
2. **Stretches**: the items after each anchor up to the next kept one (the first stretch
   starts the body). A field is placed by its stretch's anchor, never by absolute index,
   so a block of 1 or 10 line items before it moves nothing.
3. **Repeated blocks**: in a stretch, a row element (``tr``, ``li``, ``div``…) of which
   emails hold varying counts of siblings in one unbroken run (>= 2 in at least `ROW_SHARE`
   of them) makes the stretch three segments: items before the block, one row per sibling,
   items after it; the items after may hold a further block (`stretches.MAX_BLOCKS`).
4. **Slots** (segment, index-free path, column) gather their values across emails (and
   rows); an item's column on its path is its ordinal unless an optional sibling came or
   went before it (`columns.formation_columns`); a slot of >= k recipients gets a token pattern (`spans.build_pattern`; one per shape
   where its values have several, `shapes.slot_patterns`), each hole
   a field (several when its values are consistently several typed values), typed by
   majority and labelled by the fixed tokens before it in the node, else by the nearest
   fixed text before it (a constant slot, a column header, the anchor).

Annotation (`reading.extract`) splits an email into items the same way, finds the rules'
anchors, segments each stretch by its row element and reads every slot's holes by its
pattern. Bounded: formation reads at most `MAX_FORM_EMAILS` emails and `MAX_ITEMS` items
of each; every fixed text it records (anchor, label, pattern token) is held by >= k
distinct recipients' emails.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from server.templates.blocks import ROW_SHARE, block_paths_of
from server.templates.columns import formation_columns
from server.templates.model import ClusterEmail, FieldRuleValue
from server.templates.shapes import slot_patterns
from server.templates.spans import (
    HOLE,
    Pattern,
    has_letter,
    join_tokens,
    label_text,
    match,
    typed_segments,
)
from server.templates.stretches import BLOCK_SEP, Item, Slot, items_of, stretches
from server.templates.values import classify

__all__ = ["ANCHOR_SHARE", "MAX_FORM_EMAILS", "MAX_RULES", "ROW_SHARE", "form_field_rules"]

ANCHOR_SHARE = 0.5
"""An anchor is in at least this share of the cluster's emails, once."""
_ANCHOR_REPEAT = 0.05
"""...and more than once in at most this share of the emails holding it."""
MAX_FORM_EMAILS = 48
"""Emails formation reads for field rules (spread over the cluster)."""
_MAX_ANCHORS = 250
MAX_RULES = 128
"""Field rules per template."""
_SAMPLE = 24
"""Values a slot's pattern is folded over (one per recipient first, at least k)."""
_TYPE_SAMPLE = 16
_PART_SHARE = 0.8


def _spread(emails: Sequence[ClusterEmail], limit: int) -> list[ClusterEmail]:
    if len(emails) <= limit:
        return list(emails)
    step = len(emails) / limit
    return [emails[int(i * step)] for i in range(limit)]


def _anchors(docs: Sequence[tuple[str, list[Item]]], k: int) -> list[str]:
    """The cluster's anchors in their order (see the module's step 1)."""
    once: Counter[str] = Counter()
    more: Counter[str] = Counter()
    users: dict[str, set[str]] = defaultdict(set)
    for user, items in docs:
        counts = Counter(it.text for it in items)
        for text, c in counts.items():
            if c == 1:
                once[text] += 1
                users[text].add(user)
            else:
                more[text] += 1
    n = len(docs)
    chosen = [
        t
        for t, c in once.most_common()
        if c >= ANCHOR_SHARE * n
        and more[t] <= _ANCHOR_REPEAT * (c + more[t])
        and len(users[t]) >= k
    ][:_MAX_ANCHORS]
    wanted = set(chosen)
    rank_sum: Counter[str] = Counter()
    for _, items in docs:
        present = [it.text for it in items if it.text in wanted]
        for r, text in enumerate(present):
            rank_sum[text] += r
    return sorted(chosen, key=lambda t: (rank_sum[t] / once[t], t))


def _collect(
    groups: dict[tuple[int, str], list[tuple[str, list[tuple[Item, int]]]]],
    seg: int,
    items: Sequence[Item],
    user: str,
    cut: int,
) -> None:
    """Add one email's (or row's) items of a segment to their paths' sequences."""
    mine: dict[str, list[tuple[Item, int]]] = {}
    for pos, it in enumerate(items):
        mine.setdefault(it.plain[cut:], []).append((it, pos))
    for path, seq in mine.items():
        groups.setdefault((seg, path), []).append((user, seq))


def _slots(
    groups: dict[tuple[int, str], list[tuple[str, list[tuple[Item, int]]]]],
) -> dict[Slot, list[tuple[str, Item, int]]]:
    """Each path's items by slot: its column among the path's items (`columns`)."""
    slots: dict[Slot, list[tuple[str, Item, int]]] = {}
    for (seg, path), seqs in groups.items():
        cols = formation_columns([[it.text for it, _ in seq] for _, seq in seqs])
        for (user, seq), got in zip(seqs, cols, strict=True):
            for (it, pos), col in zip(seq, got, strict=True):
                slots.setdefault(Slot(seg, path, col), []).append((user, it, pos))
    return slots


def _sample(values: Sequence[tuple[str, Item, int]], k: int) -> list[tuple[str, str]]:
    """(recipient, value) pairs to fold a pattern over: one per recipient first (so >= k
    hold every fixed token whenever the slot has >= k recipients), then others, `_SAMPLE`
    or k at most."""
    limit = max(_SAMPLE, k)
    out: list[tuple[str, str]] = []
    users: set[str] = set()
    for user, it, _ in values:
        if user not in users:
            users.add(user)
            out.append((user, it.text))
            if len(out) == limit:
                return out
    for user, it, _ in values:
        if len(out) == limit:
            break
        out.append((user, it.text))
    return out


def _majority_type(values: Sequence[str]) -> str:
    return Counter(classify(v) for v in values[:_TYPE_SAMPLE]).most_common(1)[0][0]


def _parts(values: Sequence[str]) -> tuple[str, ...]:
    sigs = Counter(tuple(kind for kind, _ in typed_segments(v)) for v in values[:_SAMPLE])
    top, count = sigs.most_common(1)[0]
    return top if len(top) >= 2 and count >= _PART_SHARE * sum(sigs.values()) else ()


class _Stretch(NamedTuple):
    anchor: str
    rank: int
    until: str
    header: tuple[str, ...]
    """Anchors right before this stretch with nothing between them (column headers)."""


def _slot_rules(
    st: _Stretch, slot: Slot, values: list[tuple[str, Item, int]], k: int, context: str
) -> tuple[list[FieldRuleValue], str]:
    """The rules of one slot (a set per shape) and the fixed text a later slot's label may
    take."""
    if len({u for u, _, _ in values}) < k:
        return [], context
    patterns = slot_patterns(_sample(values, k), k)
    if HOLE not in patterns[-1]:
        text = label_text(join_tokens([t for t in patterns[-1] if t is not None]))
        return [], text if has_letter(text) else context
    example = Counter(it.xpath for _, it, _ in values).most_common(1)[0][0]
    left = values[:200]
    rules: list[FieldRuleValue] = []
    for pattern in patterns:
        matched: list[tuple[str, ...]] = []
        unmatched: list[tuple[str, Item, int]] = []
        for v in left:
            m = match(pattern, v[1].text)
            (matched.append(m) if m is not None else unmatched.append(v))
        left = unmatched
        rules += _pattern_rules(st, slot, pattern, matched, example, context)
    return rules, context


def _pattern_rules(  # noqa: PLR0917 - one slot's shape, as _slot_rules found it
    st: _Stretch,
    slot: Slot,
    pattern: Pattern,
    matched: Sequence[Sequence[str]],
    example: str,
    context: str,
) -> list[FieldRuleValue]:
    """The rules of one of a slot's patterns: a field per hole (or per typed part)."""
    rules: list[FieldRuleValue] = []
    hole = -1
    prefix: list[str] = []
    for token in pattern:
        if token is not None:
            prefix.append(token)
            continue
        hole += 1
        label = label_text(join_tokens(prefix))
        prefix = []
        if not has_letter(label):
            label = f"{context} {label}".strip() if context else label
        found = [m[hole] for m in matched if m[hole]]
        if not found:
            continue
        parts = _parts(found)
        kinds: list[str] = []
        if parts:
            for p, kind in enumerate(parts):
                vals = [s[p][1] for v in found if len(s := typed_segments(v)) == len(parts)]
                kinds.append(kind if kind in ("date", "money") else _majority_type(vals))
        else:
            kinds.append(_majority_type(found))
        for p, kind in enumerate(kinds):
            rules.append(
                FieldRuleValue(
                    xpath=example,
                    type=kind,
                    label=label,
                    anchor=st.anchor,
                    rank=st.rank,
                    until=st.until,
                    path=slot.path,
                    ordinal=slot.ordinal,
                    segment=slot.segment,
                    pattern=pattern,
                    hole=hole,
                    parts=parts,
                    part=p,
                )
            )
    return rules


def _stretch_rules(
    st: _Stretch, stretch_list: list[tuple[str, list[Item]]], k: int
) -> list[FieldRuleValue]:
    if len({u for u, _ in stretch_list}) < k:
        return []
    paths, cut = block_paths_of(stretch_list, k)
    groups: dict[tuple[int, str], list[tuple[str, list[tuple[Item, int]]]]] = {}
    for (user, _), parts in zip(stretch_list, cut, strict=True):
        for j, (plain, rows) in enumerate(parts):
            _collect(groups, 2 * j, plain, user, 0)
            for row in rows:
                _collect(groups, 2 * j + 1, row, user, len(paths[j]))
    slots = _slots(groups)
    order = sorted(
        slots, key=lambda s: (s.segment, sum(p for _, _, p in slots[s]) / len(slots[s]), s)
    )
    start = label_text(st.anchor) if has_letter(st.anchor) else ""
    block = label_text(st.header[0]) if len(st.header) >= 2 else start
    rules: list[FieldRuleValue] = []
    row_rules: dict[int, list[FieldRuleValue]] = {}
    labels: dict[int, str] = {}  # each block's label: the fixed text before it
    context = start  # the nearest fixed text so far
    row_context: dict[int, str] = {}  # the same within each block's rows
    for slot in order:
        seg = slot.segment
        if seg % 2:
            if seg not in labels:
                labels[seg] = block if seg == 1 else context
                row_context[seg] = labels[seg]
            got, row_context[seg] = _slot_rules(st, slot, slots[slot], k, row_context[seg])
            row_rules.setdefault(seg, []).extend(got)
        else:
            got, context = _slot_rules(st, slot, slots[slot], k, context)
            rules.extend(got)
    first = row_rules.get(1, [])
    if len(st.header) >= 2 and len(st.header) == len(first):  # a column header each
        row_rules[1] = [
            r if r.label not in ("", block) else replace(r, label=label_text(h))
            for r, h in zip(first, st.header, strict=True)
        ]
    row_path = BLOCK_SEP.join(paths)
    out = [replace(r, row_path=row_path) for r in rules]
    for seg, got in row_rules.items():
        out += [replace(r, row_path=row_path, block=labels[seg]) for r in got]
    return sorted(out, key=lambda r: r.segment)  # before the first block, its rows, ...


def form_field_rules(
    emails: Sequence[ClusterEmail], k: int, limit: int = MAX_FORM_EMAILS
) -> tuple[FieldRuleValue, ...]:
    """The field rules of a cluster (>= k distinct recipients; see the module's steps),
    read from at most `limit` of its emails (spread over it)."""
    docs = [(e.user, items_of(e.texts)) for e in _spread(emails, min(limit, MAX_FORM_EMAILS))]
    if not docs:
        return ()
    anchors = _anchors(docs, k)
    rank = {a: i + 1 for i, a in enumerate(anchors)}
    by_rank: dict[int, list[tuple[str, list[Item]]]] = defaultdict(list)
    for user, items in docs:
        for r, stretch in stretches(items, rank).items():
            by_rank[r].append((user, stretch))
    empty = {r for r, got in by_rank.items() if sum(map(len, (s for _, s in got))) < len(got) / 2}
    rules: list[FieldRuleValue] = []
    for r in sorted(by_rank):
        header = [anchors[r - 1]] if r else []
        j = r - 1
        while j >= 1 and j in empty:
            header.insert(0, anchors[j - 1])
            j -= 1
        st = _Stretch(
            anchors[r - 1] if r else "", r, anchors[r] if r < len(anchors) else "", tuple(header)
        )
        rules.extend(_stretch_rules(st, by_rank[r], k))
        if len(rules) >= MAX_RULES:
            break
    return tuple(rules[:MAX_RULES])
