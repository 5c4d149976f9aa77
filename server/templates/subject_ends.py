"""How the subjects of a candidate side A and of the rest of its group compare (rule 2 of
`server/templates/grouping.py`): their fixed starts, and their ends read last word first.

`Tally` is what one split's scoring counts of both sides; its `Ends` record the subject
prefixes (or suffixes) each side holds and decide, by the rules in `Ends.differ`, whether
A's subjects and the rest's are two templates' subjects or one template's variants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from server.templates.tokens import END

__all__ = ["Ends", "Tally"]

_SEEN = 2
"""Emails of a side a subject prefix must be in to count as one of that side's."""


def _after(seen: set[tuple[str, ...]], prefix: tuple[str, ...]) -> set[str]:
    """The words (or END) that follow `prefix` among the subject prefixes `seen`."""
    n = len(prefix)
    return {s[n] for s in seen if len(s) == n + 1 and s[:n] == prefix}


def _compatible(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether one subject prefix starts the other."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


@dataclass(slots=True)
class Ends:
    """One end of the subjects of a side A and of the rest of its group: their prefixes, or
    their suffixes read last word first (the same rules hold at either end)."""

    a: tuple[str, ...] = ()
    rest: tuple[str, ...] = ()
    seen_a: set[tuple[str, ...]] = field(default_factory=set)
    """Prefixes (``$``-ended when the whole subject) in some of A's emails."""
    seen_rest: set[tuple[str, ...]] = field(default_factory=set)
    held_rest: set[tuple[str, ...]] = field(default_factory=set)
    """Prefixes in k or more of the rest's emails."""
    whole: tuple[str, ...] = ()
    """A whole subject (``$``-ended) in nearly all of both sides' emails."""

    def add(
        self,
        prefix: tuple[str, ...],
        in_a: int,
        in_rest: int,
        *,
        all_a: float,
        all_rest: float,
        k: int,
    ) -> None:
        """Records a prefix found in `in_a` of A's emails and `in_rest` of the rest's; keeps
        the longest in (nearly) all of each side (`all_a`, `all_rest` emails or more)."""
        if in_a >= _SEEN:
            self.seen_a.add(prefix)
        if in_rest >= _SEEN:
            self.seen_rest.add(prefix)
        if in_rest >= k:
            self.held_rest.add(prefix)
        if prefix[-1:] == (END,):
            if in_a >= all_a and in_rest >= all_rest:
                self.whole = prefix
            return
        if in_a >= all_a and len(prefix) > len(self.a):
            self.a = prefix
        if in_rest >= all_rest and len(prefix) > len(self.rest):
            self.rest = prefix

    def differ(self, *, shared: bool = False) -> bool:
        """Whether A's and the rest's subjects are two templates' subjects at this end.

        Each side's subject is the longest prefix nearly all its emails share. They differ
        when neither starts the other, when the rest has none that starts A's, or when one
        starts the other but both go on alike: the same word (or the end) follows each in
        some emails (``Invoice`` / ``Invoice paid``, each alone or followed by ``for`` and a
        name). One template's variants share a prefix, and what follows it in one variant
        is a value, never k-anonymous (``Your order`` / ``Your order for`` + a name).

        A rest of several templates shares no prefix; its emails that begin as A's do stand
        for it (`_stem`), so a variant of one template in a group of several (``Welcome`` /
        ``Welcome for`` + a name) is no template of its own. Unless they all begin alike: a
        sender's name on every subject (``[Acme] Welcome`` / ``[Acme] Password reset``…) is
        the rest's prefix, which A's goes on from. They differ when the rest's emails go on
        from it into other words each k or more of them share (other templates' starts); a
        value there is in fewer (a name, ``[Acme] Your order for`` + a name).

        A rest with no start at all (nor one along A's) differs, as a template not yet
        k-anonymous does, unless the two sides `shared` subject text in nearly all their
        emails and none of the rest's starts is held by k of its emails: then A's start is a
        value before a subject both have (a first name k recipients happen to share).
        """
        a, rest = self.a, self.rest
        if not a:
            return False
        if rest and len(rest) < len(a) and a[: len(rest)] == rest:
            n = len(rest)
            branches = {q[n] for q in self.held_rest if len(q) == n + 1 and q[:n] == rest}
            if branches - {END, a[n]}:
                return True
        if not rest:
            rest = self._stem(a)
            if not rest:
                return not shared or bool(self.held_rest)
        if not _compatible(a, rest):
            return True
        if a == rest:
            return False
        return bool(_after(self.seen_a, a) & _after(self.seen_rest, rest))

    def _stem(self, a: tuple[str, ...]) -> tuple[str, ...]:
        """The rest's emails that begin as A's do, as a prefix: the longest in some of the
        rest's emails that starts A's or that A's starts, when the rest's prefixes along A's
        go on along one line (empty: they branch, or there are none)."""
        line = [p for p in self.seen_rest if p[-1:] != (END,) and _compatible(p, a)]
        if not line:
            return ()
        stem = max(line, key=len)
        if any(p != stem[: len(p)] for p in line):
            return ()
        if any(_after(self.seen_rest, p) - {END, a[len(p)]} for p in line if len(p) < len(a)):
            return ()
        return stem


@dataclass(slots=True)
class Tally:
    """What one candidate side A and the rest of its group hold."""

    own: int = 0
    own_subject: int = 0
    rest_subject: int = 0
    """Subject shingles the rest owns."""
    block: int = 0
    """The largest block of text the rest has and A lacks (tokens in the same emails)."""
    common: int = 0
    common_subject: int = 0
    """Subject shingles in (nearly) all of both sides' emails."""
    ends: dict[str, Ends] = field(default_factory=lambda: {"prefix": Ends(), "suffix": Ends()})
    """The subjects' starts and ends."""

    def subjects_differ(self, min_own: int) -> bool:
        """Whether A's and the rest's subjects are two templates' subjects: at their start,
        or at their end (``Ticket 12 (Closed)`` / ``Ticket 9 (Reopened)``, read last word
        first by the same rules) when A also owns `min_own` tokens of body text. A subject
        ends with a value more often than it starts with one (``… for Ava Lopez``): a
        surname from a short list ends the subjects of every template alike, and the emails
        it ends own no body text."""
        shared = self.common_subject > 0
        if self.ends["prefix"].differ(shared=shared):
            return True
        return self.own >= min_own and self.ends["suffix"].differ(shared=shared)
