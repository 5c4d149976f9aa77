"""How one cluster row's emails divide into templates: by the text each template owns.

A row holds the emails of one sender in one layout. Several templates may share that
layout (a receipt, a password reset and a welcome of one vendor), and one template's
instances differ: optional blocks come and go, repeated blocks repeat 1-10 times, values
differ. Only k-anonymous tokens (`server/templates/tokens.py`, each seen by >= k distinct
recipients of the row) are used, so nothing seen by fewer ever shapes a template.

A token *lives* on one side of a split when (nearly) all of its emails are there, and is
*in* a side when (nearly) all of that side's emails have it. What tells two templates
from one template's variants:

1. **Both sides own text.** Side A owns text that lives in A and is in all of A; a block of
   the rest's text lives in the rest. Two templates each have sentences of their own. One
   template's optional block does not split it: its emails without the block own nothing
   the others lack (their other blocks, line items and values occur on both sides). Each
   side's own text must be at least `min_own` tokens and `min_own_share` of the text both
   sides share, so a one-word alternative (``1 day``/``2 days``) splits nothing, but
   never more than `own_share_cap` tokens: two emails of one long layout that differ by a
   sentence each (a trial *expiring* and a trial *expired* notice) are two templates.
   Sides that keep one subject (neither owns subject text, and their fixed start, end or
   whole subject are the same) which k or more of the row's emails lack need that
   sentence each: a template's alternative panels (a translation site's ``Project
   information`` or ``Translation info`` under ``New contributor in`` + a project) own a
   heading and a line each, and the subject the sender gives that template alone says
   they are one. A subject the whole row shares (the sender's one subject) says nothing.
2. **The subjects differ.** A owns subject text, and the longest subject prefix nearly all
   of A's emails share is not compatible with the rest's (neither starts the other), or
   the rest shares none. Instances of one template keep their subject's fixed start and
   differ after it (``Your order`` / ``Your order #1234`` / ``Your order for Ava``); the
   rest's emails either begin differently (another template) or share no k-anonymous
   subject at all (a template not yet k-anonymous, whose text is invisible): leaving
   those out rather than folding them in keeps the formed template's core its own. A rest
   that shares no start but does share subject text with A, its emails beginning with
   words each fewer than k of them hold, is A's template with a value at its start (the
   recipient's first name: ``Lena, confirm your new email address``, where k recipients
   happen to be called Lena), and splits nothing. A rest
   of several templates shares no prefix: its emails that begin as A's do stand for it (a
   ``Welcome for`` + a name beside ``Welcome`` and other templates splits nothing). A rest
   whose emails all begin alike (the sender's name on every subject: ``[Acme] …``) goes on
   from that start into other words each >= k of its emails share: other templates.
   The same holds at the subject's end, read last word first: a ticket system's
   ``<title> (Closed)`` and ``<title> (Resolved)`` begin with a value and differ only
   there. A subject ends with a value more often than it begins with one (``… for Ava
   Lopez``, a surname from a short list ending every template's subjects alike), so an
   end counts only when A also owns `min_own` tokens of body text, as a template's
   emails do and a value's, spread over templates, do not.
3. **Only one side has text of its own, and it outweighs what both share.** A template
   whose text is all values (a notification that is one generated sentence) owns no token
   k recipients share, so rules 1 and 2 cannot tell it from a sibling that does. The rest
   (>= k recipients) splits from A when A's own text is at least `own_over_shared` times
   the text both sides share (a footer): an optional block is a minority of its template's
   text, which its emails without the block still share.
   Taken only when no split of rules 1 and 2 is left.
4. **A side that cuts across templates waits** (`cut_ratio`; 0 turns it off). One row's
   templates, and the blocks inside each, nest. A block several templates share in some
   of their emails (an optional footer, a notice) or a value from a short list cuts across
   them: of two valid sides that cross (each of the three parts with >= k emails), the
   one that `cut_ratio` times as much text (tokens of classes it cuts) cuts across is
   such a block and is not taken while the other is there; once the templates are apart,
   its part in each is a block inside its template. A side only its subject tells apart
   crosses a bigger side it overlaps however few emails they share: the recipient's first
   name on every subject (``Ava, news from Acme``), from a short list, starts k subjects
   of a row but fewer than k of each template's. A smaller side (a value in k emails of
   several templates that only their subjects tell apart) crosses it as any side does,
   with k emails in each part: a template is not held back for a value some of its emails
   hold.

Candidate sides are the email sets of the row's tokens (a template's own text, an optional
block, a subject's words); a side inside a bigger candidate that splits off itself waits
for it (an optional block inside its template), one inside text that splits nothing off
(a footer line most templates of the row share) does not. The best split (the most own
text on its weaker side) is taken and each side divided again until none divides; a part
with >= k distinct recipients is a template, the others wait. Tokens are counted by class
(tokens found in exactly the same emails) with emails as the bits of an int: a real row of
450 emails and 19 templates divides in about 0.1 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.templates.subject_ends import Tally
from server.templates.tokens import is_subject, prefix_words, suffix_words

__all__ = ["GroupingParams", "group_emails"]


@dataclass(frozen=True, slots=True)
class GroupingParams:
    """The thresholds of the split rules."""

    present: float = 0.9
    """A token is *in* a side when at least this share of the side's emails has it."""
    absent: float = 0.1
    """A token *lives* on a side when at most this share of its emails are elsewhere."""
    min_own: int = 2
    """Least tokens of own text each side needs (rule 1)."""
    min_own_share: float = 0.1
    """Least own text as a share of the text both sides share (rule 1)."""
    own_share_cap: int = 8
    """Most own text `min_own_share` may ask for (0: no cap): a sentence of its own on each
    side splits two templates however long the text they share (rule 1)."""
    own_over_shared: float = 2.0
    """Least own text of A as a multiple of the text both sides share (rule 3; 0: off)."""
    cut_ratio: float = 2.0
    """Of two sides that cross, one that cuts across this many times as much of the row's
    text as the other waits for it (rule 4; 0: never)."""


