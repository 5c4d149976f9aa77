"""Where a stretch's repeated blocks lie (formation): each block's row element, found from a
cluster's emails.

A block's row element is an element of a row tag (`_ROW_TAGS`) whose count, in its first
unbroken run under one parent (as `stretches.segment` reads a block), varies from email to
email and is two or more in `ROW_SHARE` of them; the shallowest such path wins, and a
further block is looked for in what follows it (`block_paths_of`, up to `MAX_BLOCKS`). An
element's lines (its ``<br>``-separated text pieces) are a block of lines the same way,
a line per row (`stretches.PIECE_ROWS`). A run of paragraphs is more often prose than a
loop (different sentences, some optional), and an element's lines more often an address
of fixed parts than a loop, so either is a block only when its rows are alike (`_alike`).
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from server.templates.spans import tokenize
from server.templates.stretches import MAX_BLOCKS, PIECE_ROWS, Item, segment, segments

__all__ = ["ALIKE_SHARE", "FIXED_LEAD", "ROW_SHARE", "block_paths_of"]

ROW_SHARE = 0.25
"""A repeated block has >= 2 rows in at least this share of the emails holding it."""
_ROW_TAGS = frozenset(
    {"tr", "tbody", "table", "td", "li", "ul", "ol", "div", "section", "article", "dl", "dd", "p"}
)
_PROSE_TAGS = frozenset({"p"})
"""Row tags whose runs are more often prose (different sentences, some optional) than a
loop: such a run is a block only when its rows are alike (`_alike`). Table and list rows
repeat by their nature, a header or total row beside one or two items included."""


@functools.lru_cache(maxsize=16_384)
def _row_steps(xpath: str) -> dict[str, tuple[str, str]]:
    """The row-tag steps of `xpath`: index-free path -> (parent's indexed path, indexed
    path), for each step whose tag may repeat as a block's row. Cached (read it, never
    change it): a layout's paths recur in every email of a cluster."""
    out: dict[str, tuple[str, str]] = {}
    indexed = plain = ""
    for step in xpath.split("/")[1:]:
        parent = indexed
        indexed += "/" + step
        tag = step.split("[", 1)[0]
        plain += "/" + tag
        if tag in _ROW_TAGS:
            out[plain] = (parent, indexed)
    return out


@dataclass(slots=True)
class _Run:
    """A path's run of row elements in one email's stretch."""

    parent: str
    rows: set[str]
    last: int
    """The position of its last xpath (-2 once the run has ended)."""


def _runs(items: Sequence[Item]) -> dict[str, _Run]:
    """Each row path's first unbroken run of row elements under one parent in an email's
    stretch, as `segment` reads a block: an item outside the run ends it. A run stays open
    while each xpath in turn holds its path under its parent (an element's items are
    consecutive), so its last xpath is the one just before."""
    runs: dict[str, _Run] = {}
    for pos, xpath in enumerate(dict.fromkeys(it.xpath for it in items)):
        for plain, (parent, indexed) in _row_steps(xpath).items():
            run = runs.get(plain)
            if run is None:
                runs[plain] = _Run(parent, {indexed}, pos)
            elif run.last == pos - 1 and run.parent == parent:
                run.rows.add(indexed)
                run.last = pos
            else:
                run.last = -2  # ended: no later position follows it
    return runs


def _lines(items: Sequence[Item]) -> dict[str, list[str]]:
    """Each path's block of lines in an email's stretch (`PIECE_ROWS`): the pieces of the
    first element on the path, keyed by that path's row path."""
    out: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    prev = ""
    for it in items:
        if it.plain not in first:
            first[it.plain] = it.xpath
            out[it.plain + PIECE_ROWS] = [it.text]
        elif it.xpath == first[it.plain] == prev:
            out[it.plain + PIECE_ROWS].append(it.text)
        prev = it.xpath
    return out


