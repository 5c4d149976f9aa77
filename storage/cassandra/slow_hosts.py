"""Hosts marked slow by their latency, not only by a missed heartbeat, and routed around.

Yammer's "slow node": a node that is not dead but does not answer (frozen, swapping, in a
long GC pause) keeps its sockets open, so the driver thinks it up until an idle heartbeat
goes unanswered (`heartbeat_s`, and only on a connection that received nothing for a whole
interval: a few seconds). At 50 calls/s every statement sent to it meanwhile waits: a read
is saved by a speculative execution, but a conditional write (never speculated) waits half
the request timeout, and at load the calls queued behind them fill the bulkheads.

So every statement still unanswered `SLOW_AFTER_S` after it was sent marks the hosts it was
sent to as slow for `HOLD_S` (renewed while statements to it keep stalling): every query
plan then tries the hosts not marked first and a slow one only last. A host merely waiting
on a slow replica may be marked too; that only reorders its plans for a few seconds, and
when every host is slow (a starved machine) the order is the child policy's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from cassandra.policies import LoadBalancingPolicy, WrapperPolicy

__all__ = ["HOLD_S", "SLOW_AFTER_S", "AvoidSlowHosts", "SlowHosts", "watch"]

SLOW_AFTER_S = 0.5
"""A statement unanswered this long marks its hosts slow: several times a healthy p99 on a
busy machine (tens to a few hundred ms), well under the half request timeout a conditional
write waits before it is sent through another host."""

HOLD_S = 5.0
"""How long a mark lasts unless a stalled statement renews it: past the driver's heartbeat
verdict on a frozen node, short enough that a node back to health gets its share again."""


class SlowHosts:
    """The hosts marked slow, until when (monotonic); shared by every execution profile."""

    __slots__ = ("_until",)

    def __init__(self) -> None:
        self._until: dict[Any, float] = {}

    def mark(self, hosts: list[Any] | None) -> None:
        """Marks `hosts` (driver `Host`s) slow for `HOLD_S` from now."""
        until = time.monotonic() + HOLD_S
        for host in hosts or ():
            self._until[host] = until

    def slow(self) -> set[Any]:
        """The hosts whose mark has not run out."""
        if not self._until:
            return set()
        now = time.monotonic()
        return {host for host, until in list(self._until.items()) if until > now}


class AvoidSlowHosts(WrapperPolicy):  # type: ignore[misc]
    """`child`'s query plan with the hosts `marks` holds slow moved to its end."""

    def __init__(self, child: LoadBalancingPolicy, marks: SlowHosts) -> None:
        super().__init__(child)
        self._marks = marks

    def make_query_plan(self, working_keyspace: Any = None, query: Any = None) -> Iterator[Any]:
        plan = self._child_policy.make_query_plan(working_keyspace, query)
        slow = self._marks.slow()
        if not slow:
            return iter(plan)
        hosts = list(plan)
        return iter([h for h in hosts if h not in slow] + [h for h in hosts if h in slow])

    def check_supported(self) -> None:
        self._child_policy.check_supported()


def watch(
    loop: asyncio.AbstractEventLoop, rf: Any, answered: asyncio.Future[Any], marks: SlowHosts
) -> None:
    """Marks the hosts driver future `rf` was sent to slow if `answered` is not done within
    `SLOW_AFTER_S` (its speculative executions' hosts included: none of them has answered)."""
    handle = loop.call_later(SLOW_AFTER_S, _stalled, rf, answered, marks)
    answered.add_done_callback(lambda _: handle.cancel())


def _stalled(rf: Any, answered: asyncio.Future[Any], marks: SlowHosts) -> None:
    if not answered.done():
        marks.mark(list(getattr(rf, "attempted_hosts", None) or ()))
