"""A text slot's patterns: one per shape its values take (`slot_patterns`).

A slot's values across a template's emails usually share one shape, and the tokens they
all hold are its pattern (`spans.build_pattern`). Some slots have several: a member line
that is ``Name (address)`` in most emails and the address alone in others, or an event
notice's sentence that is one of several alternatives (``pushed … commits to …``,
``merged #… into …``, ``@name``). The common tokens of all lose each shape's fixed ones,
so each shape gets a pattern of its own, read by the first that fits. Only shapes held by
>= k recipients get one (so every fixed token still is), and chance groupings (a common
word of free text, a first name several recipients share) are refused. Pure functions
over at most a sample of values (`extraction._SAMPLE`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from server.templates.spans import (
    HOLE,
    Pattern,
    Token,
    build_pattern,
    has_letter,
    match,
    token_texts,
    tokenize,
    usual_tokens,
)

__all__ = ["MAX_SHAPES", "slot_patterns"]

MAX_SHAPES = 7
"""Alternatives peeled off one slot at most (`slot_patterns`); with the pattern of what is
left, and the pattern of all after a constant one, a slot has at most two patterns more."""

Tokenized = Sequence[tuple[str, tuple[Token, ...]]]
"""A slot's sampled values: (recipient, tokens) each."""


def _fold(tokens: Tokenized, group: Iterable[int]) -> Pattern:
    """The pattern of the sampled values `group` (indices into `tokens`)."""
    return build_pattern([tokens[i][1] for i in group])


def _recipients(tokens: Tokenized, group: Iterable[int]) -> int:
    return len({tokens[i][0] for i in group})


def slot_patterns(samples: Sequence[tuple[str, str]], k: int) -> list[Pattern]:
    """The slot's patterns, most specific first: one over every sample, unless the slot
    has several shapes, whose common tokens lose each shape's fixed ones.

    - A majority shape (``Ava Kim (ava@mail.example)`` in most emails, the address alone
      in others): the samples holding every token most samples hold, in order, get a
      pattern of their own, and the rest get theirs.
    - Else (or where the majority's own tokens are lone words, `_structural`)
      alternatives none of which most emails show (an event notice's ``pushed …
      commits to …``, ``merged #… into …``, ``@…``; a gift ``will be sent to … on …`` or
      ``is on its way to …``): each group of samples whose text in one hole of the
      pattern of all starts with one token, and that hold words of their own
      (`_alternative`), gets its pattern, the most recipients' first, and what is left
      gets its own (`MAX_SHAPES` alternatives at most).

    Each group needs >= k recipients (else the samples left fall back to the pattern of
    all), so every fixed token is still held by >= k recipients."""
    if len({text for _, text in samples}) == 1:  # one value everywhere: fixed text
        return [tuple(t.text for t in tokenize(samples[0][1]))]
    tokens = [(user, tokenize(text)) for user, text in samples]
    held = [token_texts(text) for _, text in samples]
    whole = build_pattern([t for _, t in tokens])

    every = range(len(samples))
    usual = usual_tokens(held)
    if usual and not usual <= {x for x in whole if x is not None}:
        main = [i for i in every if usual <= held[i]]
        rest = [i for i in every if not usual <= held[i]]
        if (
            _recipients(tokens, main) >= k
            and rest
            and _structural(first := _fold(tokens, main), whole)
        ):
            return _closed([first], tokens, rest, whole, k)
    return _peel(samples, tokens, held, whole, k)