def _row_path(stretch_list: Sequence[tuple[str, list[Item]]], k: int) -> str:
    """The row element's index-free path of a stretch's repeated block ("" when none)."""
    counts: dict[str, list[int]] = defaultdict(list)
    held: dict[str, list[tuple[str, list[str]]]] = defaultdict(list)
    showing: dict[str, set[str]] = defaultdict(set)  # recipients whose stretch holds the path
    for user, items in stretch_list:
        for plain, run in _runs(items).items():
            counts[plain].append(len(run.rows))
            showing[plain].add(user)
            if len(run.rows) >= 2 and plain.rsplit("/", 1)[-1] in _PROSE_TAGS:
                _, rows, _ = segment(items, plain)  # the run's rows, as reading cuts them
                held[plain].append((user, [" ".join(it.text for it in row) for row in rows]))
        for plain, lines in _lines(items).items():
            counts[plain].append(len(lines))
            if len(lines) >= 2:
                held[plain].append((user, lines))
            showing[plain].add(user)
    best = ""
    for plain, got in counts.items():
        if len(set(got)) < 2 or sum(c >= 2 for c in got) < ROW_SHARE * len(got):
            continue
        if len(showing[plain]) < k:  # an optional block is judged where it is shown
            continue
        if best and plain.count("/") >= best.count("/"):
            continue
        if plain not in held or _alike(held[plain], k):
            best = plain
    return best


ALIKE_SHARE = 0.6
"""A repeated block's rows are alike: at least this share of them (in the emails holding
two or more) have one form (`_alike`)."""
_LEAD = 3
"""Tokens of a row's text that tell its form."""
FIXED_LEAD = 1 / 3
"""A row's lead is fixed text when it begins a row in at least this share of the emails."""


def _alike(held: Sequence[tuple[str, list[str]]], k: int) -> bool:
    """Whether runs of rows whose count varies are one block repeated, not a run of
    different elements some of which are optional (paragraphs of fixed text, each shown or
    not; an address's lines around an optional one). A row's form is the longest run of
    its first `_LEAD` tokens that is a fixed lead: it begins rows of at least `FIXED_LEAD`
    of the emails (two at least), and more rows than it occurs in after their first token
    (a word of free text that begins some rows by chance occurs inside others). A row
    without one has its first token's kind for form. The rows of a block have one form
    (`ALIKE_SHARE` of them): a header or closing row beside them is a minority; paragraphs
    of different fixed sentences have as many forms; rows most of which are their fixed
    lead alone hold no values. Fewer than k emails holding two rows or more tell nothing:
    no block."""
    users = len({user for user, _ in held})
    if users < k:
        return False
    rows = [(user, tokenize(text)) for user, texts in held for text in texts]
    lows = [tuple(t.text.lower() for t in toks) for _, toks in rows]
    starts: dict[tuple[str, ...], set[str]] = defaultdict(set)
    begun: Counter[tuple[str, ...]] = Counter()
    for (user, _), low in zip(rows, lows, strict=True):
        for n in range(1, min(_LEAD, len(low)) + 1):
            starts[low[:n]].add(user)
            begun[low[:n]] += 1
    inside: Counter[tuple[str, ...]] = Counter()
    for low in lows:
        for i in range(1, len(low)):
            inside.update(low[i : i + n] for n in range(1, _LEAD + 1) if low[i : i + n] in begun)
    least = max(2, FIXED_LEAD * users)
    forms: Counter[tuple[str, ...]] = Counter()
    fixed = 0
    for (_, toks), low in zip(rows, lows, strict=True):
        n = min(_LEAD, len(low))
        while n and (len(starts[low[:n]]) < least or inside[low[:n]] >= begun[low[:n]]):
            n -= 1
        forms[low[:n] if n else ("", toks[0].kind if toks else "")] += 1
        fixed += n == len(low)
    total = sum(forms.values())
    if 2 * fixed > total:  # rows of fixed text alone (a breadcrumb's separators): no values
        return False
    return not total or forms.most_common(1)[0][1] >= ALIKE_SHARE * total


def block_paths_of(
    stretch_list: Sequence[tuple[str, list[Item]]], k: int
) -> tuple[list[str], list[list[tuple[list[Item], list[list[Item]]]]]]:
    """The row paths of a stretch's repeated blocks, one after another (at most
    `MAX_BLOCKS`), each found among what follows the one before (all of the stretch in an
    email lacking that one), and each email's stretch cut by them as `segments` cuts it."""
    paths: list[str] = []
    rests = [list(items) for _, items in stretch_list]
    users = [user for user, _ in stretch_list]
    while len(paths) < MAX_BLOCKS:
        path = _row_path(list(zip(users, rests, strict=True)), k)
        if not path:
            break
        paths.append(path)
        for i, rest in enumerate(rests):
            _, rows, after = segment(rest, path)
            if rows:
                rests[i] = after
    return paths, [segments(items, paths) for _, items in stretch_list]
