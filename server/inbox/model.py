"""Inbox domain values and the pure rules of a post, free of protobuf and of any engine."""

from __future__ import annotations

import base64
import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from storage.ports import InboxEntry

__all__ = [
    "OFF_LOOP_RECIPIENTS",
    "FanoutPlan",
    "InboxFilter",
    "MarkResult",
    "Page",
    "Post",
    "PostResult",
    "delivery_id_for",
    "legacy_delivery_id_for",
    "plan_fanout",
]


class InboxFilter(enum.IntEnum):
    """Which threads a listing returns (values are stable: page tokens carry them)."""

    ALL = 1
    UNREAD = 2
    READ = 3

    def matches(self, entry: InboxEntry) -> bool:
        """Whether `entry` belongs in a listing with this filter."""
        if self is InboxFilter.UNREAD:
            return not entry.is_read
        if self is InboxFilter.READ:
            return entry.is_read
        return True


@dataclass(frozen=True, slots=True)
class Post:
    """A validated PostMessage."""

    thread_id: str
    message_id: int
    sender_inbox_id: str
    recipient_inbox_ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class PostResult:
    """What PostMessage reports."""

    delivered: bool
    """Every inbox was updated before the call returned."""
    delivery_id: str
    """Set for a background fan-out."""
    inboxes_updated: int
    """The sender plus the recipients updated so far."""


@dataclass(frozen=True, slots=True)
class Page:
    """One ListInbox page, newest activity first."""

    entries: list[InboxEntry]
    next_page_token: str
    sync_token: str = ""
    """A resume token taken before the page was read (WatchInbox from it misses nothing)."""


@dataclass(frozen=True, slots=True)
class MarkResult:
    """What MarkThreads changed."""

    changed: int
    unread_count: int


@dataclass(frozen=True, slots=True)
class FanoutPlan:
    """Who gets a post, and whether the call delivers it or the background stage does."""

    sender: str
    """Delivered as read, always within the call."""
    recipients: list[str]
    """Distinct recipient inboxes in request order, the sender left out (delivered unread)."""
    background: bool
    delivery_id: str = ""
    """The background delivery's id (`delivery_id_for`); empty for a post delivered in the
    call."""


OFF_LOOP_RECIPIENTS = 20_000
"""Above this many recipient ids, validating and de-duplicating a post runs in a worker
thread: on a 300,000-id announcement each step holds the GIL for ~50-65 ms, and on the
event loop that stalled every call the server was serving (the unread probe's slowest calls
clustered around the announcement's ack). In a thread the loop gets the GIL back every
`server.gil_switch_interval_s`."""


def plan_fanout(post: Post, *, sync_max: int) -> FanoutPlan:
    """Deduplicates and sorts the recipients (so the order is the same on a retry, whatever
    order it lists them in, which makes a stored progress count a valid resume point) and
    drops the sender, who gets the thread read even when listed as a recipient.

    Sorted, the chunks of a large fan-out write their rows in key order: the embedded
    engine's B-trees (the inbox rows, the unread rows, the change log's index) then take
    neighbouring inserts, where 300,000 recipients in request order scattered them (a
    shuffled announcement's fan-out took 1.7x as long)."""
    recipients = sorted(set(post.recipient_inbox_ids) - {post.sender_inbox_id})
    background = len(recipients) > sync_max
    return FanoutPlan(
        sender=post.sender_inbox_id,
        recipients=recipients,
        background=background,
        delivery_id=(
            delivery_id_for(post.thread_id, post.message_id, post.sender_inbox_id, recipients)
            if background
            else ""
        ),
    )


def delivery_id_for(
    thread_id: str, message_id: int, sender_inbox_id: str, recipients: Sequence[str]
) -> str:
    """The delivery id of a large post: derived from the whole request (the key, the sender
    and the planned recipient set), so a retry finds its delivery without any lookup table
    and two servers agree on it, while a post reusing the key for another sender or other
    recipients gets a delivery of its own (PostMessage's rule: the new recipients are
    delivered too). `recipients` is the plan's sorted, distinct list: the order and the
    duplicates of the request do not change the id. Ids hold no NUL (validated), so the
    joined bytes name one request only."""
    h = hashlib.sha256(b"loom.delivery.v2\x00")
    h.update(f"{thread_id}\x00{message_id}\x00{sender_inbox_id}".encode())
    h.update("".join(f"\x00{r}" for r in recipients).encode())
    return _encode(h.digest())


def legacy_delivery_id_for(thread_id: str, message_id: int) -> str:
    """The delivery id earlier releases (1.0.0 on) gave a large post, from (thread, message)
    alone: still looked up, so a retry of a post they accepted finds the delivery it was
    answered with."""
    return _encode(hashlib.sha256(f"{thread_id}\x00{message_id}".encode()).digest())


def _encode(digest: bytes) -> str:
    return "dlv_" + base64.urlsafe_b64encode(digest[:15]).decode("ascii")