@dataclass(frozen=True, slots=True)
class _Class:
    """Tokens found in exactly the same emails."""

    mask: int
    """Their emails, as bits."""
    weight: int
    """How many tokens."""
    kind: str
    """``text``, ``subject`` (subject shingles), ``prefix`` or ``suffix``."""
    prefix: tuple[str, ...] = ()
    """For a prefix or suffix class: the longest among its tokens (a suffix's words last
    first)."""


_ENDS = ("prefix", "suffix")
"""Class kinds of a subject's start and (words last first) end."""
_LAST = 1e-6
"""Scales rule 3's score below any split rules 1 and 2 find (theirs are >= 1 token; a
side's own text is far below a million tokens)."""


def _end_words(token: str) -> tuple[str, ...]:
    """A prefix's words, or a suffix's words last first."""
    return prefix_words(token) or suffix_words(token) or ()


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


class _Divider:
    def __init__(
        self, sigs: Sequence[frozenset[str]], users: Sequence[str], k: int, p: GroupingParams
    ) -> None:
        self.users = users
        self.k = k
        self.p = p
        masks: dict[str, int] = {}
        for i, sig in enumerate(sigs):
            bit = 1 << i
            for tok in sig:
                masks[tok] = masks.get(tok, 0) | bit
        grouped: dict[tuple[int, str], list[str]] = {}
        for tok, mask in sorted(masks.items()):  # a fixed order: the same split on every run
            kind = (
                "prefix"
                if prefix_words(tok) is not None
                else "suffix"
                if suffix_words(tok) is not None
                else "subject"
                if is_subject(tok)
                else "text"
            )
            grouped.setdefault((mask, kind), []).append(tok)
        self.row = (1 << len(sigs)) - 1
        self.classes = [
            _Class(
                mask,
                len(toks),
                kind,
                max((_end_words(t) for t in toks), key=len) if kind in _ENDS else (),
            )
            for (mask, kind), toks in grouped.items()
        ]
        self.ends = {(c.kind, c.prefix): c.mask for c in self.classes if c.kind in _ENDS}
        """Each subject start's (or end's) emails in the row."""

    def recipients(self, mask: int) -> int:
        return len({self.users[i] for i in _bits(mask)})

    def divide(self, group: int) -> list[int]:
        """`group` (a mask) divided into parts none of which divides further."""
        pending, done = [group], []
        while pending:
            g = pending.pop()
            side = self._best_split(g)
            if side is None:
                done.append(g)
            else:
                pending.extend((side, g & ~side))
        return done

    def _local(self, g: int) -> list[_Class]:
        merged: dict[tuple[int, str, tuple[str, ...]], int] = {}
        for c in self.classes:
            m = c.mask & g
            if m:
                key = (m, c.kind, c.prefix)
                merged[key] = merged.get(key, 0) + c.weight
        return sorted(
            (_Class(m, w, kind, prefix) for (m, kind, prefix), w in merged.items()),
            key=lambda c: (-c.weight, c.mask, c.kind, c.prefix),
        )

    def _best_split(self, g: int) -> int | None:
        """The side A of the best valid split of `g` into A and g - A, or None."""
        classes = self._local(g)
        # Text found in a strict superset W of A (and not everywhere) makes A a part of a
        # bigger side when W is a side itself: an optional block inside its template, a
        # template inside a family of templates sharing a paragraph; W splits first. Text
        # in a W that is no side of its own (a footer line most templates of the row have,
        # a sentence one sibling has in some emails) makes A part of nothing.
        wider = [c.mask for c in classes if c.kind == "text" and c.weight >= self.p.min_own]
        valid: list[tuple[float, int]] = []
        by_subject: set[int] = set()
        tried: set[int] = set()
        sides: dict[int, bool] = {}

        def is_side(w: int) -> bool:
            """Whether W would split from the rest of `g` itself (cached)."""
            if w not in sides:
                sides[w] = (
                    w.bit_count() >= self.k
                    and self._score(classes, w, g & ~w)[0] > 0
                    and self.recipients(w) >= self.k
                )
            return sides[w]

        for candidate in classes:
            a = candidate.mask
            # A side is a template's own text (several tokens in exactly its emails) or its
            # subject; a lone token in some emails (a common phrase in personal text) is
            # neither, and a side with fewer than k emails cannot have k recipients.
            if candidate.kind == "text" and candidate.weight < self.p.min_own:
                continue
            if a == g or a in tried or a.bit_count() < self.k:
                continue
            tried.add(a)
            if any(w not in (a, g) and w & a == a and is_side(w) for w in wider):
                continue
            score, subject_only = self._score(classes, a, g & ~a)
            if score and self.recipients(a) >= self.k:
                valid.append((score, a))
                if subject_only:
                    by_subject.add(a)
        if self.p.cut_ratio and len(valid) > 1:  # rule 4
            texts = [c for c in classes if c.kind == "text"]
            valid = _uncrossed(valid, texts, self.k, self.p.cut_ratio, by_subject)
        best = max(valid, key=lambda v: v[0], default=None)  # the first of equal scores
        return None if best is None else best[1]

    def _score(self, classes: list[_Class], a: int, rest: int) -> tuple[float, bool]:
        """How strongly A and the rest are two templates (0: they are not), and whether
        A's subject alone tells them apart (rule 2 without rule 1)."""
        p = self.p
        t = self._tally(classes, a, rest)
        share = p.min_own_share * t.common
        need = max(p.min_own, min(share, p.own_share_cap) if p.own_share_cap else share)
        split = min(t.own, t.block)
        if split >= need and (split >= p.own_share_cap or not self._one_subject(t)):
            return float(split), False
        if t.own_subject and t.subjects_differ(p.min_own):
            return float(t.own + t.own_subject), True
        if (
            p.own_over_shared
            and t.own >= max(p.min_own, p.own_over_shared * t.common)
            and self.recipients(rest) >= self.k
        ):
            return float(t.own) * _LAST, False
        return 0.0, False

    def _tally(self, classes: list[_Class], a: int, rest: int) -> Tally:
        """What A and the rest hold: own, shared and subject text, and the rest's blocks."""
        p = self.p
        n_a, n_r = a.bit_count(), rest.bit_count()
        t = Tally()
        anti: dict[int, int] = {}
        for c in classes:
            total = c.mask.bit_count()
            in_a = (c.mask & a).bit_count()
            in_r = total - in_a
            if c.kind in _ENDS:
                t.ends[c.kind].add(
                    c.prefix, in_a, in_r, all_a=p.present * n_a, all_rest=p.present * n_r, k=self.k
                )
            lives_in_a = in_r <= p.absent * total
            if in_a >= p.present * n_a and lives_in_a:
                if c.kind == "text":
                    t.own += c.weight
                else:
                    t.own_subject += c.weight
            elif in_a >= p.present * n_a and in_r >= p.present * n_r:
                if c.kind == "text":
                    t.common += c.weight
                elif c.kind == "subject":
                    t.common_subject += c.weight
            elif c.kind == "subject" and in_r >= p.present * n_r and in_a <= p.absent * total:
                t.rest_subject += c.weight
            if c.kind == "text" and in_a <= p.absent * total and in_r >= 2:
                block = c.mask & rest
                anti[block] = anti.get(block, 0) + c.weight
        t.block = max(anti.values(), default=0)
        return t

    def _one_subject(self, t: Tally) -> bool:
        """Whether A and the rest keep one subject that k or more of the row's emails lack
        (rule 1's exception): neither side owns subject text, both share subject words, and
        their fixed starts, ends and whole subjects are the same."""
        if t.own_subject or t.rest_subject or not t.common_subject:
            return False
        held = []
        for kind in _ENDS:
            e = t.ends[kind]
            if e.a != e.rest:
                return False
            held += [(kind, x) for x in (e.a, e.whole) if x]
        return bool(held) and all(
            (self.row & ~self.ends.get(end, 0)).bit_count() >= self.k for end in held
        )


