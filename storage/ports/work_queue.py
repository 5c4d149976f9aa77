"""Iterator's work-queue port: at-least-once queues with visibility timeouts (SQS semantics).

Messages only name work; the job store holds the truth, so a duplicate or a lost message
costs a re-read, never a wrong count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["QueuedMessage", "WorkQueue"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedMessage:
    """A message taken from a work queue: invisible to others until its visibility ends."""

    body: str
    receipt: str
    """Names this delivery; deleting with a receipt of an earlier delivery does nothing."""
    receive_count: int
    """Deliveries of this message so far (1 on the first)."""


class WorkQueue(Protocol):
    """At-least-once queues of small text messages, one per hierarchy level (SQS semantics).

    A received message is hidden for `visibility_s`; unless deleted by then it is delivered
    again (to anyone). Order is not promised. Messages survive a restart of the server.
    """

    async def send(self, queue: str, bodies: Sequence[str]) -> None:
        """Enqueues every body (all or, on a fault, raise; a retry may duplicate)."""
        ...

    async def receive(
        self, queue: str, *, max_messages: int, visibility_s: float, wait_s: float
    ) -> list[QueuedMessage]:
        """Up to `max_messages` visible messages, waiting up to `wait_s` for the first."""
        ...

    async def delete(self, queue: str, receipts: Sequence[str]) -> None:
        """Deletes the messages these receipts name (stale or unknown receipts: no-op)."""
        ...

    async def set_visibility(self, queue: str, receipt: str, visibility_s: float) -> None:
        """Hides a received message for `visibility_s` from now (0: visible at once)."""
        ...

    async def discard(self, queue: str, body_prefix: str) -> int:
        """Deletes the queue's messages whose body starts with `body_prefix` (the messages of
        one job), returning how many. Every such message visible now is deleted; one a
        receiver holds at this moment may stay (on SQS, which cannot select by body) and is
        then its receiver's to drop. Safe to repeat."""
        ...

    async def depth(self, queue: str) -> int:
        """Messages in the queue, visible or not (approximate on SQS)."""
        ...

    async def close(self) -> None:
        """Releases connections."""
        ...
