"""The announcement flood of the inbox isolation workload, run in a process of its own.

``posters`` callers post large fan-outs (recipient lists of ``sizes``) back to back until a
deadline, backing off when refused with RESOURCE_EXHAUSTED as a well-behaved client does
(``loom_client.RetryPolicy``). Run in its own process so the figure measures the server, not
a load generator sharing the server's event loop or the probe's.

Requests are pre-serialized: protobuf fields concatenate, so each recipient list is
serialized once and only the small header (thread, message id, sender) is built per post.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
from loom.v1 import inbox_pb2

from loadtest.channels import PLAINTEXT, ChannelSecurity

__all__ = ["FloodResult", "FloodSpec", "recipients", "run_flood"]


@dataclass(frozen=True, slots=True)
class FloodSpec:
    """What the flood process does."""

    target: str
    start_at: float
    """``time.monotonic()`` instant the posters start."""
    duration_s: float
    posters: int = 24
    sizes: tuple[int, ...] = (5_000, 10_000, 15_000, 20_000)
    backoff_s: float = 0.2
    timeout_s: float = 30.0
    security: ChannelSecurity = PLAINTEXT
    """TLS and bearer token for the channel (the harness's, for a secured ``--target``)."""


@dataclass(slots=True)
class FloodResult:
    """Posts by outcome, and the (thread, message id, size, delivery id) of each accepted."""

    outcomes: Counter[str] = field(default_factory=Counter)
    accepted: list[tuple[str, int, int, str]] = field(default_factory=list)


def recipients(n: int) -> list[str]:
    """The flood's recipient inboxes for a post of `n`: fan-0 .. fan-(n-1)."""
    return [f"fan-{i}" for i in range(n)]


async def _flood(spec: FloodSpec) -> FloodResult:
    result = FloodResult()
    lists = [
        inbox_pb2.PostMessageRequest(recipient_inbox_ids=recipients(n)).SerializeToString()
        for n in spec.sizes
    ]
    ids = itertools.count(1)
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    async with spec.security.channel(spec.target, options) as channel:
        post = channel.unary_unary(
            "/loom.v1.Inbox/PostMessage",
            request_serializer=None,
            response_deserializer=inbox_pb2.PostMessageResponse.FromString,
        )
        await asyncio.sleep(max(0.0, spec.start_at - time.monotonic()))
        end = spec.start_at + spec.duration_s

        async def poster(k: int) -> None:
            thread = f"flood-{k}"
            size = spec.sizes[k % len(spec.sizes)]
            while time.monotonic() < end:
                message_id = next(ids)
                head = inbox_pb2.PostMessageRequest(
                    thread_id=thread, message_id=message_id, sender_inbox_id="announcer"
                ).SerializeToString()
                try:
                    reply = await post(head + lists[k % len(lists)], timeout=spec.timeout_s)
                except grpc.aio.AioRpcError as exc:
                    result.outcomes[exc.code().name] += 1
                    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        await asyncio.sleep(spec.backoff_s)
                else:
                    result.outcomes["ACCEPTED" if reply.delivery_id else "DELIVERED"] += 1
                    result.accepted.append((thread, message_id, size, reply.delivery_id))

        await asyncio.gather(*(poster(k) for k in range(spec.posters)))
    return result


def run_flood(spec: FloodSpec) -> FloodResult:
    """Process-pool entry point."""
    return asyncio.run(_flood(spec))