def _peel(
    samples: Sequence[tuple[str, str]],
    tokens: Tokenized,
    held: Sequence[frozenset[str]],
    whole: Pattern,
    k: int,
) -> list[Pattern]:
    """`slot_patterns` where no majority shape splits the slot: its alternatives peeled off one
    group at a time, then what is left (the pattern of all alone when there are none)."""

    heads = [  # each sample's first token in each hole of `whole`, by hole
        [(h, first[0].text) for h, value in enumerate(holes) if (first := tokenize(value)[:1])]
        for _, text in samples
        for holes in (match(whole, text) or (),)
    ]
    out: list[Pattern] = []
    left = list(range(len(samples)))
    while len(out) < MAX_SHAPES:
        starts: dict[tuple[int, str], list[int]] = defaultdict(list)
        for i in left:
            for head in heads[i]:
                starts[head].append(i)
        found = None
        for (_, start), group in sorted(
            starts.items(), key=lambda g: (-_recipients(tokens, g[1]), g[0])
        ):
            if _recipients(tokens, group) < k:
                break
            if len(group) < len(left):
                others = [held[i] for i in left if i not in group]
                if _alternative(start, pattern := _fold(tokens, group), whole, others):
                    found = group, pattern
                    break
        if found is None:
            break
        out.append(found[1])
        left = [i for i in left if i not in found[0]]
    if not out:
        return [whole]
    return _closed(out, tokens, left, whole, k)


def _closed(
    shapes: list[Pattern], tokens: Tokenized, left: Sequence[int], whole: Pattern, k: int
) -> list[Pattern]:
    """`shapes`, then the pattern of the values `left` (the pattern of all when they have
    fewer than k recipients). A constant shape last (``force-pushed the``, ``Hello,``) has
    no field: the pattern of all after it reads what no shape fits, as one value, and the
    slot is not taken for fixed text."""
    last = _fold(tokens, left) if _recipients(tokens, left) >= k else whole
    return [*shapes, last] if HOLE in last else [*shapes, last, whole]


def _alternative(
    start: str, pattern: Pattern, whole: Pattern, others: Sequence[frozenset[str]]
) -> bool:
    """Whether a group's pattern, its samples all starting one hole of `whole` with the
    token `start`, looks like an alternative of the slot, not chance: it holds two or more
    tokens of its own, or one when `start` is punctuation (``@…``, ``#…``). A token of its
    own is one `whole` does not hold and none of the `others` (the slot's samples outside
    the group) holds: an alternative sentence's words are its own, while a word several
    free-text values start with (``The``) or a first name several recipients share comes
    with words the others hold too."""
    if start not in pattern:
        return False
    own = sum(
        1
        for x, extra in zip(pattern, _beyond(pattern, whole), strict=True)
        if extra and not any(x in h for h in others)
    )
    punct = not has_letter(start) and not start.isdigit()
    return own >= 2 or (own >= 1 and punct)


def _structural(first: Pattern, whole: Pattern) -> bool:
    """Whether the tokens `first` has beyond `whole` look like a shape, not chance: each
    run of them (between holes and `whole`'s tokens) is punctuation, a phrase of two or
    more tokens, or a word that begins or ends every value (``… days``, ``Hi …``). A lone
    word most values hold by chance (a common word of free text) sits between two holes
    and splits a value that is one field."""
    runs: list[tuple[list[str], bool]] = []  # each run, and whether it is at an edge
    run: list[str] = []
    start = 0
    for i, (x, extra) in enumerate(
        zip((*first, None), (*_beyond(first, whole), False), strict=True)
    ):
        if extra and x is not None:
            if not run:
                start = i
            run.append(x)
            continue
        if run:
            runs.append((run, start == 0 or i == len(first)))
            run = []
    punct = {t.text for x in first if x is not None for t in tokenize(x) if t.kind == "punct"}
    return bool(runs) and all(len(r) >= 2 or r[0] in punct or edge for r, edge in runs)


def _beyond(pattern: Pattern, whole: Pattern) -> list[bool]:
    """For each item of `pattern`, whether it is a fixed token `whole` does not account
    for (each of `whole`'s fixed tokens accounts for one occurrence, first come first)."""
    left = Counter(x for x in whole if x is not None)
    out: list[bool] = []
    for x in pattern:
        if x is None or left[x] <= 0:
            out.append(x is not None)
        else:
            left[x] -= 1
            out.append(False)
    return out
