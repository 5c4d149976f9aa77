"""What the clustering server remembers of each cluster row: the paper's client-side cache of
its threshold checks (§4.3: "client-side caching of threshold check results").

Algorithm 2 fetches s, n and t after every store. Most of those fetches cannot change the
decision: once a row has a template and n >= k, the only questions left are whether it has
reached S emails (full), whether its template is older than A, and (Loom's scheme) whether
it has grown enough to re-form. Each is answered from the counts last read or learned by a
formation, plus the emails stored since (an upper bound on both s and n), so the store is
asked to count only rows that have no template yet or that this server has not seen within
`ttl_s` (other replicas write the same rows; a cached state is re-read that often).

`decide` is the pure part: a row's state in, Algorithm 2's actions out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from server.templates.cache import TtlLru
from storage.ports import ClusterCounts

__all__ = ["FULL_ROW_FACTOR", "GROWTH", "Decision", "RowState", "RowStates", "decide"]

FULL_ROW_FACTOR = 4
"""Loom's scheme: a row holds several templates, each of up to S emails, and at most this
many times S emails in all (a bound on the row, under Bigtable's read limits)."""

GROWTH = 1.5
"""Loom's scheme re-forms a row once its distinct recipients grew by this factor (and by at
least k) since its last formation, until it holds FULL_ROW_FACTOR x S emails: a template sharing the layout with
another becomes separable only once its own text is k-anonymous, i.e. once the row grew
(a row first formed from a few emails of several templates holds one template of their
shared layout until then). A row whose last formation left emails in no template keeps
re-forming as it grows even when full (its rarer templates may yet form)."""


@dataclass(slots=True)
class RowState:
    """One row as this server last knew it."""

    emails: int
    """s as last counted or formed, plus the emails stored since (an upper bound)."""
    users: int
    """n likewise (an upper bound: a stored email may be from a counted recipient)."""
    template_at_ms: int | None
    """t: when its templates were last formed (None: none known)."""
    formed_users: int = 0
    """n when this server last formed the row (0: never)."""
    left_out: bool = False
    """The last formation left emails in no template (Loom: more may split out later)."""
    regrow: bool = False
    """Re-form as the row grows (Loom's scheme)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """Algorithm 2's actions for one row after a store."""

    form: bool = False
    """n >= k and no template: form one now."""
    reform: bool = False
    """Re-form: the template is older than A, or (Loom) the row grew by GROWTH."""
    full: bool = False
    """n >= k, a template and s >= S: the row goes into the full-template cache."""
    formed: bool = False
    """The row has a template and n >= k (Loom then checks its emails are explained)."""


def decide(st: RowState, k: int, max_emails: int, reinduce_after_ms: int, now_ms: int) -> Decision:
    """Algorithm 2, lines 12-17, on a row's (possibly cached) state."""
    if st.users < k:
        return Decision()
    if st.template_at_ms is None:
        return Decision(form=True)
    grown = (
        st.regrow
        and (st.left_out or st.emails < FULL_ROW_FACTOR * max_emails)
        and st.formed_users > 0
        and st.users >= max(st.formed_users + k, GROWTH * st.formed_users)
    )
    aged = now_ms - st.template_at_ms >= reinduce_after_ms
    return Decision(reform=grown or aged, full=st.emails >= max_emails, formed=True)


class RowStates:
    """Bounded, expiring row states (an LRU of `size` rows, each trusted for `ttl_s`)."""

    def __init__(self, size: int, ttl_s: float, k: int, clock: Callable[[], float]) -> None:
        self._rows = TtlLru[bytes, RowState](size, ttl_s, clock)
        self._k = k

    def needs_count(self, key: bytes) -> bool:
        """Whether only the store can decide this row: unknown, or no template at n >= k yet."""
        st = self._rows.get(key)
        return st is None or st.template_at_ms is None or st.users < self._k

    def counted(self, key: bytes, counts: ClusterCounts) -> RowState:
        """The row as the store just counted it (what this server formed is kept)."""
        old = self._rows.get(key)
        st = RowState(counts.emails, counts.users, counts.template_at_ms)
        if old is not None:
            st.formed_users, st.left_out, st.regrow = old.formed_users, old.left_out, old.regrow
            if st.template_at_ms is None:  # formed here, not yet visible in a read
                st.template_at_ms = old.template_at_ms
        self._rows.put(key, st)
        return st

    def stored(self, key: bytes, emails: int) -> RowState | None:
        """`emails` more stored in a row whose cached state decides (None if not cached)."""
        st = self._rows.get(key)
        if st is not None:
            st.emails += emails
            st.users += emails
        return st

    def formed(
        self,
        key: bytes,
        *,
        emails: int,
        users: int,
        template_at_ms: int | None,
        left_out: bool,
        regrow: bool = False,
    ) -> None:
        """A formation here read the row's `emails` emails from `users` recipients.

        Emails stored while it ran are not in its counts: the row's upper bounds keep them
        (never lowered to what the formation read), so the row's growth since the formation
        is not forgotten and its next re-formation still comes.
        """
        old = self._rows.get(key)
        known_emails, known_users = emails, users
        if old is not None:
            known_emails, known_users = max(old.emails, emails), max(old.users, users)
            if template_at_ms is None:
                template_at_ms = old.template_at_ms
        state = RowState(known_emails, known_users, template_at_ms, users, left_out, regrow)
        self._rows.put(key, state)

    def get(self, key: bytes) -> RowState | None:
        """The cached state of a row, if any."""
        return self._rows.get(key)

    def forget(self, key: bytes) -> None:
        """Drops a row's state (an erasure shrank it): the store counts it again next time."""
        self._rows.pop(key)