def _crosses(a: int, b: int, least: int = 1) -> bool:
    """Whether `a` and `b` overlap and neither holds the other, each of the three parts
    with at least `least` emails."""
    return min((a & b).bit_count(), (a & ~b).bit_count(), (b & ~a).bit_count()) >= least


def _uncrossed(
    valid: list[tuple[float, int]],
    texts: list[_Class],
    k: int,
    ratio: float,
    by_subject: set[int],
) -> list[tuple[float, int]]:
    """The valid sides less those that cut across a side the row's text agrees with more.

    One row's templates, and the blocks inside each, nest; a block or a value several
    templates share (an optional footer in some emails of each, a name from a short list)
    cuts across them, and across all of their own text. Of two sides that cross (each part
    with k emails or more: a smaller one can be no template), the one `ratio` times as much
    text cuts across is that block, and waits: once the templates are apart, its part in
    each is a block inside its template. Text cutting across a side is weighed by its
    tokens (`texts`: the classes of the group).

    A side only its subject tells apart (`by_subject`: rule 2 without rule 1) crosses any
    side as big or bigger that it overlaps without holding or being held, however few
    emails they share: a first name from a short list starts the subjects of k emails of a
    row but fewer than k of each template's, and asked for k in each part it would split
    every template by name. Other crossings keep the k bar: a value from a short list in
    a few of a template's emails must not hold the template back, whether the value's
    side owns text or subject words (Weblate's notices, which only their subjects tell
    apart, were each divided by a user's name in k emails of the row).
    """
    crossed = {
        a: [
            b
            for _, b in valid
            if _crosses(a, b, 1 if a in by_subject and a.bit_count() <= b.bit_count() else k)
        ]
        for _, a in valid
    }
    cut: dict[int, int] = {}

    def cut_of(side: int) -> int:
        if side not in cut:
            cut[side] = sum(c.weight for c in texts if _crosses(side, c.mask))
        return cut[side]

    return [
        (score, a)
        for score, a in valid
        if not any(ratio * cut_of(b) < cut_of(a) for b in crossed[a])
    ]


def group_emails(
    sigs: Sequence[frozenset[str]],
    users: Sequence[str],
    k: int,
    p: GroupingParams | None = None,
) -> list[list[int]]:
    """Indexes of `sigs` (each email's k-anonymous tokens) grouped by template.

    Every email is in exactly one group; a group with fewer than k distinct `users` is not
    a template (yet).
    """
    if not sigs:
        return []
    divider = _Divider(sigs, users, k, p or GroupingParams())
    parts = divider.divide((1 << len(sigs)) - 1)
    return sorted((_bits(m) for m in parts), key=lambda g: g[0])
