"""The inbox change log: what WatchInbox and GetInboxChanges read (part of the InboxStore).

Every mutating call of an `storage.ports.InboxStore` appends, per inbox it changes, one
`InboxChange` to that inbox's log. Positions are the engine's, opaque to the domain,
ordered within an inbox by the order the store applied the changes:

- SQLite appends in the transaction of the change, at a sequence the single writer assigns:
  positions are exact and gapless in commit order, and the log can be tailed by sequence.
- Cassandra appends right after the change's write, at a position made of the appending
  server's clock (microseconds) and a random tie-breaker. A position only becomes readable
  once it is older than the engine's settle window, which outlasts any append (an append that
  took longer is written again, so a late row is never missed: a reader may then see one
  change twice, never lose one).

The log is kept for a retention window (`trim_changes`, or a TTL) and erased with its inbox
(`forget_changes`). `changed_inboxes` tails the whole log so one poll per server process wakes
every watcher it holds, whatever their number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["ChangeKind", "InboxChange", "InboxChangeLog", "LoggedChange"]

ChangeKind = Literal[
    "delivered", "marked_read", "marked_unread", "removed", "deleted", "inbox_deleted"
]
"""What changed (the gRPC enum is the handler's business)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxChange:
    """One change to one inbox, as its log holds it."""

    inbox_id: str
    kind: ChangeKind
    thread_ids: tuple[str, ...] = ()
    """The threads it touched (empty for `inbox_deleted` and `all_threads` marks)."""
    message_id: int = 0
    """The delivered message (`delivered` only)."""
    all_threads: bool = False
    """A mark of every thread of the inbox."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggedChange:
    """A change as read back: where it sits in its inbox's log, and when it was applied."""

    position: str
    changed_at_ms: int
    change: InboxChange


class InboxChangeLog(Protocol):
    """Reads of the change log every InboxStore keeps (module docstring)."""

    async def read_changes(
        self, inbox_id: str, after: str | None, limit: int
    ) -> list[LoggedChange]:
        """The inbox's readable changes strictly after position `after` (None: from the oldest
        kept), oldest first, at most `limit` (1..10,000; otherwise ValueError)."""
        ...

    async def change_head(self) -> str:
        """A position of "now": every change the log will ever make readable that is not
        readable yet comes after it, in every inbox. A stream that starts from now starts
        here."""
        ...

    async def changed_inboxes(self, after: str | None, limit: int) -> tuple[list[str], str]:
        """The inboxes with readable changes after the tail position `after` (None: the head),
        in log order with repeats removed, at most about `limit` changes' worth, and the
        position to continue from. Every change becomes readable here no later than through
        `read_changes`."""
        ...

    async def forget_changes(self, inbox_id: str) -> None:
        """Erases the inbox's log (DeleteInbox). Its later changes are logged anew."""
        ...

    async def trim_changes(self, before_ms: int) -> int:
        """Drops changes applied before `before_ms` (Unix ms); returns how many went (an
        engine whose rows expire by themselves may return 0)."""
        ...

    def position_valid(self, position: str) -> bool:
        """Whether `position` has this engine's shape (a token from elsewhere does not)."""
        ...
